"""Failover, retries and breakers through the public client, over real loopback sockets.

Every test drives `Client` / `AsyncClient` (plain and streamed) against the timed fault servers of
tests/resilience/conftest.py: the primary "a" is scripted to fail, the backup "b" answers. Waits are
checked from the servers' recorded arrival times with wide margins (a lower bound a sleep guarantees,
or an upper bound far below the wrong wait), never by timing the client.
"""

from __future__ import annotations

import math
import socket
import time

import pytest

import llmroute as L
from llmroute import errors as E
from tests.resilience.client_helpers import MESSAGES, MODES, TIER, Caller, dep, sent, tier_config
from tests.servers.fault import error_event, malformed, reset_before, reset_during, slow_headers, status
from tests.servers.script import Reply

A, B, C = dep("a"), dep("b"), dep("c")
STREAM_MODES = [m for m in MODES if m.endswith("stream")]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(predicate, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.005)


def sleep_past_open(caller: Caller, deployment: str, margin_s: float = 0.05) -> None:
    """Sleep until the breaker's open deadline (as health reports it) has passed."""
    until = caller.health()[deployment].open_until
    assert until is not None and math.isfinite(until)
    time.sleep(max(0.0, until - time.monotonic()) + margin_s)


# ---------------------------------------------------------------------------------------------
# failover to the backup on platform failures


FAULTS = {
    "500": (lambda: status(500), E.ServerError),
    "503": (lambda: status(503), E.OverloadedError),
    "429": (lambda: status(429), E.RateLimitError),
    "reset": (reset_before, E.APIConnectionError),
    "timeout": (lambda: slow_headers(3.0), E.APITimeoutError),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_platform_failure_fails_over_to_the_backup(servers, mode, fault):
    make, cls = FAULTS[fault]
    servers["a"].push(make())
    fast = {"timeout_s": 0.5, "ttft_timeout_s": 0.5}
    config = tier_config({"a": servers["a"], "b": servers["b"]}, providers={"a": fast})
    with Caller(mode, config) as call:
        result = call()
    assert result.text == "Hello from fault"
    assert result.deployment == B
    assert sent(result.route) == [(A, "error"), (B, "ok")]
    failed = result.route.attempts[0]
    assert isinstance(failed.error, cls), failed.error
    assert failed.error_type == cls.__name__
    assert (servers["a"].calls, servers["b"].calls) == (1, 1)


@pytest.mark.parametrize("mode", MODES)
def test_connection_refused_fails_over(servers, mode):
    config = tier_config({"a": f"http://127.0.0.1:{free_port()}/v1", "b": servers["b"]})
    with Caller(mode, config) as call:
        result = call()
    assert sent(result.route) == [(A, "error"), (B, "ok")]
    assert isinstance(result.route.attempts[0].error, E.APIConnectionError)


@pytest.mark.parametrize("mode", STREAM_MODES)
@pytest.mark.parametrize("fault", ["reset_after_role_chunk", "error_event"])
def test_a_stream_that_breaks_before_its_first_token_fails_over(servers, mode, fault):
    # The role chunk ({"role": "assistant", "content": ""}) is not content: the caller has seen nothing.
    pieces = ["one", " two", " three"]
    make = {"reset_after_role_chunk": lambda: reset_during(0, pieces),
            "malformed_sse": lambda: malformed(0, pieces),
            "error_event": lambda: error_event(0, pieces)}[fault]
    servers["a"].push(make())
    with Caller(mode, tier_config({"a": servers["a"], "b": servers["b"]})) as call:
        result = call()
    assert result.text == "Hello from fault"  # b's answer only: nothing of a's reached the caller
    assert sent(result.route) == [(A, "error"), (B, "ok")]


# ---------------------------------------------------------------------------------------------
# streams after the first token: interrupted, never replayed


def _read_until_error(stream):
    seen = []
    with pytest.raises(E.StreamInterruptedError) as info:
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                seen.append(chunk.choices[0].delta.content)
    return "".join(seen), info.value


@pytest.mark.parametrize("fault", ["reset", "error_event"])
def test_a_stream_that_breaks_after_content_raises_interrupted_with_the_partial_text(servers, fault):
    pieces = ["one", " two", " three", " four"]
    servers["a"].push(reset_during(2, pieces, gap_s=0.02) if fault == "reset" else error_event(2, pieces))
    with L.Client(config=tier_config({"a": servers["a"], "b": servers["b"]}, resilience={"max_retries": 2})) as client:
        stream = client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True)
        seen, err = _read_until_error(stream)
    assert seen == "one two"
    assert err.partial_text == "one two"
    assert err.deployment == A
    # b (an openai-compatible server) cannot continue a partial answer: skipped, never restarted.
    assert [(a.deployment, a.status) for a in err.attempts] == [(A, "interrupted"), (B, "skipped")]
    assert "cannot continue a partial answer" in err.attempts[1].note
    assert servers["b"].calls == 0 and servers["a"].calls == 1  # nothing replayed, not even on a


