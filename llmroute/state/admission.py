"""One round trip to Redis before sending: a call's budget reservation and its client-side limits.

With shared budgets and shared limits, the engine asks for both in one script
(`budgets.RESERVE_AND_ADMIT_LUA`): it predicts the deployment the failover plan will try first (the
plan's order, drawn from a random generator of the call's own that the plan then uses too, and the
plan's context and breaker checks) and sends that deployment's `LimitRequest` with the budget
reservation. `PreAdmitted` is the call's view of the shared limits: the plan's first `try_acquire`
for that deployment gets the admission already taken (granted, or how long to wait); any other
`try_acquire` goes to Redis as before. An admission the plan did not use (it chose another
deployment, or ended first) is released; the rpm/tpm tokens it took stay taken (the limit only errs
on the strict side).
"""

from __future__ import annotations


from llmroute.resilience.limits import Admission, Lease
from llmroute.state.shared_limits import LimitRequest, SharedLimits
from llmroute.resilience.policy import ResiliencePolicy

__all__ = ["PreAdmitted"]


class PreAdmitted:
    """`SharedLimits` for one call, holding the admission taken with its budget reservation."""

    def __init__(self, limits: SharedLimits, request: LimitRequest, admission: Admission) -> None:
        self.limits = limits
        self._held: tuple[LimitRequest, Admission] | None = (request, admission)

    def policy(self, pool: str, deployment_id: str) -> ResiliencePolicy:
        return self.limits.policy(pool, deployment_id)

    def try_acquire(self, now: float, deployment_id: str, *, pool: str = "interactive", tokens: int = 0) -> Admission:
        held, self._held = self._held, None
        if held is not None:
            request, admission = held
            if (request.deployment_id, request.pool, request.tokens) == (deployment_id, pool, int(tokens)):
                return admission
            self.limits.release(admission.lease)
        return self.limits.try_acquire(now, deployment_id, pool=pool, tokens=tokens)

    def release(self, lease: Lease | None) -> None:
        self.limits.release(lease)

    def in_flight(self, deployment_id: str, *, pool: str = "interactive") -> int:
        return self.limits.in_flight(deployment_id, pool=pool)

    def discard(self) -> None:
        """Release the admission if the plan never used it (the call ended first)."""
        held, self._held = self._held, None
        if held is not None:
            self.limits.release(held[1].lease)
