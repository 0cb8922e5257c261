"""Every breaker rule, one fake-clock test each (time is a float we pass in)."""

from __future__ import annotations

import math

import pytest

from llmroute import errors as E

from llmroute.resilience.breaker import CircuitBreaker, percentile
from llmroute.resilience.outcome import classify_failure

from .helpers import DEP, auth_error, bad_request, policy, rate_limited, server_error

# A policy in which only the rule under test can trip the breaker.
QUIET = dict(consecutive_failures=1000, min_calls=1000, open_on_retry_after=False)


def feed(b: CircuitBreaker, now: float, error=None, **kw):
    return b.record(now, classify_failure(error), error=error, **kw)


def test_consecutive_failures_trip_at_once():
    b = CircuitBreaker(policy(**{**QUIET, "consecutive_failures": 3}), DEP)
    feed(b, 0, server_error())
    feed(b, 1, server_error())
    assert b.snapshot(1).state == "closed"
    t = feed(b, 2, server_error())
    assert b.snapshot(2).state == "open"
    assert t is not None and t.to_state == "open" and "consecutive" in t.reason


def test_a_success_resets_the_consecutive_count():
    b = CircuitBreaker(policy(**{**QUIET, "consecutive_failures": 3}), DEP)
    for now, err in enumerate([server_error(), server_error(), None, server_error(), server_error()]):
        feed(b, now, err)
    assert b.snapshot(5).state == "closed"


def test_failure_rate_trips_once_min_calls_seen():
    b = CircuitBreaker(policy(**{**QUIET, "min_calls": 10, "failure_rate": 0.5}), DEP)
    for i in range(9):
        feed(b, i * 0.1, server_error() if i % 2 else None)  # 4 failures in 9 calls
    assert b.snapshot(1).state == "closed"
    feed(b, 1.0, server_error())  # 5/10 = 0.5 >= 0.5
    assert b.snapshot(1.0).state == "open"


def test_no_rate_trip_before_min_calls_even_if_all_failed():
    b = CircuitBreaker(policy(**{**QUIET, "min_calls": 10}), DEP)
    for i in range(9):
        feed(b, i, server_error())
    snap = b.snapshot(9)
    assert snap.state == "closed" and snap.failure_rate == 1.0 and snap.calls_in_window == 9


def test_time_window_forgets_old_calls():
    b = CircuitBreaker(policy(**{**QUIET, "min_calls": 10, "window_s": 30}), DEP)
    for i in range(9):
        feed(b, i * 0.1, server_error())
    feed(b, 31.0, server_error())  # the nine are out of the window: 1 call, below min_calls
    snap = b.snapshot(31.0)
    assert snap.state == "closed" and snap.calls_in_window == 1


def test_count_window_keeps_only_the_last_calls():
    b = CircuitBreaker(policy(**{**QUIET, "window_kind": "count", "window_calls": 4, "min_calls": 4}), DEP)
    for i, err in enumerate([None, None, None, None, server_error()]):
        feed(b, i, err)
    assert b.snapshot(5).calls_in_window == 4
    feed(b, 5, server_error())  # window: S S F F -> 0.5 (2/6 over all calls would stay closed)
    assert b.snapshot(5).state == "open"


def test_min_calls_is_clamped_to_a_count_window():
    b = CircuitBreaker(policy(**{**QUIET, "window_kind": "count", "window_calls": 3, "min_calls": 50}), DEP)
    for i in range(3):
        feed(b, i, server_error())
    assert b.snapshot(3).state == "open"


def test_slow_call_rate_trips_on_ttft():
    b = CircuitBreaker(policy(**{**QUIET, "min_calls": 5, "slow_ttft_s": 1.0, "slow_rate": 0.8}), DEP)
    for i in range(4):
        feed(b, i, None, ttft_s=2.0)  # slow successes still count as slow
    feed(b, 4, None, ttft_s=0.5)
    snap = b.snapshot(4)
    assert snap.state == "open" and snap.slow_rate == pytest.approx(0.8)
    assert "slow" in (snap.reason or "")