def test_async_stream_that_breaks_after_content_raises_interrupted(servers):
    pieces = ["one", " two", " three", " four"]
    servers["a"].push(reset_during(3, pieces, gap_s=0.02))

    async def body():
        async with L.AsyncClient(config=tier_config({"a": servers["a"], "b": servers["b"]})) as client:
            stream = await client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True)
            seen = []
            try:
                async for chunk in stream:
                    if chunk.choices and chunk.choices[0].delta.content:
                        seen.append(chunk.choices[0].delta.content)
            except E.StreamInterruptedError as exc:
                return "".join(seen), exc
        raise AssertionError("the stream did not raise")

    import asyncio

    seen, err = asyncio.run(body())
    assert seen == err.partial_text == "one two three"
    # b (an openai-compatible server) cannot continue a partial answer: skipped, never restarted.
    assert [(a.deployment, a.status) for a in err.attempts] == [(A, "interrupted"), (B, "skipped")]
    assert "cannot continue a partial answer" in err.attempts[1].note
    assert servers["b"].calls == 0


# ---------------------------------------------------------------------------------------------
# retries on the same deployment


@pytest.mark.parametrize("mode", MODES)
def test_retry_waits_for_the_current_errors_retry_after(servers, mode):
    # First 429 says 1s, the second says 0.05s: the second wait must follow the second error.
    a = servers["a"]
    a.push(status(429, retry_after=1), status(429, retry_after=0.05))
    config = tier_config({"a": a, "b": servers["b"]}, resilience={"max_retries": 2, "max_retries_with_backup": 2})
    with Caller(mode, config) as call:
        result = call()
    assert sent(result.route) == [(A, "error"), (A, "error"), (A, "ok")]
    assert [x.note for x in result.route.attempts] == [None, "retry", "retry"]
    # The plan's decision is on the same records the route shows (kept out of the dump).
    decisions = [x.decision or "" for x in result.route.attempts]
    assert decisions[0].startswith("retrying after 1.00s") and decisions[1].startswith("retrying after 0.05s")
    assert decisions[2] == "" and "decision" not in result.route.model_dump()["attempts"][0]
    first_wait = a.arrivals[1] - a.arrivals[0]
    second_wait = a.arrivals[2] - a.arrivals[1]
    assert first_wait >= 0.95, first_wait
    assert second_wait < 0.8, f"{second_wait:.2f}s: the earlier error's Retry-After was reused"
    assert servers["b"].calls == 0


def test_a_failure_without_retry_after_is_retried_after_a_backoff(servers):
    servers["a"].push(status(503))
    config = tier_config({"a": servers["a"], "b": servers["b"]}, resilience={"max_retries": 1})
    with Caller("sync", config) as call:
        result = call()
    assert sent(result.route) == [(A, "error"), (A, "ok")]
    assert servers["b"].calls == 0


