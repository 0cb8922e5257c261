"""One deployment's circuit breaker: closed, open, half-open, driven by outcomes and a clock passed in.

Rules (each has a test in tests/resilience/test_breaker.py):
- Closed trips to open on a failure rate >= `failure_rate` or a slow-call rate >= `slow_rate` over the
  sliding window (time- or count-based) once `min_calls` calls are in it, or at once after
  `consecutive_failures` failures in a row. A call is slow when its TTFT exceeds `slow_ttft_s`.
- The open period is `open_s * open_growth**(n-1)` for the n-th trip in a row, capped at `open_max_s`
  (30 s by default, so a deployment that recovers gets traffic back within one `open_max_s` however
  long its outage was); the count resets once the breaker has stayed closed for `trip_memory_s`.
  With an `rng`, each open period is shortened by up to `open_jitter` of itself, so the breakers of
  many processes do not probe a recovering platform at the same instant.
- A 429 carrying Retry-After never trips the breaker for `open_s`: it holds it open for the platform's
  own Retry-After (capped at `open_max_s`), also when it answers a half-open probe.
- A platform's Retry-After (on the current failure) extends the open deadline, never shortens it. With
  `open_on_retry_after` a failure carrying Retry-After opens a closed breaker at once until then
  (capped at `open_max_s`): the platform told us every call before then will be refused. Such a hold
  is not a trip: it does not grow later open periods.
- When the open deadline passes the breaker is half-open: at most `half_open_probes` calls in flight;
  `half_open_successes` probe successes close it (clearing the window), one probe failure reopens it.
  A probe permit is a lease: one not recorded or released within `probe_lease_s` (its call was
  cancelled, abandoned or garbage-collected) gives its slot back by itself.
- Caller errors ("caller") change nothing. Fatal errors (auth, billing, unknown model) disable the
  breaker: state "open", `open_until` = inf (or `fatal_open_s`), and `disabled_reason` says why. A
  401 (`AuthenticationError`) disables it for `auth_recheck_s` (then a probe tries the key again), and
  `note_key` lifts it at once when the deployment's key is no longer the one refused.
- The breaker keeps the error that opened it (`held_by`, detached from its traceback) until it
  closes: a call that finds every deployment held raises that error's class (failover.py).

This module never sleeps, reads a clock, logs or touches the network: `now` is a float the caller
passes in (monotonic seconds). `record` returns the `Transition` it caused so the owner can log it.
"""

from __future__ import annotations

import itertools
import math
import random
import threading
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any, Literal

from llmroute._runtime.forksafe import renew_at_fork
from llmroute._runtime.percentile import percentile  # one definition for health, hedging, reports and bench
from llmroute import errors as E
from llmroute.resilience.outcome import describe_error, retry_after_of
from llmroute.resilience.policy import ResiliencePolicy

__all__ = ["BreakerState", "Permit", "Transition", "BreakerSnapshot", "CircuitBreaker", "percentile"]

BreakerState = Literal["closed", "open", "half_open"]

# Recent TTFT and latency samples kept for health percentiles and hedge delays.
SAMPLES_KEPT = 200


@dataclass(frozen=True)
class Permit:
    """Admission to send one call. `probe` marks a half-open probe of half-open episode `epoch`;
    `seq` identifies the probe's lease."""

    deployment_id: str
    probe: bool
    epoch: int
    seq: int = 0


@dataclass(frozen=True)
class Transition:
    deployment_id: str
    from_state: BreakerState
    to_state: BreakerState
    reason: str
    at: float
    open_until: float | None
    disabled: bool = False
    cause: BaseException | None = None  # the error that opened it (detached), when one did


