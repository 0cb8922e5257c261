"""Each platform's batch lifecycle end to end, over real sockets to the loopback batch servers."""

from __future__ import annotations


import pytest

from llmroute.accounting.ledger import MemorySink
from tests.batch.helpers import MODELS, PROVIDER, client, config, requests

KINDS = list(MODELS)


@pytest.mark.parametrize("kind", KINDS)
def test_submit_wait_results_every_platform(servers, tmp_path, kind):
    sink = MemorySink()
    with client(config(servers, tmp_path), ledger=sink) as c:
        job = c.batches.create(requests(5), model=kind, feature="labels", metadata={"team": "data"})
        assert job.total == 5 and job.parts and job.parts[0]["platform_job_id"]
        view = c.batches.wait(job.id)
        assert view.state == "done" and view.done == 5 and view.failed == 0
        results = c.batches.results(job.id)
    assert sorted(results) == [f"r{i}" for i in range(5)]
    r3 = results["r3"].completion
    assert r3.choices[0].message.content == "echo: item number 3"
    assert r3.usage.prompt_tokens == 3 and r3.usage.completion_tokens == 2
    assert r3.route.pool == "batch" and r3.route.deployment == f"{PROVIDER[kind]}:{MODELS[kind]}"
    assert r3.cost is not None and r3.cost.amount is not None
    rows = [r for r in sink.records if r.pool == "batch"]
    assert sorted(r.request_id for r in rows) == sorted(f"{job.id}:r{i}" for i in range(5))
    assert all(r.metadata["batch_job"] == job.id and r.metadata["team"] == "data" for r in rows)
    assert all(r.feature == "labels" and r.status == "ok" for r in rows)
