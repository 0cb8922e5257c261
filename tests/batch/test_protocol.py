"""Sans-I/O parts of the batch core: request checks, splitting, status names, result lines, backoff."""

from __future__ import annotations

import json

import pytest

from llmroute import InvalidRequestError
from llmroute.batch import platforms as P
from llmroute.batch.files import read_requests, split_parts
from llmroute.batch.platforms import Limits, Resp
from llmroute.batch.results import read_outcomes
from tests.batch.helpers import client, config, requests


def _line(i, size=10):
    return (f"c{i}", {"custom_id": f"c{i}", "body": {"messages": [{"role": "user", "content": "x" * size}]}})


def test_split_cuts_at_lines_and_bytes_and_keeps_order():
    lines = [_line(i) for i in range(7)]
    parts = split_parts("d", lines, Limits(max_lines=3, max_bytes=10_000))
    assert [p.custom_ids for p in parts] == [["c0", "c1", "c2"], ["c3", "c4", "c5"], ["c6"]]
    one = len(parts[0].content) // 3
    by_bytes = split_parts("d", lines, Limits(max_lines=None, max_bytes=2 * one + 1))
    assert [len(p.custom_ids) for p in by_bytes] == [2, 2, 2, 1]
    assert all(len(p.content) <= 2 * one + 1 for p in by_bytes)
    with pytest.raises(InvalidRequestError, match="line limit"):
        split_parts("d", [_line(0, size=200)], Limits(max_lines=None, max_bytes=10_000, max_line_bytes=100))


@pytest.mark.parametrize("bad, field", [
    ([{"messages": [{"role": "user", "content": "x"}]}], "requests[0].custom_id"),
    ([{"custom_id": "a", "messages": []}], "requests[0].messages"),
    ([{"custom_id": "a", "messages": [{"role": "user", "content": "x"}]}] * 2, "requests[1].custom_id"),
    ([{"custom_id": "x" * 65, "messages": [{"role": "user", "content": "x"}]}], "requests[0].custom_id"),
    ([{"custom_id": "a", "url": "/v1/audio/speech", "body": {"input": "x"}}], "requests[0].url"),
    ([{"custom_id": "a", "url": "/v1/embeddings", "body": {"text": "x"}}], "requests[0].body.input"),
    ([{"custom_id": "a", "input": []}], "requests[0].input"),
])
def test_bad_requests_are_refused_before_any_io(bad, field):
    with pytest.raises(InvalidRequestError) as info:
        read_requests(bad)
    assert info.value.field == field


def test_openai_batch_lines_and_jsonl_files_are_read(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps({"custom_id": "a", "method": "POST", "url": "/v1/chat/completions",
                                "body": {"model": "small", "messages": [{"role": "user", "content": "hi"}],
                                         "stream": True}}) + "\n\n")
    [req] = read_requests(path)
    assert req.custom_id == "a" and req.model == "small" and "stream" not in req.body


class _Provider:
    name, kind, api_key, headers, base_url = "p", "together", None, {}, "http://127.0.0.1:1/v1"


@pytest.mark.parametrize("cls, raw, state", [
    (P.TogetherBatch, {"id": "j", "status": "IN_PROGRESS", "progress": 40}, "in_progress"),
    (P.TogetherBatch, {"id": "j", "status": "EXPIRED"}, "expired"),
    (P.SiliconFlowBatch, {"id": "j", "status": "in_queue", "request_counts": None}, "queued"),
    (P.BatchProtocol, {"id": "j", "status": "finalizing"}, "finalizing"),
    (P.BatchProtocol, {"id": "j", "status": "some_new_state"}, "in_progress"),
])
def test_status_names_map_to_one_vocabulary(cls, raw, state):
    status = cls(_Provider(), "p:m").read_status(raw)
    assert status.state == state and status.raw_state == raw["status"]


