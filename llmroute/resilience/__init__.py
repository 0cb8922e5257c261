"""Resilience, sans-I/O: breakers, retry decisions, failover planning, hedging and client-side limits.

Every state machine here takes the time as a float (`now`, monotonic seconds) and never sleeps,
reads a clock or touches the network; the client's sync and async shells drive them.
"""

from __future__ import annotations

from .breaker import BreakerSnapshot, CircuitBreaker, Permit, Transition
from .failover import Candidate, Done, Exhausted, FailoverPlan, PlannedAttempt, Send, Wait, order_candidates
from .health import BreakerRegistry, format_health
from .hedge import HedgePlan, hedge_delay_s
from .limits import Bulkhead, DeploymentLimits, TokenBucket
from .outcome import classify_failure
from .policy import ResiliencePolicy, merge, policy_from_config
from .retry import Backoff, BudgetRegistry, RatioBudget, decide_retry

__all__ = [
    "Backoff",
    "BreakerRegistry",
    "BreakerSnapshot",
    "BudgetRegistry",
    "Bulkhead",
    "Candidate",
    "CircuitBreaker",
    "DeploymentLimits",
    "Done",
    "Exhausted",
    "FailoverPlan",
    "HedgePlan",
    "Permit",
    "PlannedAttempt",
    "RatioBudget",
    "ResiliencePolicy",
    "Send",
    "TokenBucket",
    "Transition",
    "Wait",
    "classify_failure",
    "decide_retry",
    "format_health",
    "hedge_delay_s",
    "merge",
    "order_candidates",
    "policy_from_config",
]
