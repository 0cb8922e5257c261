"""Splitting a job over several platform files and joining it back; the async client; routing."""

from __future__ import annotations

import asyncio

import pytest

from llmroute import AsyncClient
from llmroute.accounting.ledger import MemorySink
from llmroute.batch import platforms as P
from tests.batch.helpers import MODELS, client, config, requests


def test_job_over_the_line_limit_is_split_and_joined(servers, tmp_path, monkeypatch):
    server = servers["siliconflow"]
    server.max_lines = 4  # the platform refuses a bigger file (its real limit is 5,000 lines)
    monkeypatch.setitem(P.LIMITS, "siliconflow", P.Limits(max_lines=4, max_bytes=1 << 30))
    with client(config(servers, tmp_path)) as c:
        job = c.batches.create(requests(10), model="siliconflow")
        assert len(job.parts) == 3
        view = c.batches.wait(job.id)
        results = c.batches.results(job.id)
    assert view.done == 10 and sorted(results) == sorted(f"r{i}" for i in range(10))
    assert sorted(len(j.lines) for j in server.jobs.values()) == [2, 4, 4]
    assert {j.model for j in server.jobs.values()} == {MODELS["siliconflow"]}


def test_requests_for_different_models_go_to_separate_files(servers, tmp_path):
    reqs = requests(4)
    reqs[1]["model"] = "together"  # a per-request tier: one model per file
    with client(config(servers, tmp_path)) as c:
        job = c.batches.create(reqs, model="bailian")
        view = c.batches.wait(job.id)
        results = c.batches.results(job.id)
    assert view.done == 4 and len(view.parts) == 2
    assert results["r1"].completion.route.provider == "tg" and results["r0"].completion.route.provider == "bl"


def test_async_client_batches(servers, tmp_path):
    async def run():
        sink = MemorySink()
        async with AsyncClient(config(servers, tmp_path), ledger=sink) as c:
            servers["together"].fail_ids = {"r2"}
            job = await c.batches.create(requests(3), model="together", on_failure="online")
            view = await c.batches.wait(job.id)
            return view, c.batches.results(job.id), sink

    view, results, sink = asyncio.run(run())
    assert view.done == 3 and results["r2"].served_by == "online"
    assert len([r for r in sink.records if r.pool == "batch"]) == 4  # 3 batch lines + the online call


def test_auto_routes_each_request_through_the_rules(servers, tmp_path):
    cfg = config(servers, tmp_path)
    cfg["routing"] = {"rules": [{"when": {"feature": "legal"}, "tier": "bailian", "pool": "batch"}],
                      "default": "together"}
    with client(cfg) as c:
        job = c.batches.create(requests(2), model="auto", feature="legal")
        view = c.batches.wait(job.id)
        results = c.batches.results(job.id)
    assert view.done == 2 and {r.completion.route.provider for r in results.values()} == {"bl"}


def test_unknown_failure_policy_and_window_are_refused(servers, tmp_path):
    from llmroute import InvalidRequestError

    with client(config(servers, tmp_path)) as c:
        with pytest.raises(InvalidRequestError, match="on_failure"):
            c.batches.create(requests(1), model="bailian", on_failure="retry")
        with pytest.raises(InvalidRequestError, match="completion_window"):
            c.batches.create(requests(1), model="siliconflow", completion_window="400h")
        assert c.batches.list() == []


def test_embedding_requests_go_to_their_own_file_on_bailian(servers, tmp_path):
    from decimal import Decimal

    cfg = config(servers, tmp_path)
    cfg["pricing"] = {"bl:text-embedding-v4": {"input_per_million": "0.5", "output_per_million": "0",
                                               "currency": "CNY"}}
    reqs = requests(2) + [{"custom_id": "e0", "model": "bl:text-embedding-v4", "input": ["alpha beta", "gamma"]}]
    with client(cfg) as c:
        job = c.batches.create(reqs, model="bailian")
        view = c.batches.wait(job.id)
        results = c.batches.results(job.id)
    assert view.done == 3 and len(view.parts) == 2
    e0 = results["e0"]
    assert e0.ok and e0.completion is None and [d["index"] for d in e0.embedding["data"]] == [0, 1]
    assert e0.cost.amount == 3 * Decimal("0.25") / 10**6 and e0.cost.currency == "CNY"  # 3 tokens, batch x0.5
    urls = {line.get("url") for j in servers["bailian"].jobs.values() for line in j.lines}
    assert urls == {"/v1/chat/completions", "/v1/embeddings"}


def test_embeddings_are_refused_where_the_batch_api_has_none(servers, tmp_path):
    from llmroute import InvalidRequestError

    with client(config(servers, tmp_path)) as c, pytest.raises(InvalidRequestError, match="/v1/embeddings"):
        c.batches.create([{"custom_id": "e", "input": "x"}], model="together")


def test_async_client_batches_across_two_event_loops(servers, tmp_path):
    c = AsyncClient(config(servers, tmp_path))
    job = asyncio.run(c.batches.create(requests(2), model="together"))  # submitted on one loop
    view = asyncio.run(c.batches.wait(job.id))  # waited for on another: the batch HTTP pool is per loop
    assert view.done == 2 and sorted(c.batches.results(job.id)) == ["r0", "r1"]
    asyncio.run(c.aclose())