def test_max_retries_bounds_the_retries_then_moves_on(servers):
    servers["a"].push(status(503), status(503), status(503))
    config = tier_config({"a": servers["a"], "b": servers["b"]}, resilience={"max_retries": 1})
    with Caller("sync", config) as call:
        result = call()
    assert sent(result.route) == [(A, "error"), (A, "error"), (B, "ok")]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_retry_after_that_does_not_fit_the_deadline_moves_on_at_once(servers, mode):
    a, b = servers["a"], servers["b"]
    a.push(status(429, retry_after=3))
    config = tier_config({"a": a, "b": b}, resilience={"max_retries": 2})
    with Caller(mode, config) as call:
        result = call(timeout=1.5)
    assert sent(result.route) == [(A, "error"), (B, "ok")]
    assert a.calls == 1
    assert b.arrivals[0] - a.arrivals[0] < 2.5, "slept for a Retry-After that could not fit the deadline"


def test_a_retry_after_above_the_cap_moves_on_instead_of_waiting(servers):
    a, b = servers["a"], servers["b"]
    a.push(status(429, retry_after=20))
    config = tier_config({"a": a, "b": b}, resilience={"max_retries": 2, "retry_after_max_s": 5})
    with Caller("sync", config) as call:
        result = call()
    assert sent(result.route) == [(A, "error"), (B, "ok")]
    assert b.arrivals[0] - a.arrivals[0] < 4


def test_an_exhausted_retry_budget_moves_on_instead_of_retrying(servers):
    servers["a"].push(status(503))
    config = tier_config({"a": servers["a"], "b": servers["b"]},
                         resilience={"max_retries": 2, "retry_budget": 0.0, "retry_budget_min": 0})
    with Caller("sync", config) as call:
        result = call()
    assert sent(result.route) == [(A, "error"), (B, "ok")]
    assert servers["a"].calls == 1


# ---------------------------------------------------------------------------------------------
# circuit breakers


@pytest.mark.parametrize("mode", MODES)
def test_the_breaker_opens_and_the_next_call_skips_the_deployment(servers, mode):
    a, b = servers["a"], servers["b"]
    a.push(status(500), status(500))
    config = tier_config({"a": a, "b": b}, resilience={"consecutive_failures": 2, "open_s": 30})
    with Caller(mode, config) as call:
        assert sent(call().route) == [(A, "error"), (B, "ok")]
        assert call.health()[A].state == "closed"
        assert sent(call().route) == [(A, "error"), (B, "ok")]
        health = call.health()[A]
        assert health.state == "open"
        assert "consecutive" in health.reason and "ServerError" in health.last_error
        assert health.open_until is not None and health.open_until > time.monotonic() + 20
        result = call()
    assert sent(result.route) == [(A, "skipped"), (B, "ok")]
    assert result.route.attempts[0].note.startswith("skipped: circuit open")
    assert a.calls == 2 and b.calls == 3


def test_a_failure_rate_over_the_window_opens_the_breaker(servers):
    a = servers["a"]
    a.push(status(500), Reply(), status(500), Reply())
    config = tier_config({"a": a, "b": servers["b"]},
                         resilience={"min_calls": 4, "failure_rate": 0.5, "window_s": 60, "open_s": 30})
    with Caller("sync", config) as call:
        for _ in range(4):
            call()
        assert call.health()[A].state == "open"
        assert sent(call().route) == [(A, "skipped"), (B, "ok")]


def test_a_retry_after_holds_the_breaker_open_for_later_calls(servers):
    a, b = servers["a"], servers["b"]
    a.push(status(429, retry_after=20))
    config = tier_config({"a": a, "b": b}, resilience={"open_on_retry_after": True})
    with Caller("sync", config) as call:
        assert sent(call().route) == [(A, "error"), (B, "ok")]
        health = call.health()[A]
        assert health.state == "open" and "20" in health.reason
        result = call()
    assert sent(result.route) == [(A, "skipped"), (B, "ok")]
    assert a.calls == 1


