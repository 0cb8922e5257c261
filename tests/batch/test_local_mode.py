"""`[batch] mode = "local"` / `"auto"`: the same batch code on a self-hosted server with no batch API
(the real llama.cpp server): requests run through the online path, into the same job store, results,
resume, failure policy, ledger and exit statuses."""

from __future__ import annotations

import asyncio
import io
import json

import pytest

import llmroute as L
from llmroute.accounting.sinks import read_records
from llmroute.cli.batch_command import EXIT_OK, EXIT_SOME_FAILED, main
from tests.servers.llamacpp import MODEL_ALIAS


def _config(llama_server, tmp_path, mode="auto") -> dict:
    return {
        "providers": {"local": {"kind": "llamacpp", "base_url": llama_server.base_url}},
        "tiers": {"bulk": {"deployments": [f"local:{MODEL_ALIAS}"]}},
        "pricing": {"local:*": {"input_per_million": 0.05, "output_per_million": 0.10, "currency": "USD"}},
        "batch": {"store": str(tmp_path / "jobs.sqlite"), "mode": mode, "poll_interval_s": 0.001},
        "ledger": {"path": str(tmp_path / "ledger.sqlite")},
    }


def _requests(n):
    return [{"custom_id": f"r{i}", "messages": [{"role": "user", "content": f"Say the number {i}."}],
             "max_tokens": 4} for i in range(n)]


def test_a_job_runs_through_the_online_path_with_results_and_ledger_rows(llama_server, tmp_path):
    with L.Client(_config(llama_server, tmp_path)) as client:
        view = client.batches.create(_requests(3), model="bulk", feature="nightly", metadata={"team": "data"})
        view = client.batches.wait(view.id)
        results = client.batches.results(view.id)
    assert view.state == "done" and view.done == 3 and view.failed == 0 and view.parts == []
    assert sorted(results) == ["r0", "r1", "r2"]
    for result in results.values():
        assert result.served_by == "local" and result.completion.choices[0].message.content
        assert result.completion.route.pool == "batch" and result.completion.route.deployment == f"local:{MODEL_ALIAS}"
        assert result.cost.amount is not None and result.cost.amount > 0  # the online price: no batch discount here
    rows = [r for r in read_records(tmp_path / "ledger.sqlite")
            if r.metadata.get("batch_job") == view.id and r.status == "ok"]  # (a retried attempt has a row too)
    assert sorted(r.metadata["batch_custom_id"] for r in rows) == ["r0", "r1", "r2"]  # one answer per request
    assert all(r.pool == "batch" and r.feature == "nightly" and r.metadata["team"] == "data" for r in rows)


def test_a_stored_job_resumes_in_another_client(llama_server, tmp_path):
    cfg = _config(llama_server, tmp_path, mode="local")
    with L.Client(cfg) as first:
        job_id = first.batches.create(_requests(2), model="bulk", submit=False).id
    with L.Client(cfg) as second:  # a new process would do the same: the store holds the job
        view = second.batches.wait(job_id)
        assert view.done == 2 and set(second.batches.results(job_id)) == {"r0", "r1"}


def test_async_client_runs_a_local_job(llama_server, tmp_path):
    async def main_():
        async with L.AsyncClient(_config(llama_server, tmp_path)) as client:
            view = await client.batches.create(_requests(2), model="bulk")
            return await client.batches.wait(view.id)

    assert asyncio.run(main_()).done == 2


def test_a_failed_request_is_a_failure_of_the_job_and_of_the_command(llama_server, tmp_path):
    cfg_path = tmp_path / "llmroute.toml"
    cfg = _config(llama_server, tmp_path)
    cfg_path.write_text("\n".join([
        '[providers.local]', 'kind = "llamacpp"', f'base_url = "{llama_server.base_url}"', "",
        '[tiers.bulk]', f'deployments = ["local:{MODEL_ALIAS}"]', "",
        '[pricing."local:*"]', "input_per_million = 0.05", "output_per_million = 0.10", "",
        "[batch]", f'store = "{cfg["batch"]["store"]}"', 'mode = "auto"', "",
        "[ledger]", f'path = "{cfg["ledger"]["path"]}"', ""]))
    lines = _requests(2) + [{"custom_id": "too-long", "messages": [{"role": "user", "content": "word " * 5000}],
                             "max_tokens": 4}]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in lines))
    out, err = io.StringIO(), io.StringIO()
    code = main(["--config", str(cfg_path), "submit", str(src), "--model", "bulk", "--wait"], out=out, err=err)
    assert code == EXIT_SOME_FAILED, (out.getvalue(), err.getvalue())
    assert "too-long: ContextLengthError" in err.getvalue()
    src.write_text("".join(json.dumps(r) + "\n" for r in _requests(1)))
    assert main(["--config", str(cfg_path), "submit", str(src), "--model", "bulk", "--wait"], out=out,
                err=err) == EXIT_OK


def test_platform_mode_refuses_a_tier_without_a_batch_api_and_says_how(llama_server, tmp_path):
    with L.Client(_config(llama_server, tmp_path, mode="platform")) as client:
        with pytest.raises(L.RoutingError, match='mode = "auto"'):
            client.batches.create(_requests(1), model="bulk")