def test_fast_calls_do_not_trip_the_slow_rule():
    b = CircuitBreaker(policy(**{**QUIET, "min_calls": 5, "slow_ttft_s": 1.0}), DEP)
    for i in range(10):
        feed(b, i, None, ttft_s=1.0)  # exactly the threshold is not slower than it
    assert b.snapshot(10).state == "closed"


def _trip(b: CircuitBreaker, now: float):
    feed(b, now, server_error())
    assert b.snapshot(now).state == "open"


def test_open_time_grows_on_repeated_trips_up_to_the_cap():
    b = CircuitBreaker(policy(consecutive_failures=1, open_s=10, open_growth=2, open_max_s=25, open_on_retry_after=False), DEP)
    _trip(b, 0)
    assert b.snapshot(0).open_until == 10
    assert b.acquire(10) is not None  # half-open probe
    _trip(b, 10)
    assert b.snapshot(10).open_until == 30  # 20 s
    assert b.acquire(30) is not None
    _trip(b, 30)
    assert b.snapshot(30).open_until == 55  # capped at 25 s
    assert b.snapshot(55).trips == 3


def test_trip_growth_resets_after_a_long_closed_spell():
    pol = policy(consecutive_failures=1, open_s=10, open_growth=2, half_open_probes=1, trip_memory_s=100, open_on_retry_after=False)
    b = CircuitBreaker(pol, DEP)
    _trip(b, 0)
    feed(b, 10, None, permit=b.acquire(10))  # probe succeeds: closed at t=10
    assert b.snapshot(10).state == "closed"
    _trip(b, 50)  # within memory: grows
    assert b.snapshot(50).open_until == 70
    feed(b, 70, None, permit=b.acquire(70))
    _trip(b, 200)  # closed for 130 s > trip_memory_s: back to open_s
    assert b.snapshot(200).open_until == 210


def test_half_open_admits_only_the_configured_probes():
    b = CircuitBreaker(policy(consecutive_failures=1, open_s=5, half_open_probes=2, open_on_retry_after=False), DEP)
    _trip(b, 0)
    assert b.acquire(4.9) is None  # still open
    p1, p2 = b.acquire(5), b.acquire(5)
    assert p1 and p2 and p1.probe and p2.probe
    assert b.acquire(5) is None and not b.peek(5)
    assert b.snapshot(5).state == "half_open"
    feed(b, 6, None, permit=p1)  # one slot frees, one success of two needed
    assert b.snapshot(6).state == "half_open"
    p3 = b.acquire(6)
    assert p3 is not None
    feed(b, 7, None, permit=p2)
    snap = b.snapshot(7)
    assert snap.state == "closed" and snap.calls_in_window == 0  # the window restarts clean
    feed(b, 8, None, permit=p3)  # a probe landing after the close is an ordinary call
    assert b.snapshot(8).state == "closed"


def test_half_open_successes_can_differ_from_probe_slots():
    b = CircuitBreaker(policy(consecutive_failures=1, open_s=5, half_open_probes=1, half_open_successes=2, open_on_retry_after=False), DEP)
    _trip(b, 0)
    feed(b, 5, None, permit=b.acquire(5))
    assert b.snapshot(5).state == "half_open"
    feed(b, 6, None, permit=b.acquire(6))
    assert b.snapshot(6).state == "closed"


def test_a_failed_probe_reopens():
    b = CircuitBreaker(policy(consecutive_failures=5, open_s=5, open_on_retry_after=False), DEP)
    for _i in range(5):
        feed(b, 0, server_error())
    permit = b.acquire(5)
    t = feed(b, 6, server_error(), permit=permit)
    assert t is not None and t.from_state == "half_open" and t.to_state == "open"
    assert b.snapshot(6).open_until == 6 + 10