@pytest.mark.parametrize("mode", ["sync", "async-stream"])
def test_after_open_s_a_half_open_probe_brings_the_deployment_back(servers, mode):
    a = servers["a"]
    a.push(status(500))
    config = tier_config({"a": a, "b": servers["b"]},
                         resilience={"consecutive_failures": 1, "open_s": 0.3, "half_open_probes": 1})
    with Caller(mode, config) as call:
        assert sent(call().route) == [(A, "error"), (B, "ok")]
        assert call.health()[A].state == "open"
        sleep_past_open(call, A)
        assert call.health()[A].state == "half_open"
        result = call()
        assert sent(result.route) == [(A, "ok")]
        assert call.health()[A].state == "closed"
    assert a.arrivals[1] - a.arrivals[0] >= 0.29  # the probe came only after the open period


def test_half_open_needs_every_probe_success_before_closing(servers):
    a = servers["a"]
    a.push(status(500))
    config = tier_config({"a": a, "b": servers["b"]},
                         resilience={"consecutive_failures": 1, "open_s": 0.3, "half_open_probes": 2})
    with Caller("sync", config) as call:
        call()
        sleep_past_open(call, A)
        assert sent(call().route) == [(A, "ok")]
        assert call.health()[A].state == "half_open"
        assert sent(call().route) == [(A, "ok")]
        assert call.health()[A].state == "closed"


def test_a_failed_probe_reopens_for_longer(servers):
    a = servers["a"]
    a.push(status(500), status(500))
    config = tier_config({"a": a, "b": servers["b"]},
                         resilience={"consecutive_failures": 1, "open_s": 0.3, "open_growth": 20,
                                     "open_max_s": 60, "half_open_probes": 1})
    with Caller("sync", config) as call:
        call()
        sleep_past_open(call, A)
        assert sent(call().route) == [(A, "error"), (B, "ok")]  # the probe failed
        health = call.health()[A]
        assert health.state == "open" and health.trips == 2
        assert "probe failed" in health.reason
        assert health.open_until - time.monotonic() > 1.0  # 0.3 * 20 = 6s, not 0.3s again
        assert sent(call().route) == [(A, "skipped"), (B, "ok")]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_401_disables_the_deployment_with_a_reason(servers, mode):
    a, b = servers["a"], servers["b"]
    a.push(status(401, message="Incorrect API key provided"))
    with Caller(mode, tier_config({"a": a, "b": b})) as call:
        assert sent(call().route) == [(A, "error"), (B, "ok")]
        health = call.health()[A]
        # Until the key changes, or auth_recheck_s (300 s by default) passes: then one probe tries it.
        assert health.state == "open" and 299 < health.open_until - time.monotonic() <= 300
        assert health.disabled_reason is not None and "API key" in health.disabled_reason
        assert "back when the key changes, or tried again after 300s" in health.disabled_reason
        result = call()
    assert sent(result.route) == [(A, "skipped"), (B, "ok")]
    assert "DISABLED" in result.route.attempts[0].note
    assert a.calls == 1


# ---------------------------------------------------------------------------------------------
# fallback tier, exhaustion, typed errors


FALLBACK = {"deployments": [A], "tier": {"fallback_tier": "s"}, "tiers": {"s": {"deployments": [B]}}}


@pytest.mark.parametrize("mode", MODES)
def test_a_failed_tier_falls_back_to_its_fallback_tier_and_the_route_says_so(servers, mode):
    servers["a"].push(status(503))
    with Caller(mode, tier_config({"a": servers["a"], "b": servers["b"]}, **FALLBACK)) as call:
        result = call()
    assert sent(result.route) == [(A, "error"), (B, "ok")]
    assert result.route.tier == "s"
    assert "fell back to tier s" in result.route.reason
    assert result.route.attempts[1].tier == "s"
    assert "fallback tier" in result.route.attempts[1].note


def test_an_open_tier_falls_back_without_sending(servers):
    servers["a"].push(status(503))
    config = tier_config({"a": servers["a"], "b": servers["b"]}, resilience={"consecutive_failures": 1}, **FALLBACK)
    with Caller("sync", config) as call:
        call()
        result = call()
    assert sent(result.route) == [(A, "skipped"), (B, "ok")]
    assert result.route.tier == "s" and "fell back to tier s" in result.route.reason
    assert servers["a"].calls == 1