@dataclass(frozen=True)
class BreakerSnapshot:
    """What `client.health()` shows for one deployment."""

    deployment_id: str
    state: BreakerState
    failure_rate: float
    slow_rate: float
    calls_in_window: int
    failures_in_window: int
    slow_in_window: int
    consecutive_failures: int
    open_until: float | None
    trips: int
    reason: str | None
    changed_at: float | None
    last_error: str | None
    last_error_at: float | None
    disabled_reason: str | None
    probes_in_flight: int
    p50_ttft_s: float | None
    p95_ttft_s: float | None
    p50_latency_s: float | None
    p95_latency_s: float | None
    # The load estimate (resilience/balance.py: in flight, latency, capacity, queue gauges); set by `client.health()`.
    load: dict[str, Any] | None = None

    @property
    def disabled(self) -> bool:
        return self.disabled_reason is not None

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if data["open_until"] is not None and math.isinf(data["open_until"]):
            data["open_until"] = "never"  # JSON has no infinity
        return data


class CircuitBreaker:
    """Breaker for one deployment. Thread-safe; every method takes `now` (monotonic seconds)."""

    def __init__(self, policy: ResiliencePolicy, deployment_id: str, *, rng: random.Random | None = None) -> None:
        self.policy = policy
        self.deployment_id = deployment_id
        self._rng = rng  # None: open periods are exact (no jitter)
        self._lock = threading.Lock()
        self._state: BreakerState = "closed"
        self._open_until: float | None = None
        self._reason: str | None = None
        self._changed_at: float | None = None
        self._disabled_reason: str | None = None
        self._trips = 0
        self._trips_in_row = 0
        self._closed_at: float | None = None
        self._epoch = 0  # half-open episode; a probe permit is only valid in its own episode
        self._closed_permit: Permit | None = None  # what `acquire` hands out while closed (`_epoch`'s)
        self._probes: dict[int, float] = {}  # probe permit seq -> when it was granted (the lease)
        self._probe_seq = itertools.count(1)
        self._probe_successes = 0
        self._consecutive_failures = 0
        self._window: deque[tuple[float, bool, bool]] = deque()  # (time, failed, slow)
        self._failures = 0
        self._slow = 0
        self._last_error: str | None = None
        self._last_error_at: float | None = None
        self._cause: BaseException | None = None  # the error that opened the breaker (detached)
        self._key: str | None = None  # fingerprint of the key calls use now (`note_key`)
        self._refused_key: str | None = None  # fingerprint of the key a 401 refused
        self._ttft: deque[float] = deque(maxlen=SAMPLES_KEPT)
        self._latency: deque[float] = deque(maxlen=SAMPLES_KEPT)
        renew_at_fork(self, "_lock")

    def _after_fork_in_child(self) -> None:
        """A forked child keeps the breaker's state and samples; the probes the parent's threads were
        making are theirs (they end in the parent), so the child may probe at once."""
        self._probes.clear()

    # ------------------------------------------------------------------ admission

    def peek(self, now: float) -> bool:
        """Would a call be admitted now? Reserves nothing."""
        with self._lock:
            self._advance(now)
            if self._state == "closed":
                return True
            if self._state == "half_open":
                return len(self._probes) < self.policy.half_open_probes
            return False

    def acquire(self, now: float) -> Permit | None:
        """Admit one call, or return None. A half-open admission holds a probe slot until recorded."""
        with self._lock:
            self._advance(now)
            if self._state == "closed":
                # The same for every call admitted while closed in this episode: made once per episode.
                permit = self._closed_permit
                if permit is None or permit.epoch != self._epoch:
                    permit = self._closed_permit = Permit(self.deployment_id, False, self._epoch)
                return permit
            if self._state == "half_open" and len(self._probes) < self.policy.half_open_probes:
                seq = next(self._probe_seq)
                self._probes[seq] = now
                return Permit(self.deployment_id, True, self._epoch, seq)
            return None

    def allow(self, now: float) -> bool:
        """`acquire` for callers that keep no permit; the next `record` without a permit ends the probe."""
        return self.acquire(now) is not None

    def release(self, permit: Permit | None) -> None:
        """Give back a permit whose call ended without an outcome (cancelled, never sent)."""
        with self._lock:
            self._end_probe(permit)

    # ------------------------------------------------------------------ outcomes

    def record(
        self,
        now: float,
        outcome: str,
        *,
        ttft_s: float | None = None,
        latency_s: float | None = None,
        error: BaseException | None = None,
        permit: Permit | None = None,
    ) -> Transition | None:
        """Record how a call ended ("success", "failure", "caller", "fatal"); return the transition, if any."""
        if outcome not in ("success", "failure", "caller", "fatal"):
            raise ValueError(f"unknown outcome {outcome!r}")
        with self._lock:
            self._advance(now)
            before = self._state
            before_until = self._open_until
            was_disabled = self._disabled_reason is not None
            was_probe = self._end_probe(permit)
            if outcome == "caller":
                return None
            failed = outcome != "success"
            slow = ttft_s is not None and ttft_s > self.policy.slow_ttft_s
            self._add_to_window(now, failed, slow)
            if ttft_s is not None:
                self._ttft.append(float(ttft_s))
            if latency_s is not None:
                self._latency.append(float(latency_s))
            if failed:
                self._consecutive_failures += 1
                self._last_error = describe_error(error) or outcome
                self._last_error_at = now
            else:
                self._consecutive_failures = 0

            if outcome == "fatal":
                self._disable(now, error)
            else:
                self._transition_on(now, failed, was_probe, _retry_after(error) if failed else None,
                                    rate_limited=failed and isinstance(error, E.RateLimitError))
            newly_disabled = self._disabled_reason is not None and not was_disabled
            if failed and error is not None and self._state == "open" and (
                    before != "open" or self._open_until != before_until or self._cause is None):
                self._cause = detached(error)
            if self._state == before and not newly_disabled:
                return None
            return Transition(
                self.deployment_id,
                before,
                self._state,
                self._reason or "",
                now,
                self._open_until,
                disabled=self._disabled_reason is not None,
                cause=self._cause if self._state == "open" else None,
            )

    def extend_open(self, now: float, until: float, *, reason: str = "platform asked to wait",
                    cause: BaseException | None = None) -> None:
        """Keep the breaker open until at least `until`: extends an open deadline, never shortens it.

        A closed or half-open breaker opens (a hold, not a trip: later open periods do not grow).
        `cause` is the error that holds it (kept as `held_by`) when no error of this process does.
        """
        with self._lock:
            self._advance(now)
            self._hold(now, until, reason)
            if cause is not None and self._state == "open" and self._cause is None:
                self._cause = cause

    def held_by(self, now: float) -> BaseException | None:
        """The error that holds the breaker open (or half-open), detached; None when closed or when no
        error opened it (a slow-call trip, a hold adopted from a process that did not name its error)."""
        with self._lock:
            self._advance(now)
            return None if self._state == "closed" else self._cause

    def note_key(self, fingerprint: str | None, now: float) -> bool:
        """The deployment's key as calls use it now (a fingerprint, never the key). A breaker disabled
        by a 401 of another key closes: True when it did."""
        if fingerprint == self._key and self._refused_key is None:  # every call with the same key
            return False
        with self._lock:
            self._key = fingerprint
            if self._refused_key is None or self._refused_key == fingerprint or self._disabled_reason is None:
                return False
            self._disabled_reason = None
            self._refused_key = None
            self._trips_in_row = 0
            self._close(now, "the key changed since it was refused: back in rotation")
            return True

    def reset(self, now: float) -> None:
        """Close the breaker and forget its history (an operator fixed the config, or a reload)."""
        with self._lock:
            self._disabled_reason = None
            self._trips_in_row = 0
            self._close(now, "reset")

    # ------------------------------------------------------------------ reading

    @property
    def state(self) -> BreakerState:
        """The state as of the last call that passed a clock; `snapshot(now)` is exact."""
        return self._state

    def open_until(self, now: float) -> float | None:
        with self._lock:
            self._advance(now)
            return self._open_until if self._state == "open" else None

    def recent_ttft(self) -> list[float]:
        with self._lock:
            return sorted(self._ttft)

    def snapshot(self, now: float) -> BreakerSnapshot:
        with self._lock:
            self._advance(now)
            self._evict(now)
            n = len(self._window)
            ttft = sorted(self._ttft)
            latency = sorted(self._latency)
            return BreakerSnapshot(
                deployment_id=self.deployment_id,
                state=self._state,
                failure_rate=self._failures / n if n else 0.0,
                slow_rate=self._slow / n if n else 0.0,
                calls_in_window=n,
                failures_in_window=self._failures,
                slow_in_window=self._slow,
                consecutive_failures=self._consecutive_failures,
                open_until=self._open_until if self._state == "open" else None,
                trips=self._trips,
                reason=self._reason,
                changed_at=self._changed_at,
                last_error=self._last_error,
                last_error_at=self._last_error_at,
                disabled_reason=self._disabled_reason,
                probes_in_flight=len(self._probes) if self._state == "half_open" else 0,
                p50_ttft_s=percentile(ttft, 50),
                p95_ttft_s=percentile(ttft, 95),
                p50_latency_s=percentile(latency, 50),
                p95_latency_s=percentile(latency, 95),
            )

    # ------------------------------------------------------------------ internals (lock held)

    def _advance(self, now: float) -> None:
        if self._state == "open" and self._open_until is not None and now >= self._open_until:
            self._state = "half_open"
            self._epoch += 1
            self._probes.clear()
            self._probe_successes = 0
            self._reason = f"open period ended; probing with up to {self.policy.half_open_probes} calls"
            self._changed_at = now
        if self._probes:
            # A probe whose call never reported back (cancelled, abandoned, collected) frees its slot.
            horizon = now - self.policy.probe_lease
            for seq in [seq for seq, granted in self._probes.items() if granted <= horizon]:
                del self._probes[seq]

    def _end_probe(self, permit: Permit | None) -> bool:
        """Free the probe slot a call held; True when the call was a probe of the current episode."""
        if self._state != "half_open" or not self._probes:
            return False
        if permit is None:  # a caller that keeps no permit (`allow`): ends the oldest probe
            del self._probes[next(iter(self._probes))]
            return True
        if not (permit.probe and permit.epoch == self._epoch):
            return False  # admitted while closed, or in an earlier episode: its slot is long gone
        # A probe whose lease expired already gave its slot back: its late outcome still counts.
        self._probes.pop(permit.seq, None)
        return True

    def _evict(self, now: float) -> None:
        window = self._window
        if self.policy.window_kind == "time":
            horizon = now - self.policy.window_s
            while window and window[0][0] <= horizon:
                self._drop_oldest()
        else:
            while len(window) > self.policy.window_calls:
                self._drop_oldest()

    def _drop_oldest(self) -> None:
        _, failed, slow = self._window.popleft()
        self._failures -= failed
        self._slow -= slow

    def _add_to_window(self, now: float, failed: bool, slow: bool) -> None:
        self._window.append((now, failed, slow))
        self._failures += failed
        self._slow += slow
        self._evict(now)

    def _transition_on(self, now: float, failed: bool, was_probe: bool, retry_after: float | None,
                       rate_limited: bool = False) -> None:
        p = self.policy
        if rate_limited and retry_after is not None and self._state != "open":
            # The platform said exactly how long to wait: hold for that, not for a grown open period.
            if p.open_on_retry_after or was_probe or (self._state == "closed" and self._trip_reason()):
                self._hold(now, now + min(retry_after, p.open_max_s), f"rate limited: platform asked to wait "
                                                                       f"{retry_after:g}s")
            return
        if self._state == "closed":
            reason = self._trip_reason()
            if reason is not None:
                self._trip(now, reason, retry_after)
            elif retry_after is not None and p.open_on_retry_after:
                self._hold(now, now + min(retry_after, p.open_max_s), f"platform asked to wait {retry_after:g}s")
        elif self._state == "half_open":
            if was_probe and failed:
                self._trip(now, f"a half-open probe failed: {self._last_error}", retry_after)
            elif was_probe:
                self._probe_successes += 1
                if self._probe_successes >= p.successes_to_close:
                    self._close(now, f"{self._probe_successes} half-open probes succeeded")
            elif retry_after is not None and p.open_on_retry_after:
                self._hold(now, now + min(retry_after, p.open_max_s), f"platform asked to wait {retry_after:g}s")
        elif retry_after is not None:  # open: a late failure's Retry-After can only push the deadline out
            self._hold(now, now + min(retry_after, p.open_max_s), f"platform asked to wait {retry_after:g}s")

    def _trip_reason(self) -> str | None:
        p = self.policy
        if self._consecutive_failures >= p.consecutive_failures:
            return f"{self._consecutive_failures} consecutive failures (limit {p.consecutive_failures})"
        n = len(self._window)
        if n < p.effective_min_calls:
            return None
        if self._failures / n >= p.failure_rate:
            return f"failure rate {self._failures}/{n} >= {p.failure_rate:g} in the window"
        if self._slow / n >= p.slow_rate:
            return f"slow-call rate {self._slow}/{n} >= {p.slow_rate:g} (TTFT > {p.slow_ttft_s:g}s)"
        return None

    def _trip(self, now: float, reason: str, retry_after: float | None) -> None:
        p = self.policy
        if self._state == "closed" and self._closed_at is not None and now - self._closed_at >= p.trip_memory_s:
            self._trips_in_row = 0
        self._trips_in_row += 1
        self._trips += 1
        try:
            open_for = min(p.open_s * p.open_growth ** (self._trips_in_row - 1), p.open_max_s)
        except OverflowError:
            open_for = p.open_max_s
        if self._rng is not None and p.open_jitter:
            open_for *= 1.0 - p.open_jitter * self._rng.random()
        until = now + open_for
        if retry_after is not None:
            until = max(until, now + min(retry_after, p.open_max_s))
        self._state = "open"
        self._open_until = until
        self._reason = reason
        self._changed_at = now

    def _hold(self, now: float, until: float, reason: str) -> None:
        if self._state == "open":
            if self._open_until is None or until > self._open_until:
                self._open_until = until
                if self._disabled_reason is None:
                    self._reason = reason
            return
        if until <= now:
            return
        self._state = "open"
        self._open_until = until
        self._reason = reason
        self._changed_at = now

    def _close(self, now: float, reason: str) -> None:
        self._state = "closed"
        self._open_until = None
        self._reason = reason
        self._changed_at = now
        self._closed_at = now
        self._disabled_reason = None
        self._cause = None
        self._refused_key = None
        self._window.clear()
        self._failures = 0
        self._slow = 0
        self._consecutive_failures = 0
        self._probes.clear()
        self._probe_successes = 0

    def _disable(self, now: float, error: BaseException | None) -> None:
        what = describe_error(error) or "fatal error"
        hint = _FATAL_HINTS.get(type(error), "a configuration fault") if error is not None else "a configuration fault"
        open_s = self.policy.fatal_open_s
        if isinstance(error, E.AuthenticationError):
            self._refused_key = self._key
            bounds = [x for x in (open_s, self.policy.auth_recheck_s) if x is not None]
            open_s = min(bounds) if bounds else None
            hint += ("; back when the key changes" if open_s is None
                     else f"; back when the key changes, or tried again after {open_s:g}s")
        self._disabled_reason = f"DISABLED ({hint}): {what}"
        until = math.inf if open_s is None else now + open_s
        self._state = "open"
        self._open_until = until if self._open_until is None else max(until, self._open_until)
        self._reason = self._disabled_reason
        self._changed_at = now


_FATAL_HINTS: dict[type[BaseException], str] = {
    E.AuthenticationError: "the API key is missing, wrong or for another region",
    E.PermissionDeniedError: "the key may not use this model or region",
    E.BillingError: "the account is out of credit",
    E.NotFoundError: "the configured model id does not exist on this platform",
}


def detached(error: BaseException) -> BaseException:
    """A copy of `error` without its traceback, chained errors or attempts: what a breaker keeps of
    the error that opened it (holding the original would keep its frames alive)."""
    cls = type(error)
    try:
        copy = cls.__new__(cls)
        Exception.__init__(copy, *error.args)
        copy.__dict__.update({k: v for k, v in error.__dict__.items() if k != "attempts"})
    except Exception:  # noqa: BLE001 - an exotic exception type: keep the original
        return error
    if isinstance(copy, E.ProviderError):
        copy.attempts = []
    return copy


def _retry_after(error: BaseException | None) -> float | None:
    value = retry_after_of(error) if isinstance(error, E.ProviderError) else None
    return value if value else None  # a zero Retry-After asks for no pause