def test_allow_without_permits_still_counts_probes():
    b = CircuitBreaker(policy(consecutive_failures=1, open_s=5, half_open_probes=1, open_on_retry_after=False), DEP)
    _trip(b, 0)
    assert b.allow(5) and not b.allow(5)
    feed(b, 6, None)  # no permit: ends the anonymous probe
    assert b.snapshot(6).state == "closed"


def test_a_call_admitted_before_the_trip_is_not_a_probe():
    b = CircuitBreaker(policy(consecutive_failures=1, open_s=5, half_open_probes=1, open_on_retry_after=False), DEP)
    stale = b.acquire(0)
    _trip(b, 0)
    probe = b.acquire(5)
    assert probe is not None
    feed(b, 6, None, permit=stale)  # neither frees the probe slot nor closes the breaker
    snap = b.snapshot(6)
    assert snap.state == "half_open" and snap.probes_in_flight == 1
    assert b.acquire(6) is None


def test_release_frees_a_probe_slot_without_an_outcome():
    b = CircuitBreaker(policy(consecutive_failures=1, open_s=5, half_open_probes=1, open_on_retry_after=False), DEP)
    _trip(b, 0)
    permit = b.acquire(5)
    assert b.acquire(5) is None
    b.release(permit)
    assert b.snapshot(5).state == "half_open"
    assert b.acquire(5) is not None


def test_retry_after_extends_the_open_deadline_on_a_trip():
    b = CircuitBreaker(policy(consecutive_failures=1, open_s=5, open_on_retry_after=False), DEP)
    feed(b, 0, rate_limited(retry_after=20))
    assert b.snapshot(0).open_until == 20


def test_retry_after_is_capped_by_open_max():
    b = CircuitBreaker(policy(consecutive_failures=1, open_s=5, open_max_s=60), DEP)
    feed(b, 0, rate_limited(retry_after=3600))
    assert b.snapshot(0).open_until == 60


def test_a_smaller_later_retry_after_never_shortens_the_deadline():
    b = CircuitBreaker(policy(consecutive_failures=1, open_s=30, open_max_s=300), DEP)
    _trip(b, 0)
    feed(b, 1, rate_limited(retry_after=2))  # a late in-flight call's 429
    assert b.snapshot(1).open_until == 30
    b.extend_open(2, 10)
    assert b.snapshot(2).open_until == 30
    feed(b, 3, rate_limited(retry_after=40))
    assert b.snapshot(3).open_until == 43
    b.extend_open(4, 50)
    assert b.snapshot(4).open_until == 50


def test_a_429_with_retry_after_opens_at_once_without_counting_a_trip():
    b = CircuitBreaker(policy(), DEP)
    t = feed(b, 0, rate_limited(retry_after=3))
    snap = b.snapshot(0)
    assert snap.state == "open" and snap.open_until == 3 and snap.trips == 0
    assert t is not None and "3s" in t.reason
    assert b.snapshot(3).state == "half_open"


def test_open_on_retry_after_can_be_turned_off():
    b = CircuitBreaker(policy(open_on_retry_after=False), DEP)
    feed(b, 0, rate_limited(retry_after=3))
    assert b.snapshot(0).state == "closed"


def test_a_429_without_retry_after_is_an_ordinary_failure():
    b = CircuitBreaker(policy(), DEP)
    feed(b, 0, rate_limited())
    snap = b.snapshot(0)
    assert snap.state == "closed" and snap.failures_in_window == 1


def test_caller_errors_change_nothing():
    b = CircuitBreaker(policy(consecutive_failures=2), DEP)
    feed(b, 0, server_error())
    before = b.snapshot(1)
    for _ in range(50):
        assert feed(b, 1, bad_request()) is None
    assert b.snapshot(1) == before
    feed(b, 1, server_error())  # the caller errors did not reset the run either
    assert b.snapshot(1).state == "open"


