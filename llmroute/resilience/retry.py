"""Retry decisions: how long to wait before retrying a deployment, and whether the budget allows it.

- The wait is the *current* failure's Retry-After when it carries one (never an earlier attempt's);
  a Retry-After longer than `retry_after_max_s` means "move on", not "retry early". Otherwise full
  jitter: uniform(0, min(backoff_base_s * 2**n, backoff_max_s)), the jitter drawn from the caller's
  `random.Random` (tests seed it). (tenacity is not used: docs/failover.md, "Why not tenacity".)
- A wait that would not fit the call's deadline means "move on" instead of sleeping.
- When an untried backup can take the call (`has_backup`), the backup is the better bet: a timeout
  (a silent or stalled deployment stays silent) is never retried on the same deployment, at most
  `max_retries_with_backup` retries are made, and a Retry-After longer than
  `retry_after_with_backup_max_s` moves on instead of waiting.
- `RatioBudget` caps retries (or hedges) at a share of recent requests, per deployment, so retries
  cannot multiply the load on a struggling platform (Envoy's retry budget, over a time window).

Pure decisions and small counters: no sleeping, no clock of its own, no I/O.
"""

from __future__ import annotations

import math
import random
import threading
from collections import deque
from dataclasses import dataclass
from typing import Callable

from llmroute import errors as E
from llmroute._runtime.forksafe import renew_at_fork
from llmroute.resilience.outcome import is_retryable_here, retry_after_of
from llmroute.resilience.policy import ResiliencePolicy

__all__ = ["Backoff", "RatioBudget", "BudgetRegistry", "RetryDecision", "decide_retry", "dropped_before_reply", "retry_after_of"]


@dataclass(frozen=True)
class Backoff:
    """Full-jitter exponential backoff built from a policy: a value; the randomness is passed in."""

    base_s: float
    max_s: float

    @classmethod
    def from_policy(cls, policy: ResiliencePolicy) -> "Backoff":
        return cls(policy.backoff_base_s, policy.backoff_max_s)

    def ceiling_s(self, retry_number: int) -> float:
        """The upper bound of the n-th retry's wait (retry_number counts from 1)."""
        try:
            ceiling = self.base_s * 2.0 ** (max(1, retry_number) - 1)
        except OverflowError:  # a float power past 1e308: far above any max
            return self.max_s
        return max(0.0, min(ceiling, self.max_s))

    def wait_s(self, retry_number: int, rng: random.Random) -> float:
        return rng.uniform(0.0, self.ceiling_s(retry_number))


@dataclass(frozen=True)
class RetryDecision:
    retry: bool
    wait_s: float = 0.0
    reason: str = ""  # why not, or where the wait came from ("retry_after", "backoff")


def decide_retry(
    policy: ResiliencePolicy,
    error: BaseException,
    *,
    retries_done: int,
    now: float,
    deadline_at: float,
    rng: random.Random,
    budget_ok: bool = True,
    breaker_open_until: float | None = None,
    has_backup: bool = False,
) -> RetryDecision:
    """Should the same deployment be tried again after `error`, and after how long?

    `retries_done` counts retries already made on this deployment for this call.
    `breaker_open_until` is the deployment's open deadline if its breaker is open now.
    `has_backup`: another deployment can still take the call.
    """
    if not is_retryable_here(error):
        return RetryDecision(False, reason="not retryable")
    if retries_done >= policy.max_retries:
        return RetryDecision(False, reason=f"max_retries ({policy.max_retries}) reached")
    if dropped_before_reply(error):
        # A second drop in one call (the plan resends the first at once, uncounted): says nothing of
        # the platform's health either, so no backoff.
        return RetryDecision(True, 0.0, reason="connection dropped before a reply: resent")
    if has_backup:
        if isinstance(error, E.APITimeoutError):
            return RetryDecision(False, reason=f"{error.timeout} timeout: a silent deployment stays silent, "
                                               f"trying the backup")
        if retries_done >= policy.max_retries_with_backup:
            return RetryDecision(False, reason=f"max_retries_with_backup ({policy.max_retries_with_backup}) "
                                               f"reached: trying the backup")
    if not budget_ok:
        return RetryDecision(False, reason="retry budget exhausted")
    retry_after = retry_after_of(error)
    if retry_after is not None:
        if retry_after > policy.retry_after_max_s:
            return RetryDecision(
                False, reason=f"Retry-After {retry_after:g}s exceeds retry_after_max_s {policy.retry_after_max_s:g}s"
            )
        if has_backup and retry_after > policy.retry_after_with_backup_max_s:
            return RetryDecision(False, reason=f"Retry-After {retry_after:g}s: trying the backup instead of waiting")
        wait, source = retry_after, "retry_after"
    else:
        wait, source = Backoff.from_policy(policy).wait_s(retries_done + 1, rng), "backoff"
    if breaker_open_until is not None:
        if math.isinf(breaker_open_until):
            return RetryDecision(False, reason="deployment disabled")
        if breaker_open_until - now > wait + 1e-9:
            # The breaker tripped for longer than we would wait: another deployment, not a long sleep.
            return RetryDecision(False, reason=f"breaker open for {breaker_open_until - now:.2f}s")
    if now + wait >= deadline_at:
        return RetryDecision(False, wait_s=wait, reason=f"a {wait:.2f}s wait does not fit the deadline")
    return RetryDecision(True, wait_s=wait, reason=source)


