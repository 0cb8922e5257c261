"""Client-side limits per deployment and traffic pool: a concurrency bulkhead and token buckets.

Each (pool, deployment) pair has its own bulkhead (`max_concurrency`), request bucket (`rpm`) and
token bucket (`tpm`, tokens estimated from the prompt plus `max_tokens`), so batch traffic can never
spend the interactive pool's capacity. `DeploymentLimits.try_acquire` either grants a `Lease` (to be
released when the call ends) or says how long to wait before asking again; the caller decides
whether that wait fits its queue timeout and deadline (the failover planner does).

Sans-I/O: counters and arithmetic on a `now` passed in; nothing here sleeps or blocks.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Callable, Protocol

from llmroute._runtime.forksafe import renew_at_fork
from llmroute.resilience.policy import ResiliencePolicy

__all__ = ["TokenBucket", "Bulkhead", "Lease", "Admission", "DeploymentLimits", "Limits", "fits"]


class TokenBucket:
    """`rate_per_minute` tokens per minute, holding at most `capacity` (default: one minute's worth)."""

    def __init__(self, rate_per_minute: float, *, capacity: float | None = None) -> None:
        if rate_per_minute <= 0:
            raise ValueError("rate_per_minute must be positive")
        self.rate_per_s = rate_per_minute / 60.0
        self.capacity = float(capacity if capacity is not None else max(1.0, rate_per_minute))
        self._tokens = self.capacity
        self._updated: float | None = None  # starts full at the first `now` it sees

    def _refill(self, now: float) -> None:
        if self._updated is not None and now > self._updated:
            self._tokens = min(self.capacity, self._tokens + (now - self._updated) * self.rate_per_s)
        if self._updated is None or now > self._updated:
            self._updated = now

    def wait_for(self, now: float, amount: float) -> float:
        """Seconds until `amount` tokens are available (0 if now). Takes nothing."""
        self._refill(now)
        amount = min(amount, self.capacity)  # a request bigger than the bucket goes when it is full
        missing = amount - self._tokens
        return 0.0 if missing <= 1e-9 else missing / self.rate_per_s

    def take(self, now: float, amount: float) -> None:
        self._refill(now)
        self._tokens -= min(amount, self.capacity)

    def try_acquire(self, now: float, amount: float = 1.0) -> float:
        """Take `amount` tokens and return 0.0, or take nothing and return the seconds to wait."""
        wait = self.wait_for(now, amount)
        if wait == 0.0:
            self.take(now, amount)
        return wait

    def available(self, now: float) -> float:
        self._refill(now)
        return self._tokens


class Bulkhead:
    """At most `limit` calls in flight."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self.limit = limit
        self.in_flight = 0

    def try_acquire(self) -> bool:
        if self.in_flight >= self.limit:
            return False
        self.in_flight += 1
        return True

    def release(self) -> None:
        if self.in_flight > 0:
            self.in_flight -= 1


@dataclass
class Lease:
    """One admitted call's hold on its bulkhead slot; release it exactly once (repeats are ignored)."""

    pool: str
    deployment_id: str
    released: bool = field(default=False)
    generation: int = 0  # the `DeploymentLimits` generation it was granted in (a fork starts a new one)


@dataclass(frozen=True)
class Admission:
    granted: bool
    wait_s: float = 0.0
    reason: str = ""
    lease: Lease | None = None


@dataclass
class _PoolLimits:
    bulkhead: Bulkhead | None
    requests: TokenBucket | None
    tokens: TokenBucket | None
    poll_s: float


class Limits(Protocol):
    """What the failover plan uses of its limits: `DeploymentLimits`, or state's `SharedLimits` and
    `PreAdmitted` (the Redis-shared ones, which the resilience layer does not import)."""

    def policy(self, pool: str, deployment_id: str) -> ResiliencePolicy: ...
    def try_acquire(self, now: float, deployment_id: str, *, pool: str = "interactive", tokens: int = 0) -> Admission: ...
    def release(self, lease: Lease | None) -> None: ...


class DeploymentLimits:
    """Limits per (pool, deployment). `policy_for(pool, deployment_id)` gives that pair's policy."""

    def __init__(self, policy_for: Callable[[str, str], ResiliencePolicy]) -> None:
        self._policy_for = policy_for
        self._lock = threading.Lock()
        self._limits: dict[tuple[str, str], _PoolLimits] = {}
        self._generation = 0
        renew_at_fork(self, "_lock")

    def _after_fork_in_child(self) -> None:
        """A forked child keeps the rate buckets as they stood; the concurrency slots held by the
        parent's calls are the parent's (they end there), so the child starts with none in flight and
        ignores the release of a lease granted before the fork."""
        self._generation += 1
        for limits in self._limits.values():
            if limits.bulkhead is not None:
                limits.bulkhead.in_flight = 0

    def policy(self, pool: str, deployment_id: str) -> ResiliencePolicy:
        """The policy this pool's traffic to the deployment runs under (its queue timeout, too)."""
        return self._policy_for(pool, deployment_id)

    def _get(self, pool: str, deployment_id: str) -> _PoolLimits:
        key = (pool, deployment_id)
        limits = self._limits.get(key)
        if limits is None:
            p = self._policy_for(pool, deployment_id)
            limits = _PoolLimits(
                bulkhead=Bulkhead(p.max_concurrency) if p.max_concurrency else None,
                requests=TokenBucket(p.rpm) if p.rpm else None,
                tokens=TokenBucket(p.tpm) if p.tpm else None,
                poll_s=p.queue_poll_s,
            )
            self._limits[key] = limits
        return limits

    def try_acquire(self, now: float, deployment_id: str, *, pool: str = "interactive", tokens: int = 0) -> Admission:
        """Grant a lease (taking one request and `tokens` tokens), or say how long to wait."""
        with self._lock:
            limits = self._get(pool, deployment_id)
            if limits.bulkhead is not None and limits.bulkhead.in_flight >= limits.bulkhead.limit:
                return Admission(False, limits.poll_s, f"concurrency limit {limits.bulkhead.limit} reached")
            waits = []
            if limits.requests is not None:
                waits.append((limits.requests.wait_for(now, 1), "requests-per-minute limit"))
            if limits.tokens is not None and tokens > 0:
                waits.append((limits.tokens.wait_for(now, tokens), "tokens-per-minute limit"))
            wait, reason = max(waits, default=(0.0, ""))
            if wait > 0:
                return Admission(False, wait, reason)
            if limits.requests is not None:
                limits.requests.take(now, 1)
            if limits.tokens is not None and tokens > 0:
                limits.tokens.take(now, tokens)
            if limits.bulkhead is not None:
                limits.bulkhead.try_acquire()
            return Admission(True, lease=Lease(pool, deployment_id, generation=self._generation))

    def release(self, lease: Lease | None) -> None:
        if lease is None or lease.released:
            return
        with self._lock:
            lease.released = True
            limits = self._limits.get((lease.pool, lease.deployment_id))
            if limits is not None and limits.bulkhead is not None and lease.generation == self._generation:
                limits.bulkhead.release()

    def in_flight(self, deployment_id: str, *, pool: str = "interactive") -> int:
        with self._lock:
            bulkhead = self._get(pool, deployment_id).bulkhead
            return bulkhead.in_flight if bulkhead is not None else 0


def fits(wait_s: float, *, now: float, queued_since: float, queue_timeout_s: float, deadline_at: float) -> bool:
    """Whether waiting `wait_s` more keeps within the queue timeout and the call's deadline."""
    if math.isinf(wait_s):
        return False
    return (now + wait_s) - queued_since <= queue_timeout_s and now + wait_s < deadline_at