def test_fatal_errors_disable_loudly_and_indefinitely():
    b = CircuitBreaker(policy(auth_recheck_s=None), DEP)
    t = feed(b, 0, auth_error())
    snap = b.snapshot(0)
    assert snap.state == "open" and math.isinf(snap.open_until) and snap.disabled
    assert "API key" in snap.disabled_reason and "DISABLED" in snap.disabled_reason
    assert "sk-abcdefghijklmnop" not in snap.disabled_reason and "sk-abcdefghijklmnop" not in snap.last_error
    assert t is not None and t.disabled
    assert not b.peek(1e9) and b.acquire(1e9) is None
    assert snap.as_dict()["open_until"] == "never"
    b.reset(10)
    assert b.snapshot(10).state == "closed" and not b.snapshot(10).disabled


def test_fatal_open_s_bounds_the_disable():
    b = CircuitBreaker(policy(fatal_open_s=60), DEP)
    feed(b, 0, auth_error())
    assert b.snapshot(59).state == "open"
    assert b.snapshot(60).state == "half_open"


def test_a_refused_key_is_tried_again_after_auth_recheck_s_or_at_once_when_it_changes():
    b = CircuitBreaker(policy(auth_recheck_s=120), DEP)
    assert b.note_key("key-one", 0) is False
    feed(b, 0, auth_error())
    snap = b.snapshot(1)
    assert snap.disabled and "back when the key changes, or tried again after 120s" in snap.disabled_reason
    assert b.snapshot(119).state == "open" and b.snapshot(120).state == "half_open"
    assert type(b.held_by(1)) is type(auth_error()) and b.held_by(1).__traceback__ is None
    assert b.note_key("key-one", 2) is False and b.snapshot(2).disabled  # the same key: still refused
    assert b.note_key("key-two", 3) is True  # a new key: back in rotation at once
    snap = b.snapshot(3)
    assert snap.state == "closed" and not snap.disabled and "key changed" in snap.reason
    assert b.held_by(3) is None


def test_other_fatal_errors_ignore_auth_recheck_s():
    b = CircuitBreaker(policy(auth_recheck_s=10), DEP)
    feed(b, 0, E.NotFoundError("model not found", status=404, deployment=DEP))
    assert math.isinf(b.snapshot(0).open_until) and b.note_key("other", 1) is False


def test_snapshot_reports_rates_errors_and_percentiles():
    b = CircuitBreaker(policy(**QUIET), DEP)
    for i in range(1, 21):
        feed(b, i * 0.1, server_error() if i == 20 else None, ttft_s=i / 10, latency_s=i)
    snap = b.snapshot(2.0)
    assert snap.calls_in_window == 20 and snap.failure_rate == pytest.approx(0.05)
    # Linear interpolation (llmroute/_runtime/percentile.py, as reports and bench): 20 samples 1..20.
    assert snap.p50_ttft_s == pytest.approx(1.05) and snap.p95_ttft_s == pytest.approx(1.905)
    assert snap.p50_latency_s == pytest.approx(10.5) and snap.p95_latency_s == pytest.approx(19.05)
    assert snap.last_error.startswith("ServerError") and snap.last_error_at == pytest.approx(2.0)


def test_percentile_is_the_one_linear_definition():
    from llmroute.accounting.report import percentile as report_percentile
    from llmroute.bench.stats import percentile as bench_percentile

    assert percentile is report_percentile is bench_percentile
    assert percentile([], 50) is None
    assert percentile([1.0], 95) == 1.0
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5  # numpy's default: 1 + (4 - 1) x 0.5
    assert percentile(list(map(float, range(1, 101))), 95) == pytest.approx(95.05)


def test_unknown_outcome_is_rejected():
    with pytest.raises(ValueError):
        CircuitBreaker(policy(), DEP).record(0, "meh")


# ---------------------------------------------------------------------------------------------
# breakers that come back (issue 10): probe leases, 429 holds, a recovered deployment gets traffic