@pytest.mark.parametrize("mode", MODES)
def test_when_every_deployment_fails_the_error_lists_every_attempt(servers, mode):
    servers["a"].push(status(503))
    servers["b"].push(status(500))
    with Caller(mode, tier_config({"a": servers["a"], "b": servers["b"]})) as call:
        with pytest.raises(E.AllDeploymentsFailedError) as info:
            call()
    err = info.value
    assert err.tier == TIER
    assert [(a.deployment, type(a.error)) for a in err.attempts] == [(A, E.OverloadedError), (B, E.ServerError)]
    assert all(a.duration_s >= 0 and a.status == "error" for a in err.attempts)
    assert A in str(err) and B in str(err)
    assert isinstance(err.last_error, E.ServerError)


def test_exhausting_the_fallback_tier_too_lists_both_tiers(servers):
    for name in "abc":
        servers[name].push(status(500))
    config = tier_config(servers, deployments=[A, B], tier={"fallback_tier": "s"}, tiers={"s": {"deployments": [C]}})
    with Caller("sync", config) as call, pytest.raises(E.AllDeploymentsFailedError) as info:
        call()
    assert [(a.deployment, a.tier) for a in info.value.attempts] == [(A, TIER), (B, TIER), (C, "s")]
    assert "fallback tier 's'" in str(info.value)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("code, cls", [(401, E.AuthenticationError), (429, E.RateLimitError)])
def test_a_single_deployment_tier_raises_the_platforms_own_typed_error(servers, mode, code, cls):
    servers["a"].push(status(code))
    with Caller(mode, tier_config({"a": servers["a"]})) as call:
        with pytest.raises(cls) as info:
            call()
    err = info.value
    assert type(err) is cls and err.status == code and err.deployment == A
    assert sent(err.attempts) == [(A, "error")]


# ---------------------------------------------------------------------------------------------
# caller errors and context windows


@pytest.mark.parametrize("mode", MODES)
def test_a_400_is_the_callers_fault_no_failover_no_breaker_count(servers, mode):
    servers["a"].push(status(400))
    config = tier_config({"a": servers["a"], "b": servers["b"]}, resilience={"max_retries": 2})
    with Caller(mode, config) as call:
        with pytest.raises(E.BadRequestError) as info:
            call()
        health = call.health()[A]
    assert type(info.value) is E.BadRequestError
    assert sent(info.value.attempts) == [(A, "error")]
    assert servers["b"].calls == 0 and servers["a"].calls == 1
    assert health.calls_in_window == 0 and health.state == "closed"


WINDOWS = [{"id": A, "context_window": 1000}, {"id": B, "context_window": 100_000}]


@pytest.mark.parametrize("mode", MODES)
def test_a_context_length_error_moves_to_a_larger_window(servers, mode):
    servers["a"].push(Reply(error="context"))
    with Caller(mode, tier_config({"a": servers["a"], "b": servers["b"]}, deployments=WINDOWS)) as call:
        result = call()
    assert sent(result.route) == [(A, "error"), (B, "ok")]
    assert isinstance(result.route.attempts[0].error, E.ContextLengthError)


def test_a_context_length_error_with_no_larger_window_fails_clearly(servers):
    servers["a"].push(Reply(error="context"))
    deployments = [{"id": A, "context_window": 1000}, {"id": B, "context_window": 1000}]
    with Caller("sync", tier_config({"a": servers["a"], "b": servers["b"]}, deployments=deployments)) as call:
        with pytest.raises(E.ContextLengthError) as info:
            call()
    assert "no deployment of tier 't' fits" in str(info.value)
    assert servers["b"].calls == 0


def test_a_request_too_big_for_a_known_window_skips_it_unsent(servers):
    long_prompt = [{"role": "user", "content": "word " * 3000}]
    with Caller("sync", tier_config({"a": servers["a"], "b": servers["b"]}, deployments=WINDOWS)) as call:
        result = call(messages=long_prompt)
    assert sent(result.route) == [(A, "skipped"), (B, "ok")]
    assert "context window 1000" in result.route.attempts[0].note
    assert servers["a"].calls == 0


