"""When to hedge: start a second deployment if the first has produced no token for too long.

Hedging is opt-in per tier (`hedge_after_ms`). The delay is `hedge_after_ms`, or with
`hedge_delay = "p95"` the primary's recent p95 TTFT once `hedge_min_samples` are known ("The Tail at
Scale": defer the backup until the primary is slower than its p95, which limits the extra load to
about 5%). A hedge budget (a share of the tier's recent requests) caps that extra load, and a call
hedges at most once and never after the first token reached the caller.

The shell asks `HedgePlan.check(now, first_token_seen=...)` (or sleeps until `hedge_at`); when it
says yes it calls `FailoverPlan.hedge_step(now)`, races the two attempts, keeps whichever yields
content first and `FailoverPlan.cancel`s the other. No I/O, no clock of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from llmroute.resilience.breaker import percentile
from llmroute.resilience.policy import ResiliencePolicy
from llmroute.resilience.retry import RatioBudget

__all__ = ["hedge_delay_s", "HedgePlan"]


def hedge_delay_s(policy: ResiliencePolicy, recent_ttft_s: Sequence[float] = ()) -> float | None:
    """Seconds to wait for a first token before hedging, or None when hedging is off."""
    if policy.hedge_after_ms is None:
        return None
    fixed = policy.hedge_after_ms / 1000.0
    if policy.hedge_delay == "p95" and len(recent_ttft_s) >= policy.hedge_min_samples:
        p95 = percentile(sorted(recent_ttft_s), 95)
        if p95 is not None and p95 > 0:
            return p95
    return fixed


@dataclass
class HedgePlan:
    """One call's hedging decision. Build it with `HedgePlan.start(...)` when the primary is sent."""

    delay_s: float | None
    primary_started_at: float
    budget: RatioBudget | None
    hedged: bool = False
    refused_by_budget: bool = False

    @classmethod
    def start(
        cls,
        policy: ResiliencePolicy,
        *,
        now: float,
        budget: RatioBudget | None,
        recent_ttft_s: Sequence[float] = (),
    ) -> "HedgePlan":
        delay = hedge_delay_s(policy, recent_ttft_s)
        if delay is not None and budget is not None:
            budget.note_request(now)  # counted at dispatch, like the retry budget
        return cls(delay, now, budget)

    @property
    def hedge_at(self) -> float | None:
        """When to check again (absolute time), or None if this call will never hedge."""
        if self.delay_s is None or self.hedged or self.refused_by_budget:
            return None
        return self.primary_started_at + self.delay_s

    def check(self, now: float, *, first_token_seen: bool) -> bool:
        """True exactly once, when the hedge should start now (and the budget pays for it)."""
        at = self.hedge_at
        if at is None or first_token_seen or now < at:
            return False
        if self.budget is not None and not self.budget.try_spend(now):
            self.refused_by_budget = True
            return False
        self.hedged = True
        return True
