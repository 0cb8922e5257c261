"""Failover that rescues (issue 10): hangs, stalls, cuts, bad events, caller mistakes and hidden sends.

Every test drives `Client` / `AsyncClient` against the timed loopback fault servers: "a" is the
primary, scripted to misbehave; "b" (and "c") are backups. The first group runs with the shipped
defaults (no timeout, no resilience key set) and checks the rescue bounds the README's defaults table
promises; the rest set short limits so the same rules are exercised in every mode quickly.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

import llmroute as L
from llmroute import errors as E
from tests.resilience.client_helpers import MESSAGES, MODES, TIER, Caller, dep, sent, text_of, tier_config
from tests.servers.fault import (
    close_before,
    error_event,
    malformed,
    reset_during,
    slow_headers,
    slow_ttft,
    stall_after,
    status,
)
from tests.servers.script import Reply

A, B, C = dep("a"), dep("b"), dep("c")
PIECES = ["one", " two", " three", " four"]
B_TEXT = "Hello from fault"  # what a fault server answers when nothing is scripted
STREAM_MODES = [m for m in MODES if m.endswith("stream")]
PLAIN_MODES = [m for m in MODES if not m.endswith("stream")]

# Short limits, so a silent or stalled attempt is abandoned in half a second.
FAST = {"connect_timeout_s": 2.0, "ttft_timeout_s": 0.5}
FAST_RESILIENCE = {"stall_timeout_s": 0.5, "ttft_per_1k_tokens_s": 0.0}


def defaults_config(servers: dict[str, Any], **kw: Any) -> dict[str, Any]:
    """A tier of the given servers with nothing but the shipped defaults (no QUIET layer)."""
    config = tier_config(servers, **kw)
    config["resilience"] = {}
    return config


def fast_config(servers: dict[str, Any], *, resilience: dict[str, Any] | None = None,
                deployments: list[Any] | None = None, primary_ttft_s: float | None = None,
                **kw: Any) -> dict[str, Any]:
    """Short limits on the primary "a" only: the backups keep the defaults, so a loaded machine
    cannot make a healthy backup look silent. Tests whose primary answers before it fails pass a
    longer `primary_ttft_s`, so its first piece is never late on a loaded machine."""
    listed = deployments if deployments is not None else [dep(name) for name in servers]
    limits = {**FAST, **FAST_RESILIENCE}
    if primary_ttft_s is not None:
        limits["ttft_timeout_s"] = primary_ttft_s
    fast_a = [{"id": A, **limits} if d == A else d for d in listed]
    return tier_config(servers, resilience=resilience, deployments=fast_a, **kw)


def continuing(name: str) -> dict[str, Any]:
    """A deployment table for server `name` that can continue a partial answer."""
    return {"id": dep(name), "continue_prefill": True}


# ---------------------------------------------------------------------------------------------
# with the defaults: the rescue bounds of the README's table (a hang, a slow first token, a stall)


def timed_call(mode: str, config: dict[str, Any]) -> tuple[Any, float]:
    """One call in `mode`: (what the caller got, seconds it took)."""
    with Caller(mode, config) as call:
        started = time.monotonic()
        result = call()
        return result, time.monotonic() - started


@pytest.mark.parametrize("mode", ["sync", "async-stream"])
def test_defaults_rescue_a_primary_that_accepts_and_never_answers_within_15s(servers, mode):
    servers["a"].push(slow_headers(40.0))  # the status line never comes within the call
    result, elapsed = timed_call(mode, defaults_config({"a": servers["a"], "b": servers["b"]}))
    assert result.text == B_TEXT
    assert sent(result.route) == [(A, "error"), (B, "ok")]
    assert result.route.attempts[0].error_type == "APITimeoutError"
    assert servers["a"].calls == 1  # a silent deployment stays silent: not retried
    assert elapsed < 15.0, elapsed


@pytest.mark.parametrize("mode", ["sync-stream", "async"])
def test_defaults_rescue_a_20s_first_token_within_15s(servers, mode):
    servers["a"].push(slow_ttft(20.0, PIECES))
    result, elapsed = timed_call(mode, defaults_config({"a": servers["a"], "b": servers["b"]}))
    assert result.text == B_TEXT
    assert sent(result.route) == [(A, "error"), (B, "ok")]
    assert servers["a"].calls == 1
    assert elapsed < 15.0, elapsed


@pytest.mark.parametrize("mode", ["sync", "async-stream"])
def test_defaults_rescue_a_30s_stall_after_content_within_15s(servers, mode):
    servers["a"].push(stall_after(2, 30.0, PIECES))
    servers["b"].push(Reply(pieces=[" three", " four"]))
    config = defaults_config({"a": servers["a"], "b": servers["b"]}, deployments=[A, continuing("b")])
    result, elapsed = timed_call(mode, config)
    assert result.text == "one two three four"  # continued on b, nothing repeated, nothing missing
    assert sent(result.route) == [(A, "interrupted"), (B, "ok")]
    assert result.route.recovery == "continued"
    assert elapsed < 15.0, elapsed


# ---------------------------------------------------------------------------------------------
# each fault, every mode, with short limits


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fault", ["silent_after_accept", "silent_after_headers", "slow_first_token"])
def test_a_silent_primary_is_abandoned_and_not_retried(servers, mode, fault):
    make = {"silent_after_accept": lambda: slow_headers(5.0),
            "silent_after_headers": lambda: slow_ttft(5.0),
            "slow_first_token": lambda: slow_ttft(3.0, PIECES)}[fault]
    servers["a"].push(make())
    config = fast_config({"a": servers["a"], "b": servers["b"]}, resilience={"max_retries": 2})
    with Caller(mode, config) as call:
        result = call()
    assert result.text == B_TEXT
    assert sent(result.route) == [(A, "error"), (B, "ok")]
    error = result.route.attempts[0].error
    assert isinstance(error, E.APITimeoutError) and error.timeout in ("ttft", "total")
    assert servers["a"].calls == 1


@pytest.mark.parametrize("mode", MODES)
def test_without_a_backup_a_silent_deployment_is_retried(servers, mode):
    servers["a"].push(slow_ttft(5.0))
    config = fast_config({"a": servers["a"]}, resilience={"max_retries": 1, "backoff_base_s": 0.01})
    with Caller(mode, config) as call:
        result = call()
    assert sent(result.route) == [(A, "error"), (A, "ok")]


@pytest.mark.parametrize("mode", MODES)
def test_a_stall_after_content_is_finished_on_a_continuing_backup(servers, mode):
    servers["a"].push(stall_after(2, 20.0, PIECES))
    servers["b"].push(Reply(pieces=[" three", " four"]))
    config = fast_config(primary_ttft_s=2.0, servers={"a": servers["a"], "b": servers["b"]},
                         deployments=[A, continuing("b")])
    with Caller(mode, config) as call:
        result = call()
    assert result.text == "one two three four"
    assert sent(result.route) == [(A, "interrupted"), (B, "ok")]
    stall = result.route.attempts[0].error
    assert isinstance(stall, E.APITimeoutError) and stall.timeout == "stall"
    assert result.route.recovery == "continued" and result.route.resumed_at == [len("one two")]
    assert result.route.attempts[1].note == "continuation"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fault", ["reset", "error_event"])
def test_a_cut_answer_is_continued_with_the_partial_answer_as_a_prefill(servers, mode, fault):
    servers["a"].push(reset_during(2, PIECES, gap_s=0.02) if fault == "reset" else error_event(2, PIECES))
    servers["b"].push(Reply(pieces=[" three", " four"]))
    config = fast_config(primary_ttft_s=5.0, servers={"a": servers["a"], "b": servers["b"]},
                         deployments=[A, continuing("b")])
    with Caller(mode, config) as call:
        result = call(max_tokens=50)
    assert result.text == "one two three four"
    sent_to_b = servers["b"].requests[-1].json
    assert sent_to_b["messages"][:-1] == MESSAGES
    assert sent_to_b["messages"][-1] == {"role": "assistant", "content": "one two"}
    assert sent_to_b["continue_final_message"] is True and sent_to_b["add_generation_prompt"] is False
    assert sent_to_b["max_tokens"] < 50  # the cap shrinks by what the cut answer already used
    completion = result.completion
    usages = [a.usage for a in result.route.attempts]
    assert completion.usage.completion_tokens == sum(u.completion_tokens for u in usages)
    assert completion.usage.prompt_tokens == sum(u.prompt_tokens for u in usages)
    assert completion.choices[0].finish_reason == "stop"


@pytest.mark.parametrize("mode", STREAM_MODES)
def test_a_continued_stream_marks_where_the_continuation_starts(servers, mode):
    servers["a"].push(reset_during(2, PIECES, gap_s=0.02))
    servers["b"].push(Reply(pieces=[" three", " four"]))
    config = fast_config(primary_ttft_s=5.0, servers={"a": servers["a"], "b": servers["b"]},
                         deployments=[A, continuing("b")])
    with Caller(mode, config) as call:
        if call.is_async:
            async def collect():
                stream = await call.client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True)
                return [c async for c in stream], stream
            chunks, stream = call.loop.run_until_complete(collect())
        else:
            stream = call.client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True)
            chunks = list(stream)
    content = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert [c.choices[0].delta.content for c in content] == PIECES[:2] + [" three", " four"]
    assert [c.resumed for c in content] == [False, False, True, False]
    assert stream.response.route.resumed_at == [len("one two")]
    assert stream.response.choices[0].message.content == "one two three four"


@pytest.mark.parametrize("mode", PLAIN_MODES)
def test_a_cut_plain_answer_is_restarted_where_no_backup_can_continue(servers, mode):
    servers["a"].push(reset_during(2, PIECES, gap_s=0.02))
    with Caller(mode, fast_config(primary_ttft_s=5.0, servers={"a": servers["a"], "b": servers["b"]})) as call:
        result = call()
    assert result.text == B_TEXT  # the caller never sees half of a plain answer
    assert sent(result.route) == [(A, "interrupted"), (B, "ok")]
    assert result.route.recovery == "restarted" and result.route.attempts[1].note == "restart"
    assert servers["b"].requests[-1].json["messages"] == MESSAGES  # from scratch: no prefill


@pytest.mark.parametrize("mode", PLAIN_MODES)
@pytest.mark.parametrize("recovery", ["continued", "restarted"])
def test_a_cut_plain_answer_is_finished_on_a_backup_that_reads_plain_calls_plain(servers, mode, recovery):
    # The backup's policy says plain_via_stream = false: a restart there is read as one JSON body, a
    # continuation is still streamed (its text is joined to the cut answer chunk by chunk).
    servers["a"].push(reset_during(2, PIECES, gap_s=0.02))
    servers["b"].push(Reply(pieces=[" three", " four"]) if recovery == "continued" else Reply(pieces=["all", " again"]))
    backup = {"id": B, "plain_via_stream": False, "continue_prefill": recovery == "continued"}
    config = fast_config(primary_ttft_s=5.0, servers={"a": servers["a"], "b": servers["b"]}, deployments=[A, backup])
    with Caller(mode, config) as call:
        result = call()
    assert result.text == ("one two three four" if recovery == "continued" else "all again")
    assert sent(result.route) == [(A, "interrupted"), (B, "ok")]
    assert result.route.recovery == recovery
    assert servers["b"].requests[-1].json.get("stream") is (True if recovery == "continued" else None)


@pytest.mark.parametrize("mode", STREAM_MODES)
def test_a_backup_that_refuses_the_prefill_never_becomes_the_final_error(servers, mode):
    servers["a"].push(reset_during(2, PIECES, gap_s=0.02))
    servers["b"].push(status(400, message="Assistant response prefill is incompatible with enable_thinking"))
    config = fast_config(primary_ttft_s=5.0, servers={"a": servers["a"], "b": servers["b"]},
                         deployments=[A, continuing("b")])
    with Caller(mode, config) as call, pytest.raises(E.StreamInterruptedError) as info:
        call()
    err = info.value
    assert err.partial_text == "one two"
    assert [(a.deployment, a.status) for a in err.attempts] == [(A, "interrupted"), (B, "error")]
    assert "cannot continue a partial answer" in (err.attempts[1].note or "") or err.attempts[1].error_type


@pytest.mark.parametrize("mode", PLAIN_MODES)
def test_a_refused_prefill_moves_a_plain_call_on_to_a_restart(servers, mode):
    servers["a"].push(reset_during(2, PIECES, gap_s=0.02))
    servers["b"].push(status(400, message="prefill not supported"))
    config = fast_config(primary_ttft_s=5.0, servers={"a": servers["a"], "b": servers["b"], "c": servers["c"]},
                         deployments=[A, continuing("b"), C])
    with Caller(mode, config) as call:
        result = call()
        assert call.health()[B].failures_in_window == 0  # a refused prefill is not an outage
    assert result.text == B_TEXT
    # restarted from scratch on the backup that refused the prefill (the caller saw nothing)
    assert sent(result.route) == [(A, "interrupted"), (B, "error"), (B, "ok")]
    assert result.route.recovery == "restarted" and result.route.attempts[2].note == "restart"
    assert servers["b"].requests[-1].json["messages"] == MESSAGES  # no prefill
    assert servers["c"].calls == 0


@pytest.mark.parametrize("mode", PLAIN_MODES)
def test_a_plain_call_whose_only_backup_refuses_the_prefill_restarts_there(servers, mode):
    servers["a"].push(reset_during(2, PIECES, gap_s=0.02))
    servers["b"].push(status(400, message="assistant prefill is not supported"))
    config = fast_config(primary_ttft_s=5.0, servers={"a": servers["a"], "b": servers["b"]},
                         deployments=[A, continuing("b")])
    with Caller(mode, config) as call:
        result = call()
        records = call.client._engine.ledger.records
    assert result.text == B_TEXT
    assert sent(result.route) == [(A, "interrupted"), (B, "error"), (B, "ok")]
    assert result.route.recovery == "restarted"
    assert servers["b"].requests[-1].json["messages"] == MESSAGES
    assert [r.status for r in records] == ["interrupted", "error", "ok"]


@pytest.mark.parametrize("mode", PLAIN_MODES)
@pytest.mark.parametrize("recovery", ["continued", "restarted"])
def test_a_cut_plain_answer_on_its_only_deployment_is_taken_up_there_again(servers, mode, recovery):
    # One deployment (what Client(base_url=...) makes), the shipped defaults (max_retries 2): a plain
    # call's answer reset mid-way is one broken connection, and its caller has seen nothing. It is
    # continued there when the server can continue a prefill (llama.cpp, vLLM...), else answered again
    # from scratch, as a retry: as a stream would be continued there, as openai-python retries a
    # body read that failed.
    servers["a"].push(reset_during(2, PIECES, gap_s=0.02))
    if recovery == "continued":
        servers["a"].push(Reply(pieces=[" three", " four"]))
    only = continuing("a") if recovery == "continued" else A
    with Caller(mode, defaults_config({"a": servers["a"]}, deployments=[only])) as call:
        result = call()
        records = call.client._engine.ledger.records
    assert result.text == ("one two three four" if recovery == "continued" else B_TEXT)
    assert sent(result.route) == [(A, "interrupted"), (A, "ok")]
    assert result.route.recovery == recovery and "retry" in (result.route.attempts[1].note or "")
    assert [r.status for r in records] == ["interrupted", "ok"]
    last = servers["a"].requests[-1].json["messages"]
    assert last == (MESSAGES + [{"role": "assistant", "content": "one two"}] if recovery == "continued" else MESSAGES)


@pytest.mark.parametrize("mode", PLAIN_MODES)
def test_a_plain_answer_cut_twice_on_its_only_deployment_ends_with_the_cut(servers, mode):
    # The cut deployment takes the answer up once; cut again, the call ends (bounded).
    servers["a"].push(reset_during(2, PIECES, gap_s=0.02), reset_during(1, PIECES, gap_s=0.02))
    with Caller(mode, defaults_config({"a": servers["a"]}, deployments=[A])) as call, \
            pytest.raises(E.APIConnectionError) as info:
        call()
    assert sent(info.value.attempts) == [(A, "interrupted"), (A, "interrupted")]
    assert servers["a"].calls == 2


@pytest.mark.parametrize("mode", STREAM_MODES)
def test_stream_recovery_raise_keeps_the_old_behaviour(servers, mode):
    servers["a"].push(reset_during(2, PIECES, gap_s=0.02))
    config = fast_config(primary_ttft_s=5.0, servers={"a": servers["a"], "b": servers["b"]},
                         deployments=[A, continuing("b")],
                         tier={"stream_recovery": "raise"})
    with Caller(mode, config) as call, pytest.raises(E.StreamInterruptedError) as info:
        call()
    assert info.value.partial_text == "one two"
    assert servers["b"].calls == 0


# ---------------------------------------------------------------------------------------------
# bad events, no [DONE]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("at", [0, 2])
def test_one_malformed_event_is_skipped_and_counted(servers, mode, at):
    servers["a"].push(malformed(at, PIECES))
    with Caller(mode, fast_config(primary_ttft_s=5.0, servers={"a": servers["a"], "b": servers["b"]})) as call:
        result = call()
    assert result.text == "".join(PIECES)
    assert sent(result.route) == [(A, "ok")]
    assert len(result.route.warnings) == 1 and "malformed SSE data skipped" in result.route.warnings[0]


@pytest.mark.parametrize("mode", MODES)
def test_a_stream_with_a_finish_reason_but_no_done_is_complete(servers, mode):
    servers["a"].push(Reply(pieces=PIECES, omit_done=True))
    with Caller(mode, fast_config(primary_ttft_s=5.0, servers={"a": servers["a"], "b": servers["b"]})) as call:
        result = call()
    assert result.text == "".join(PIECES)
    assert sent(result.route) == [(A, "ok")]


# ---------------------------------------------------------------------------------------------
# only the platform's failures count; no hidden sends


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("headers", [{"X-Bad": "a\nb"}, {"X-Bad": "caf\u00e9\u4e2d"}, {"Bad Name": "x"}])
def test_a_caller_mistake_is_an_invalid_request_and_trips_nothing(servers, mode, headers):
    config = tier_config({"a": servers["a"], "b": servers["b"]}, resilience={"consecutive_failures": 1})
    with Caller(mode, config) as call:
        for _ in range(5):
            with pytest.raises(E.InvalidRequestError) as info:
                call(extra_headers=headers)
            assert info.value.field == "extra_headers"
        assert call.health()[A].state == "closed" and call.health()[A].calls_in_window == 0
        assert servers["a"].calls == 0 and servers["b"].calls == 0  # nothing was sent
        # With consecutive_failures = 1, a counted mistake would have opened a: it still answers.
        assert call().route.deployment == A


@pytest.mark.parametrize("mode", MODES)
def test_a_body_json_cannot_carry_is_an_invalid_request(servers, mode):
    with Caller(mode, tier_config({"a": servers["a"]})) as call:
        with pytest.raises(E.InvalidRequestError):
            call(extra_body={"x": float("nan")})
    assert servers["a"].calls == 0


@pytest.mark.parametrize("mode", MODES)
def test_keep_alive_drops_are_visible_attempts_and_only_the_first_is_free(servers, mode):
    # One immediate resend after a drop is free; further drops count against max_retries (1 here).
    servers["a"].push(close_before(), close_before(), close_before())
    config = tier_config({"a": servers["a"]}, resilience={"max_retries": 1, "consecutive_failures": 1})
    with Caller(mode, config) as call:
        with pytest.raises(E.APIConnectionError) as info:
            call()
        # A dropped keep-alive connection says nothing of the platform's health.
        assert call.health()[A].state == "closed"
    # The server saw exactly the attempts the route shows: no silent resends.
    assert servers["a"].calls == 3 == len([a for a in info.value.attempts if a.status == "error"])
    assert not any(a.billed for a in info.value.attempts)  # closed before any reply: nothing produced


@pytest.mark.parametrize("mode", ["sync", "sync-stream"])
def test_a_keep_alive_drop_is_resent_at_once_and_recorded(servers, mode):
    servers["a"].push(close_before())
    ledger: list = []
    config = tier_config({"a": servers["a"]})  # max_retries = 0: the resend after a drop is not a retry
    config["ledger"] = {"sink": "none"}
    with L.Client(config=config, ledger=ledger.append) as client:
        if mode == "sync":
            resp = client.chat.completions.create(model=TIER, messages=MESSAGES)
            route = resp.route
        else:
            stream = client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True)
            text_of(stream)
            route = stream.response.route
    assert sent(route) == [(A, "error"), (A, "ok")]
    assert servers["a"].calls == 2 == len(ledger)
    assert ledger[0].status == "error" and ledger[0].error_type == "APIConnectionError" and ledger[0].cost == 0


# ---------------------------------------------------------------------------------------------
# 429s: the current Retry-After, a hold not a 30 s open


@pytest.mark.parametrize("mode", ["sync", "async-stream"])
def test_429_retry_after_3_then_1_is_waited_out_with_the_defaults(servers, mode):
    servers["a"].push(status(429, retry_after=3), status(429, retry_after=1))
    with Caller(mode, defaults_config({"a": servers["a"]})) as call:
        result = call()
        assert sent(result.route) == [(A, "error"), (A, "error"), (A, "ok")]
        waits = [b - a for a, b in zip(servers["a"].arrivals, servers["a"].arrivals[1:])]
        assert waits[0] >= 2.9 and 0.9 <= waits[1] < 2.5, waits
        snap = call.health()[A]
        assert snap.state != "open" and snap.open_until is None  # held for Retry-After, never open_s


# ---------------------------------------------------------------------------------------------
# cancelled probes give their permit back; a recovered primary gets traffic back


def test_a_cancelled_half_open_probe_gives_its_permit_back(servers):
    import asyncio

    config = fast_config({"a": servers["a"], "b": servers["b"]},
                         resilience={"consecutive_failures": 1, "open_s": 0.2, "open_max_s": 0.2, "open_jitter": 0,
                                     "half_open_probes": 1})

    async def body():
        async with L.AsyncClient(config=config) as client:
            servers["a"].push(status(500))
            await client.chat.completions.create(model=TIER, messages=MESSAGES)  # trips a
            await asyncio.sleep(0.3)
            servers["a"].push(slow_headers(3.0))
            with pytest.raises(asyncio.TimeoutError):  # the probe's caller gives up
                await asyncio.wait_for(client.chat.completions.create(model=TIER, messages=MESSAGES), 0.3)
            snap = client.health()[A]
            assert snap.state == "half_open" and snap.probes_in_flight == 0
            resp = await client.chat.completions.create(model=TIER, messages=MESSAGES)
            return resp

    resp = asyncio.run(body())
    assert resp.route.deployment == A  # the next call probes a again and it answers


# ---------------------------------------------------------------------------------------------
# the real llama.cpp server continues a cut answer (a trailing assistant message is a prefill)


@pytest.mark.parametrize("mode", ["sync", "async-stream"])
def test_the_real_llama_cpp_server_continues_a_cut_answer(servers, llama_server, mode):
    from llmroute.cli.local import MODEL_ALIAS

    local = f"local:{MODEL_ALIAS}"
    servers["a"].push(reset_during(2, ["The capital", " of France"], gap_s=0.02))
    config = tier_config({"a": servers["a"]}, deployments=[A, local])
    config["providers"]["local"] = {"kind": "llamacpp", "base_url": llama_server.base_url}
    config["pricing"]["local:*"] = {"input_per_million": 0, "output_per_million": 0}
    with Caller(mode, config) as call:
        result = call(max_tokens=8, temperature=0)
    assert sent(result.route) == [(A, "interrupted"), (local, "ok")]
    assert result.route.recovery == "continued" and result.route.resumed_at == [len("The capital of France")]
    assert result.text.startswith("The capital of France") and len(result.text) > len("The capital of France")
    assert result.completion.usage.completion_tokens == sum(a.usage.completion_tokens for a in result.route.attempts)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_flapping_primary_gets_traffic_back_within_open_max_s(servers, mode):
    """The primary is down for 1.5 s, then healthy: calls every 50 ms go to the backup meanwhile and
    return to the primary within open_max_s of its recovery (growth capped, probes not locked out)."""
    config = tier_config({"a": servers["a"], "b": servers["b"]},
                         resilience={"consecutive_failures": 2, "open_s": 0.1, "open_growth": 2.0,
                                     "open_max_s": 0.4})
    servers["a"].script.default = status(503)
    served: list[tuple[float, str]] = []
    with Caller(mode, config) as call:
        started = time.monotonic()
        recovered_at = None
        while time.monotonic() - started < 4.0 and len(served) < 200:
            if recovered_at is None and time.monotonic() - started > 1.5:
                servers["a"].script.default = None
                recovered_at = time.monotonic()
            served.append((time.monotonic(), call().deployment))
            time.sleep(0.05)
    assert recovered_at is not None
    during = [d for t, d in served if started + 0.5 < t < recovered_at]
    assert during and all(d == B for d in during)  # rescued by the backup while a was down
    back = next(t for t, d in served if t > recovered_at and d == A)
    assert back - recovered_at <= 0.4 + 0.5  # open_max_s, plus a call's worth of slack
    assert all(d == A for t, d in served if t > back + 0.5)  # and it stays back