# ---------------------------------------------------------------------------------------------
# weights and sticky keys


def test_weights_split_traffic_roughly_90_10(servers):
    """`balance = "weighted"`: the behaviour weights had before load balancing became their default."""
    n = 300
    deployments = [{"id": A, "weight": 90}, {"id": B, "weight": 10}]
    cfg = tier_config({"a": servers["a"], "b": servers["b"]}, deployments=deployments, tier={"balance": "weighted"})
    with Caller("sync", cfg) as call:
        served = [call().deployment for _ in range(n)]
    to_a = served.count(A)
    # Binomial(300, 0.9): mean 270, sd 5.2. Bounds are ~5 sd wide; list order alone would give 300.
    assert 240 <= to_a <= 294, to_a
    assert to_a + served.count(B) == n


def test_a_sticky_key_pins_each_user_to_one_deployment(servers):
    from llmroute.resilience.failover import sticky_point

    deployments = [{"id": A, "weight": 50}, {"id": B, "weight": 50}]
    config = tier_config({"a": servers["a"], "b": servers["b"]}, deployments=deployments,
                         tier={"sticky_key": "user_id"})
    users = [f"user-{i}" for i in range(30)]
    with Caller("sync", config) as call:
        chosen = {u: {call(metadata={"user_id": u}).deployment for _ in range(3)} for u in users}
    assert all(len(s) == 1 for s in chosen.values()), chosen
    expected = {u: {A if sticky_point(u, salt=TIER) * 100 < 50 else B} for u in users}
    assert chosen == expected
    assert {next(iter(s)) for s in chosen.values()} == {A, B}


def test_a_sticky_users_deployment_still_fails_over(servers):
    from llmroute.resilience.failover import sticky_point

    user = "user-7"
    pinned, other = (A, B) if sticky_point(user, salt=TIER) * 100 < 50 else (B, A)
    servers[pinned[0]].push(status(503))
    deployments = [{"id": A, "weight": 50}, {"id": B, "weight": 50}]
    config = tier_config({"a": servers["a"], "b": servers["b"]}, deployments=deployments,
                         tier={"sticky_key": "user_id"})
    with Caller("sync", config) as call:
        result = call(metadata={"user_id": user})
    assert sent(result.route) == [(pinned, "error"), (other, "ok")]


# ---------------------------------------------------------------------------------------------
# client-side limits


def limited(deployment: str, **limits):
    # Inline on the deployment table, as issue 4 writes them: { id = "...", max_concurrency = 1 }.
    return {"id": deployment, **limits}


def _in_thread(fn):
    import threading

    box = {}

    def target():
        try:
            box["result"] = fn()
        except BaseException as exc:  # reported by join()
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()

    def join():
        thread.join(15)
        assert not thread.is_alive()
        if "error" in box:
            raise box["error"]
        return box["result"]

    return join


def test_a_full_bulkhead_moves_the_call_to_the_next_deployment(servers):
    a, b = servers["a"], servers["b"]
    a.push(Reply(delay_s=1.0))
    deployments = [limited(A, max_concurrency=1, queue_timeout_s=0), B]
    with Caller("sync", tier_config({"a": a, "b": b}, deployments=deployments)) as call:
        first = _in_thread(call)
        wait_for(lambda: a.calls == 1)
        second = call()
        assert sent(first().route) == [(A, "ok")]
    assert sent(second.route) == [(A, "skipped"), (B, "ok")]
    assert "concurrency limit 1" in second.route.attempts[0].note