def test_a_probe_that_never_reports_back_frees_its_slot_after_its_lease():
    b = CircuitBreaker(policy(consecutive_failures=1, open_s=5, half_open_probes=2, probe_lease_s=20), DEP)
    _trip(b, 0)
    p1, p2 = b.acquire(5), b.acquire(6)
    assert p1 is not None and p1.probe and p2 is not None
    assert b.acquire(7) is None and b.snapshot(7).probes_in_flight == 2  # both calls cancelled: never recorded
    assert b.snapshot(25.5).probes_in_flight == 1  # p1's lease ran out at 25
    assert b.acquire(25.5) is not None
    assert b.snapshot(26.5).probes_in_flight == 1  # p2's lease ran out at 26, the new probe holds one
    # The late outcome of an expired probe still counts, but frees nothing a second time.
    b.record(27, "success", permit=p1)
    assert b.snapshot(27).probes_in_flight == 1


def test_release_of_an_expired_probe_frees_nothing_twice():
    b = CircuitBreaker(policy(consecutive_failures=1, open_s=5, half_open_probes=1, probe_lease_s=10), DEP)
    _trip(b, 0)
    old = b.acquire(5)
    assert b.acquire(16) is not None  # old expired at 15; a new probe holds the only slot
    b.release(old)
    assert b.snapshot(16).probes_in_flight == 1 and b.acquire(16) is None


def test_the_default_probe_lease_is_the_call_deadline():
    p = policy()
    assert p.probe_lease == p.deadline_s
    assert policy(probe_lease_s=7).probe_lease == 7


def test_a_probe_answered_by_a_429_holds_for_its_retry_after_not_a_grown_open_period():
    b = CircuitBreaker(policy(consecutive_failures=1, open_s=30, open_max_s=300), DEP)
    _trip(b, 0)
    permit = b.acquire(30)
    assert permit is not None and permit.probe
    b.record(30, "failure", error=rate_limited(retry_after=1), permit=permit)
    snap = b.snapshot(30)
    assert snap.state == "open" and snap.open_until == 31
    assert b.snapshot(31).state == "half_open"
    assert snap.trips == 1  # a hold, not a trip: the next trip's open period does not grow


def test_429s_that_trip_the_breaker_hold_for_retry_after_not_open_s():
    b = CircuitBreaker(policy(consecutive_failures=2, open_s=30), DEP)
    feed(b, 0, rate_limited(retry_after=3))
    feed(b, 3, rate_limited(retry_after=1))
    snap = b.snapshot(3)
    assert snap.state == "open" and snap.open_until == 4
    assert b.peek(4)


def test_a_deployment_down_for_a_minute_gets_traffic_back_within_open_max_s():
    """Fake clock: a call a second; the primary fails for 60 s, then is healthy. Traffic returns by 60 + open_max_s."""
    p = policy()  # the defaults
    b = CircuitBreaker(p, DEP)
    back_at = None
    for second in range(0, 120):
        now = float(second)
        permit = b.acquire(now)
        if permit is None:
            continue
        if now < 60:
            b.record(now, "failure", error=server_error(), permit=permit)
        else:
            b.record(now, "success", permit=permit)
            if back_at is None:
                back_at = now
    assert back_at is not None and back_at <= 60 + p.open_max_s
    assert back_at < 76  # the 76-second run of the issue sees the primary again


def test_open_periods_are_jittered_down_never_up():
    import random

    rng = random.Random(7)
    opens = set()
    for _ in range(20):
        b = CircuitBreaker(policy(consecutive_failures=1, open_s=10, open_jitter=0.2), DEP, rng=rng)
        _trip(b, 0)
        until = b.snapshot(0).open_until
        assert 8.0 <= until <= 10.0
        opens.add(until)
    assert len(opens) > 10  # spread out, so many processes do not probe at the same instant
