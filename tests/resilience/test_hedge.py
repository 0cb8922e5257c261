"""When a hedge starts, and what caps it."""

from __future__ import annotations

import pytest

from llmroute.resilience.hedge import HedgePlan, hedge_delay_s
from llmroute.resilience.policy import ResiliencePolicy
from llmroute.resilience.retry import RatioBudget


def test_hedging_is_off_unless_the_tier_opts_in():
    assert hedge_delay_s(ResiliencePolicy()) is None
    plan = HedgePlan.start(ResiliencePolicy(), now=0.0, budget=None)
    assert plan.hedge_at is None and not plan.check(100.0, first_token_seen=False)


def test_fixed_delay_from_hedge_after_ms():
    pol = ResiliencePolicy(hedge_after_ms=1500)
    plan = HedgePlan.start(pol, now=10.0, budget=None)
    assert plan.hedge_at == 11.5
    assert not plan.check(11.4, first_token_seen=False)
    assert plan.check(11.5, first_token_seen=False)
    assert not plan.check(12.0, first_token_seen=False)  # at most one hedge per call
    assert plan.hedge_at is None


def test_never_after_the_first_token():
    plan = HedgePlan.start(ResiliencePolicy(hedge_after_ms=100), now=0.0, budget=None)
    assert not plan.check(5.0, first_token_seen=True)


def test_p95_delay_once_enough_samples_are_known():
    pol = ResiliencePolicy(hedge_after_ms=1500, hedge_delay="p95", hedge_min_samples=20)
    samples = [0.1 * i for i in range(1, 21)]  # p95 = 1.905 s (linear interpolation, llmroute/_runtime/percentile.py)
    assert hedge_delay_s(pol, samples) == pytest.approx(1.905)
    assert hedge_delay_s(pol, samples[:19]) == 1.5  # too few: the fixed delay
    assert hedge_delay_s(ResiliencePolicy(hedge_after_ms=1500), samples) == 1.5  # "fixed" ignores samples


def test_the_hedge_budget_caps_extra_load():
    pol = ResiliencePolicy(hedge_after_ms=100, hedge_budget=0.1, hedge_budget_min=0)
    budget = RatioBudget(pol.hedge_budget, window_s=600, minimum=pol.hedge_budget_min)
    hedged = 0
    for i in range(100):
        plan = HedgePlan.start(pol, now=float(i), budget=budget)
        if plan.check(i + 0.5, first_token_seen=False):
            hedged += 1
        else:
            assert plan.refused_by_budget and plan.hedge_at is None
    assert hedged == 10