def dropped_before_reply(error: BaseException) -> bool:
    """The server closed a pooled keep-alive connection before answering (transport.DROPPED_BEFORE_REPLY)."""
    return isinstance(error, E.APIConnectionError) and error.code == "connection_dropped_before_reply"


class RatioBudget:
    """Spends allowed at most `ratio` of the requests seen in the last `window_s` (plus `minimum`).

    `note_request(now)` counts a request at dispatch (not on completion: LLM calls are long, and
    counting late lets a storm through). `try_spend(now)` takes one retry/hedge if the budget allows.
    """

    def __init__(self, ratio: float, *, window_s: float, minimum: int = 0) -> None:
        self.ratio = ratio
        self.window_s = window_s
        self.minimum = minimum
        self._lock = threading.Lock()
        self._requests: deque[float] = deque()
        self._spends: deque[float] = deque()
        renew_at_fork(self, "_lock")

    def note_request(self, now: float) -> None:
        with self._lock:
            self._requests.append(now)
            self._evict(now)

    def allowed(self, now: float) -> bool:
        with self._lock:
            self._evict(now)
            return self._has_room()

    def try_spend(self, now: float) -> bool:
        with self._lock:
            self._evict(now)
            if not self._has_room():
                return False
            self._spends.append(now)
            return True

    def counts(self, now: float) -> tuple[int, int]:
        """(requests, spends) in the window."""
        with self._lock:
            self._evict(now)
            return len(self._requests), len(self._spends)

    def _has_room(self) -> bool:
        allowance = max(float(self.minimum), self.ratio * len(self._requests))
        return len(self._spends) + 1 <= allowance + 1e-9

    def _evict(self, now: float) -> None:
        horizon = now - self.window_s
        for q in (self._requests, self._spends):
            while q and q[0] <= horizon:
                q.popleft()


class BudgetRegistry:
    """One retry budget per deployment and one hedge budget per tier, built from their policies."""

    def __init__(self, policies: Callable[[str], ResiliencePolicy]) -> None:
        self._policies = policies
        self._lock = threading.Lock()
        self._retry: dict[str, RatioBudget] = {}
        self._hedge: dict[str, RatioBudget] = {}
        renew_at_fork(self, "_lock")

    def retry(self, deployment_id: str) -> RatioBudget:
        budget = self._retry.get(deployment_id)  # made once, never replaced: read without the lock
        if budget is not None:
            return budget
        with self._lock:
            budget = self._retry.get(deployment_id)
            if budget is None:
                p = self._policies(deployment_id)
                budget = RatioBudget(p.retry_budget, window_s=p.retry_budget_window_s, minimum=p.retry_budget_min)
                self._retry[deployment_id] = budget
            return budget

    def hedge(self, key: str, policy: ResiliencePolicy) -> RatioBudget:
        """The hedge budget for `key` (a tier name), created from `policy` on first use."""
        with self._lock:
            budget = self._hedge.get(key)
            if budget is None:
                budget = RatioBudget(policy.hedge_budget, window_s=policy.retry_budget_window_s, minimum=policy.hedge_budget_min)
                self._hedge[key] = budget
            return budget
