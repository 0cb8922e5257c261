"""Resilience, sans-I/O: breakers, retry decisions, failover planning, hedging and client-side limits.

Every state machine here takes the time as a float (`now`, monotonic seconds) and never sleeps,
reads a clock or touches the network; the client's sync and async shells drive them.
"""

from __future__ import annotations

from llmroute.resilience.breaker import BreakerSnapshot, CircuitBreaker, Permit, Transition
from llmroute.resilience.failover import Candidate, Done, Exhausted, FailoverPlan, PlannedAttempt, Send, Wait, order_candidates
from llmroute.resilience.deployment_health import BreakerRegistry, format_health
from llmroute.resilience.hedge import HedgePlan, hedge_delay_s
from llmroute.resilience.limits import Bulkhead, DeploymentLimits, TokenBucket
from llmroute.resilience.outcome import classify_failure
from llmroute.resilience.policy import ResiliencePolicy, merge, policy_from_config
from llmroute.resilience.retry import Backoff, BudgetRegistry, RatioBudget, decide_retry

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
