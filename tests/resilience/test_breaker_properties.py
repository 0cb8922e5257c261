"""Property-based tests (hypothesis) of the breaker's invariants over random call histories."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from llmroute.resilience.breaker import CircuitBreaker
from llmroute.resilience.policy import ResiliencePolicy

from .helpers import DEP, auth_error, bad_request, rate_limited, server_error

ERRORS = {
    "success": None,
    "failure": server_error(),
    "rate_limited": rate_limited(retry_after=7.0),
    "caller": bad_request(),
    "fatal": auth_error(),
}
OUTCOME_OF = {"success": "success", "failure": "failure", "rate_limited": "failure", "caller": "caller", "fatal": "fatal"}

policies = st.builds(
    ResiliencePolicy,
    window_s=st.sampled_from([5.0, 30.0]),
    window_kind=st.sampled_from(["time", "count"]),
    window_calls=st.integers(1, 20),
    min_calls=st.integers(1, 15),
    failure_rate=st.sampled_from([0.2, 0.5, 1.0]),
    slow_rate=st.sampled_from([0.5, 1.0]),
    slow_ttft_s=st.just(1.0),
    consecutive_failures=st.integers(1, 8),
    open_s=st.sampled_from([1.0, 5.0]),
    open_max_s=st.just(40.0),
    half_open_probes=st.integers(1, 4),
    open_on_retry_after=st.booleans(),
)

op = st.one_of(
    st.tuples(st.just("acquire"), st.floats(0, 3)),
    st.tuples(st.just("finish"), st.floats(0, 3), st.sampled_from(sorted(ERRORS)), st.integers(0, 10), st.sampled_from([None, 0.5, 2.0])),
    st.tuples(st.just("release"), st.floats(0, 3), st.integers(0, 10)),
    st.tuples(st.just("extend"), st.floats(0, 3), st.floats(0, 60)),
)


def run(pol, ops, kinds=None):
    """Replay `ops` and check the invariants after every step."""
    b = CircuitBreaker(pol, DEP)
    now = 0.0
    permits = []
    last_open_until = None
    for item in ops:
        kind, dt = item[0], item[1]
        now += dt
        before = b.snapshot(now)
        if kind == "acquire":
            permit = b.acquire(now)
            if permit is not None:
                permits.append(permit)
        elif kind == "finish":
            name, idx, ttft = item[2], item[3], item[4]
            if kinds is not None and name not in kinds:
                continue
            permit = permits.pop(idx % len(permits)) if permits else None
            b.record(now, OUTCOME_OF[name], error=ERRORS[name], ttft_s=ttft, latency_s=ttft, permit=permit)
            after = b.snapshot(now)
            if name == "caller":
                # Caller errors never change state; at most the probe slot the call held is freed.
                assert dataclasses.replace(after, probes_in_flight=before.probes_in_flight) == before
                assert before.probes_in_flight - after.probes_in_flight in (0, 1)
        elif kind == "release":
            if permits:
                b.release(permits.pop(item[2] % len(permits)))
        else:
            b.extend_open(now, now + item[2])
        snap = b.snapshot(now)
        assert snap.state in ("closed", "open", "half_open")
        assert 0.0 <= snap.failure_rate <= 1.0 and 0.0 <= snap.slow_rate <= 1.0
        if pol.window_kind == "count":
            assert snap.calls_in_window <= pol.window_calls
        # Half-open never admits more probes at once than configured.
        live_probes = [p for p in permits if p.probe and p.epoch == b._epoch]
        if snap.state == "half_open":
            assert snap.probes_in_flight <= pol.half_open_probes
            assert len(live_probes) <= pol.half_open_probes
        # The open deadline never moves earlier (time only moves forward, and no reset happens).
        if snap.state == "open":
            assert snap.open_until is not None and snap.open_until >= now or snap.open_until == float("inf")
            if last_open_until is not None:
                assert snap.open_until >= last_open_until
            last_open_until = snap.open_until
    return b, now


@settings(max_examples=300, deadline=None)
@given(policies, st.lists(op, max_size=60))
def test_invariants_hold_on_any_history(pol, ops):
    run(pol, ops)


@settings(max_examples=200, deadline=None)
@given(policies, st.lists(st.tuples(st.floats(0, 2), st.booleans(), st.sampled_from([None, 0.5, 2.0])), max_size=40))
def test_no_rate_trip_before_min_calls(pol, calls):
    pol = pol.model_copy(update={"consecutive_failures": 10_000, "open_on_retry_after": False})
    b = CircuitBreaker(pol, DEP)
    now = 0.0
    for dt, failed, ttft in calls:
        now += dt
        before = b.snapshot(now)
        b.record(now, "failure" if failed else "success", error=server_error() if failed else None, ttft_s=ttft)
        after = b.snapshot(now)
        if before.state == "closed" and after.state == "open":
            assert after.calls_in_window >= pol.effective_min_calls
            assert after.failure_rate >= pol.failure_rate or after.slow_rate >= pol.slow_rate


@settings(max_examples=200, deadline=None)
@given(policies, st.integers(0, 20), st.floats(0, 1))
def test_a_run_of_consecutive_failures_always_trips(pol, successes, dt):
    b = CircuitBreaker(pol, DEP)
    now = 0.0
    for _ in range(successes):
        now += dt
        b.record(now, "success", ttft_s=0.1)
    for _ in range(pol.consecutive_failures):
        now += 0.001
        b.record(now, "failure", error=server_error())
    assert b.snapshot(now).state == "open"


@settings(max_examples=200, deadline=None)
@given(policies, st.lists(op, max_size=40))
def test_caller_errors_alone_never_move_a_closed_breaker(pol, ops):
    pol = pol.model_copy(update={"slow_ttft_s": 1e9})  # fast successes only: nothing else may trip it
    b, now = run(pol, ops, kinds={"caller", "success"})
    assert b.snapshot(now).state == "closed" or any(o[0] == "extend" for o in ops)


@settings(max_examples=200, deadline=None)
@given(
    probes=st.integers(1, 4),
    lease=st.floats(1.0, 30.0),
    grabs=st.lists(st.floats(0.0, 5.0), min_size=1, max_size=12),
)
def test_unreported_probes_never_lock_a_deployment_out(probes, lease, grabs):
    """Probe permits that are never recorded nor released (cancelled calls) free their slots after the lease."""
    from .helpers import server_error

    b = CircuitBreaker(ResiliencePolicy(consecutive_failures=1, open_s=1.0, half_open_probes=probes,
                                        probe_lease_s=lease), DEP)
    b.record(0.0, "failure", error=server_error())
    now = 1.0
    for dt in grabs:
        now += dt
        b.acquire(now)  # never recorded
        assert b.snapshot(now).probes_in_flight <= probes
    assert b.snapshot(now + lease + 1e-6).probes_in_flight == 0
    assert b.acquire(now + lease + 1e-6) is not None
