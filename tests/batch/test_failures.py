"""Partial failures, expiry, cancellation, refusals and the failover policies, each choice recorded."""

from __future__ import annotations

import pytest

from llmroute.accounting.ledger import MemorySink
from tests.batch.helpers import MODELS, client, config, requests


def _kinds(events):
    return [e["kind"] for e in events]


@pytest.mark.parametrize("kind", list(MODELS))
def test_partial_failure_with_fail_policy_keeps_errors(servers, tmp_path, kind):
    servers[kind].fail_ids = {"r1", "r4"}
    sink = MemorySink()
    with client(config(servers, tmp_path), ledger=sink) as c:
        job = c.batches.create(requests(6), model=kind, on_failure="fail")
        view = c.batches.wait(job.id)
        results = c.batches.results(job.id)
    assert (view.done, view.failed, view.total) == (4, 2, 6)
    assert not results["r1"].ok and results["r1"].error["message"]
    assert results["r0"].ok and results["r5"].ok
    rows = {r.request_id: r for r in sink.records}
    assert rows[f"{job.id}:r1"].status == "error" and rows[f"{job.id}:r1"].cost == 0
    assert rows[f"{job.id}:r0"].status == "ok"
    assert len(rows) == 6
    assert "failed" in _kinds(view.events)


def test_resubmit_policy_sends_failed_lines_again(servers, tmp_path):
    server = servers["bailian"]
    server.fail_once_ids = {"r2"}  # a transient failure: the resubmission succeeds
    with client(config(servers, tmp_path)) as c:
        job = c.batches.create(requests(4), model="bailian", on_failure="resubmit")
        view = c.batches.wait(job.id)
        results = c.batches.results(job.id)
    assert view.done == 4 and view.failed == 0
    assert results["r2"].ok
    assert len(server.jobs) == 2 and [len(j.lines) for j in server.jobs.values()] == [4, 1]
    assert "resubmit" in _kinds(view.events)


def test_resubmit_gives_up_after_max_resubmits(servers, tmp_path):
    servers["siliconflow"].fail_ids = {"r0"}
    with client(config(servers, tmp_path, batch={"max_resubmits": 2})) as c:
        job = c.batches.create(requests(2), model="siliconflow", on_failure="resubmit")
        view = c.batches.wait(job.id)
    assert (view.done, view.failed) == (1, 1)
    assert _kinds(view.events).count("resubmit") == 2
    assert len(servers["siliconflow"].jobs) == 3


def test_next_deployment_moves_failed_requests_to_the_tiers_next_batch_api(servers, tmp_path):
    servers["together"].fail_ids = {"r1", "r3"}
    cfg = config(servers, tmp_path, kinds=["together", "fireworks"])
    with client(cfg) as c:
        job = c.batches.create(requests(4), model="bulk", on_failure="next_deployment")
        view = c.batches.wait(job.id)
        results = c.batches.results(job.id)
    assert view.done == 4
    assert results["r1"].completion.route.deployment == f"fw:{MODELS['fireworks']}"
    assert results["r0"].completion.route.deployment == f"tg:{MODELS['together']}"
    [fw_job] = servers["fireworks"].jobs.values()
    assert sorted(line["custom_id"] for line in fw_job.lines) == ["r1", "r3"]
    assert any(e["kind"] == "next_deployment" and "r1" in e["detail"] for e in view.events)


def test_online_policy_runs_failures_through_the_normal_client(servers, tmp_path):
    servers["siliconflow"].fail_ids = {"r0"}
    sink = MemorySink()
    with client(config(servers, tmp_path), ledger=sink) as c:
        job = c.batches.create(requests(3), model="siliconflow", on_failure="online", feature="f")
        view = c.batches.wait(job.id)
        results = c.batches.results(job.id)
    assert view.done == 3
    assert results["r0"].served_by == "online" and results["r1"].served_by == "batch"
    assert len(servers["siliconflow"].chat_requests()) == 1
    online_rows = [r for r in sink.records if r.metadata.get("batch_custom_id") == "r0"]
    # the failed batch line and the online call, both in the batch pool
    assert sorted(r.status for r in online_rows) == ["error", "ok"] and {r.pool for r in online_rows} == {"batch"}
    assert "online" in _kinds(view.events)


def test_expired_job_fails_the_unprocessed_half(servers, tmp_path):
    servers["fireworks"].expire = True
    with client(config(servers, tmp_path)) as c:
        job = c.batches.create(requests(4), model="fireworks", on_failure="fail")
        view = c.batches.wait(job.id)
        results = c.batches.results(job.id)
    assert (view.done, view.failed) == (2, 2)
    assert results["r3"].error["code"] == "job_expired"
    assert view.parts[0]["raw_state"] == "JOB_STATE_EXPIRED"