def test_fireworks_states_and_progress():
    provider = _Provider()
    provider.base_url = "http://127.0.0.1:1/inference/v1"  # the chat base; batch runs on the account's root
    fw = P.FireworksBatch(provider, "p:m", account_id="acct")
    assert fw.account_root == "http://127.0.0.1:1/v1/accounts/acct"
    for raw, state in [("JOB_STATE_PENDING", "queued"), ("JOB_STATE_WRITING_RESULTS", "finalizing"),
                       ("JOB_STATE_COMPLETED", "completed"), ("JOB_STATE_RE_QUEUEING", "queued")]:
        assert fw.read_status({"state": raw}).state == state
    s = fw.read_status({"state": "JOB_STATE_RUNNING", "jobProgress": {"totalInputRequests": 10,
                                                                      "successfullyProcessedRequests": 4,
                                                                      "failedRequests": 1, "percent": 50}})
    assert (s.total, s.completed, s.failed, s.percent) == (10, 4, 1, 50.0)


def test_fireworks_needs_an_account_id(servers, tmp_path):
    cfg = config(servers, tmp_path, batch={"accounts": {}})
    with client(cfg) as c:
        with pytest.raises(Exception, match=r"batch\.accounts\.fw"):
            c.batches.create(requests(1), model="fireworks")
        assert c.batches.list() == []  # refused before the job was stored


def test_a_self_hosted_deployment_has_no_batch_api(servers, tmp_path):
    cfg = config(servers, tmp_path)
    cfg["providers"]["local"] = {"kind": "vllm", "base_url": "http://127.0.0.1:9/v1"}
    cfg.setdefault("pricing", {})["local:*"] = {"input_per_million": 0, "output_per_million": 0}
    with client(cfg) as c, pytest.raises(Exception, match="no batch API"):
        c.batches.create(requests(1), model="local:m")


def test_result_and_error_lines_in_each_shape():
    completion = {"choices": [{"message": {"content": "ok"}}], "usage": {"prompt_tokens": 1}}
    out = "\n".join(json.dumps(x) for x in [
        {"custom_id": "a", "response": {"status_code": 200, "body": completion}},
        {"custom_id": "b", "response": completion},  # Fireworks-style bare completion
        {"custom_id": "c", "response": {"status_code": 429, "body": {"error": {"message": "slow", "code": "rl"}}}},
    ]).encode()
    err = json.dumps({"custom_id": "d", "error": {"code": "bad", "message": "no"}}).encode()
    got = read_outcomes(out, err)
    assert got["a"].body and got["b"].body
    assert got["c"].error == {"code": "rl", "message": "slow", "status": 429}
    assert got["d"].error["code"] == "bad"


def test_a_platform_error_answer_is_typed():
    proto = P.BatchProtocol(_Provider(), "p:m")
    body = json.dumps({"error": {"message": "Invalid API key", "code": "invalid_api_key"}}).encode()
    from llmroute import AuthenticationError

    with pytest.raises(AuthenticationError, match="batch status"):
        proto.check(Resp(401, {}, body), "status")


def test_poll_backoff_grows_while_nothing_changes_and_resets_on_progress(servers, tmp_path):
    clock = [1000.0]
    cfg = config(servers, tmp_path, batch={"poll_interval_s": 10, "max_poll_interval_s": 40, "backoff": 2})
    servers["bailian"].ticks_per_state = 100
    with client(cfg) as c:
        from llmroute.batch import Batches

        batches = Batches(c, clock=lambda: clock[0], sleep=lambda s: clock.__setitem__(0, clock[0] + s))
        job = batches.create(requests(4), model="bailian")
        waits = []
        for _ in range(5):
            before = clock[0]
            view = batches.poll(job.id)
            waits.append(view.next_action_at - before)
            clock[0] = view.next_action_at
        batches.close()
    # first poll after submission: progress changed (validating -> counted) resets; then 20, 40, 40
    assert waits[0] == 10 and waits[-1] == 40 and sorted(waits[1:]) == waits[1:]
