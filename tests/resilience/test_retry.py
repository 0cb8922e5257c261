"""Backoff, Retry-After, deadlines and the retry budget."""

from __future__ import annotations

import math
import random

from hypothesis import given
from hypothesis import strategies as st

from llmroute.resilience.policy import ResiliencePolicy
from llmroute.resilience.retry import Backoff, BudgetRegistry, RatioBudget, decide_retry, retry_after_of

from .helpers import auth_error, bad_request, rate_limited, server_error


def decide(error, *, retries_done=0, now=0.0, deadline_at=100.0, seed=0, **kw):
    pol = ResiliencePolicy(**kw.pop("policy", {}))
    return decide_retry(pol, error, retries_done=retries_done, now=now, deadline_at=deadline_at, rng=random.Random(seed), **kw)


def test_backoff_ceiling_doubles_up_to_the_max():
    b = Backoff(base_s=0.5, max_s=3.0)
    assert [b.ceiling_s(n) for n in (1, 2, 3, 4, 5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert b.ceiling_s(0) == 0.5 and b.ceiling_s(5000) == 3.0  # counted from 1; no overflow far out


@given(st.integers(1, 60), st.integers(0, 2**32))
def test_full_jitter_stays_within_the_ceiling(n, seed):
    b = Backoff(base_s=0.5, max_s=8.0)
    wait = b.wait_s(n, random.Random(seed))
    assert 0.0 <= wait <= b.ceiling_s(n) <= 8.0


def test_full_jitter_spreads_waits():
    b = Backoff(base_s=1.0, max_s=8.0)
    rng = random.Random(7)
    waits = [b.wait_s(3, rng) for _ in range(200)]
    assert min(waits) < 1.0 and max(waits) > 3.0  # uniform over [0, 4), not a fixed 4


def test_the_current_errors_retry_after_decides_the_wait():
    d = decide(rate_limited(retry_after=4.0))
    assert d.retry and d.wait_s == 4.0 and d.reason == "retry_after"
    d = decide(server_error(), policy={"backoff_base_s": 0.5, "backoff_max_s": 0.5})
    assert d.retry and d.reason == "backoff" and 0 <= d.wait_s <= 0.5


def test_a_retry_after_beyond_the_cap_moves_on():
    d = decide(rate_limited(retry_after=45.0), policy={"retry_after_max_s": 30})
    assert not d.retry and "retry_after_max_s" in d.reason


def test_a_wait_that_does_not_fit_the_deadline_moves_on():
    d = decide(rate_limited(retry_after=5.0), now=96.0, deadline_at=100.0)
    assert not d.retry and "deadline" in d.reason
    assert decide(rate_limited(retry_after=5.0), now=90.0, deadline_at=100.0).retry


def test_max_retries_and_budget_and_classes():
    assert not decide(server_error(), retries_done=2).retry
    assert decide(server_error(), retries_done=1).retry
    assert not decide(server_error(), budget_ok=False).retry
    assert not decide(bad_request()).retry
    assert not decide(auth_error()).retry


def test_a_tripped_breaker_moves_on_but_a_retry_after_hold_is_waited_out():
    assert not decide(server_error(), now=0.0, breaker_open_until=30.0).retry
    d = decide(rate_limited(retry_after=3.0), now=0.0, breaker_open_until=3.0)
    assert d.retry and d.wait_s == 3.0
    assert not decide(server_error(), breaker_open_until=math.inf).retry


def test_retry_after_of():
    assert retry_after_of(rate_limited(retry_after=2.5)) == 2.5
    assert retry_after_of(rate_limited()) is None
    assert retry_after_of(ValueError()) is None


def test_ratio_budget_allows_a_share_of_recent_requests():
    b = RatioBudget(0.2, window_s=60, minimum=0)
    for i in range(10):
        b.note_request(i)
    assert b.try_spend(10) and b.try_spend(10)  # 2 = 20% of 10
    assert not b.try_spend(10)
    assert b.counts(10) == (10, 2)


def test_ratio_budget_minimum_allows_retries_at_low_traffic():
    b = RatioBudget(0.2, window_s=60, minimum=3)
    b.note_request(0)
    assert all(b.try_spend(0) for _ in range(3))
    assert not b.try_spend(0)


def test_ratio_budget_forgets_old_requests_and_spends():
    b = RatioBudget(0.5, window_s=10, minimum=0)
    for _i in range(4):
        b.note_request(0)
    assert b.try_spend(0) and b.try_spend(0) and not b.try_spend(0)
    assert not b.allowed(10.5)  # requests aged out: nothing to spend against
    b.note_request(11)
    b.note_request(11)
    assert b.try_spend(11)  # the old spends aged out too


def test_budget_registry_is_per_deployment_with_its_policy():
    policies = {"a:m": ResiliencePolicy(retry_budget=0.0, retry_budget_min=0), "b:m": ResiliencePolicy()}
    reg = BudgetRegistry(policies.__getitem__)
    reg.retry("a:m").note_request(0)
    reg.retry("b:m").note_request(0)
    assert not reg.retry("a:m").try_spend(0)
    assert reg.retry("b:m").try_spend(0)
    assert reg.retry("a:m") is reg.retry("a:m")