def test_platform_refusal_fails_the_part_and_the_policy_decides(servers, tmp_path):
    servers["together"].refuse_model = MODELS["together"]
    with client(config(servers, tmp_path, kinds=["together", "bailian"])) as c:
        job = c.batches.create(requests(2), model="bulk", on_failure="next_deployment")
        view = c.batches.wait(job.id)
        results = c.batches.results(job.id)
    assert view.done == 2
    assert all(r.completion.route.provider == "bl" for r in results.values())
    assert any(p["raw_state"] == "FAILED" for p in view.parts)


def test_result_file_gone_is_a_failure_not_a_hang(servers, tmp_path):
    servers["bailian"].files_gone = True
    with client(config(servers, tmp_path)) as c:
        job = c.batches.create(requests(2), model="bailian", on_failure="fail")
        view = c.batches.wait(job.id)
    assert view.state == "done" and view.failed == 2
    assert "refused" in _kinds(view.events)


def test_cancel_keeps_results_done_so_far(servers, tmp_path):
    server = servers["siliconflow"]
    with client(config(servers, tmp_path)) as c:
        job = c.batches.create(requests(4), model="siliconflow")
        c.batches.poll(job.id)  # in_queue -> in_progress, half processed
        server.hold = True
        view = c.batches.cancel(job.id)
        view = c.batches.wait(job.id)
        results = c.batches.results(job.id)
    assert view.state == "cancelled"
    assert view.parts[0]["raw_state"] == "cancelled"
    assert view.done + view.failed == 4 and view.done >= 1
    assert {"cancel"} <= set(_kinds(view.events))
    assert all(r.ok or r.error for r in results.values())


def test_in_progress_counts_and_platform_estimate_are_reported(servers, tmp_path):
    servers["fireworks"].ticks_per_state = 3
    seen = []
    with client(config(servers, tmp_path)) as c:
        job = c.batches.create(requests(8), model="fireworks")
        c.batches.wait(job.id, on_progress=lambda v: seen.append(v.progress_line()))
    assert any("JOB" not in line and "%" in line for line in seen)
    assert seen[-1].startswith(f"{job.id}: done, 8 done / 0 failed / 8 total")


def test_signed_result_urls_get_no_api_key(servers, tmp_path):
    with client(config(servers, tmp_path)) as c:
        job = c.batches.create(requests(1), model="fireworks")
        c.batches.wait(job.id)
    signed = [r for r in servers["fireworks"].requests if r.path.startswith("/signed/")]
    assert signed and all("authorization" not in r.headers for r in signed)


@pytest.mark.parametrize("kind", ["together", "fireworks"])
def test_overloaded_polls_are_retried_with_backoff(servers, tmp_path, kind):
    servers[kind].overloaded_polls = 3
    with client(config(servers, tmp_path)) as c:
        job = c.batches.create(requests(2), model=kind)
        view = c.batches.wait(job.id)
    assert view.done == 2
    assert _kinds(view.events).count("retry") == 3
    assert servers[kind].overloaded_polls == 0


def test_a_platform_400_at_job_creation_fails_the_part(servers, tmp_path):
    servers["siliconflow"].max_lines = 2  # a platform limit llmroute does not know about
    with client(config(servers, tmp_path)) as c:
        job = c.batches.create(requests(3), model="siliconflow", on_failure="fail")
        view = c.batches.wait(job.id)
        results = c.batches.results(job.id)
    assert (view.done, view.failed) == (0, 3)
    assert results["r0"].error["code"] == "BadRequestError" and results["r0"].error["status"] == 400
    assert "refused" in _kinds(view.events)


def test_a_wrong_key_fails_typed_and_the_key_is_never_stored_or_shown(servers, tmp_path):
    cfg = config(servers, tmp_path)
    secret = "sk-wrong-secret-4242"
    cfg["providers"]["bl"]["api_key"] = secret
    with client(cfg) as c:
        job = c.batches.create(requests(2), model="bailian", on_failure="fail")
        view = c.batches.wait(job.id)
        results = c.batches.results(job.id)
    assert view.failed == 2 and results["r0"].error["code"] == "AuthenticationError"
    assert secret not in repr(view) and secret not in repr(results)
    store_bytes = b"".join(p.read_bytes() for p in tmp_path.glob("jobs.sqlite*"))
    assert secret.encode() not in store_bytes