def test_a_full_bulkhead_queues_within_the_queue_timeout(servers):
    a, b = servers["a"], servers["b"]
    a.push(Reply(delay_s=1.0))
    deployments = [limited(A, max_concurrency=1, queue_timeout_s=10), B]
    with Caller("sync", tier_config({"a": a, "b": b}, deployments=deployments)) as call:
        first = _in_thread(call)
        wait_for(lambda: a.calls == 1)
        second = call()
        first()
    assert sent(second.route) == [(A, "ok")]
    assert b.calls == 0
    assert a.arrivals[1] - a.arrivals[0] >= 0.9  # it waited for the slot, it did not go in beside


def test_async_bulkhead_moves_concurrent_calls_on(servers):
    import asyncio

    a, b = servers["a"], servers["b"]
    a.push(Reply(delay_s=0.5))
    deployments = [limited(A, max_concurrency=1, queue_timeout_s=0), B]

    async def body():
        async with L.AsyncClient(config=tier_config({"a": a, "b": b}, deployments=deployments)) as client:
            calls = [client.chat.completions.create(model=TIER, messages=MESSAGES) for _ in range(3)]
            return await asyncio.gather(*calls)

    results = asyncio.run(body())
    assert sorted(r.route.deployment for r in results) == [A, B, B]
    assert a.calls == 1 and b.calls == 2


def test_a_requests_per_minute_limit_moves_the_call_on(servers):
    deployments = [limited(A, rpm=1, queue_timeout_s=0.2), B]
    with Caller("sync", tier_config({"a": servers["a"], "b": servers["b"]}, deployments=deployments)) as call:
        assert sent(call().route) == [(A, "ok")]
        result = call()
    assert sent(result.route) == [(A, "skipped"), (B, "ok")]
    assert "requests-per-minute" in result.route.attempts[0].note
    assert servers["a"].calls == 1


def test_a_tokens_per_minute_limit_moves_the_call_on(servers):
    deployments = [limited(A, tpm=60, queue_timeout_s=0.2), B]
    with Caller("sync", tier_config({"a": servers["a"], "b": servers["b"]}, deployments=deployments)) as call:
        assert sent(call(max_tokens=40).route) == [(A, "ok")]
        result = call(max_tokens=40)
    assert sent(result.route) == [(A, "skipped"), (B, "ok")]
    assert "tokens-per-minute" in result.route.attempts[0].note


# ---------------------------------------------------------------------------------------------
# resilience keys inline on a deployment table (issue 4: `{ id = "...", weight = 90, max_retries = 0 }`)

def test_inline_deployment_keys_override_the_tier(servers):
    servers["a"].push(status(503))
    deployments = [{"id": A, "weight": 90, "max_retries": 0}, B]
    config = tier_config({"a": servers["a"], "b": servers["b"]}, deployments=deployments,
                         resilience={"max_retries": 2})
    with Caller("sync", config) as call:
        result = call()
    assert sent(result.route) == [(A, "error"), (B, "ok")]


def test_the_resilience_subtable_of_a_deployment_overrides_the_tier(servers):
    servers["a"].push(status(503))
    deployments = [{"id": A, "resilience": {"max_retries": 0}}, B]
    config = tier_config({"a": servers["a"], "b": servers["b"]}, deployments=deployments,
                         resilience={"max_retries": 2})
    with Caller("sync", config) as call:
        result = call()
    assert sent(result.route) == [(A, "error"), (B, "ok")]


@pytest.mark.parametrize("mode", ["sync", "async-stream"])
def test_the_calls_timeout_bounds_all_attempts_together(servers, mode):
    # Each attempt may take only the time left before the call's deadline; once it has passed, no
    # other deployment is tried: the caller gets the timeout (the one deployment's own typed error).
    servers["a"].push(slow_headers(5.0))
    servers["b"].push(slow_headers(5.0))
    with Caller(mode, tier_config({"a": servers["a"], "b": servers["b"]})) as call:
        with pytest.raises((E.APITimeoutError, E.AllDeploymentsFailedError)) as info:
            call(timeout=1.0)
    err = info.value
    assert sent(err.attempts) == [(A, "error")]
    assert isinstance(err.attempts[0].error, E.APITimeoutError) and err.attempts[0].error.timeout == "total"
    assert servers["b"].calls == 0
