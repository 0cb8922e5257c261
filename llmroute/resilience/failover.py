"""The failover planner: which deployment to send to next, when to wait, and when to give up.

The client's sync and async shells drive one `FailoverPlan` per call:

    plan = FailoverPlan(candidates, breakers=..., budgets=..., policies=..., deadline_at=now + deadline_s, now=now, rng=rng)
    while True:
        step = plan.next_step(clock())
        if isinstance(step, Wait):      sleep(step.seconds); continue
        if isinstance(step, Exhausted): raise step.error
        if isinstance(step, Done):      break
        # Send: call step.deployment_id with timeout <= step.timeout_s, then
        plan.record(step.deployment_id, clock(), error_or_None, ttft_s=..., latency_s=..., content_started=...)

What it encodes:
- Order: the weighted entries share the first choice by weight (sticky by a SHA-256 of the sticky
  value, never Python's randomized `hash`); the rest follow in list order; then the fallback tier's
  candidates, ordered the same way (`Send.is_fallback`, `plan.used_fallback_tier`).
- Every line of the route is the plan's: `plan.attempts` holds one `types.Attempt` per send (made
  with the `Send`, its `record`, which the call core completes and the caller sees on `route.attempts`)
  and per skip. An open breaker is skipped, and the skip is written there (status "skipped").
- A platform failure is retried on the same deployment up to `max_retries`, within the per-deployment
  retry budget, after the *current* error's Retry-After (capped) or a full-jitter backoff; a wait
  that would not fit the deadline moves on instead.
- A caller error (bad request, content filter) stops the call: `Exhausted.error` is that error.
- A ContextLengthError moves only to a candidate whose known context window fits the request (and is
  larger than the one that refused it), or ends with a ContextLengthError saying so.
- A fatal error (auth, billing, unknown model) disables the deployment and moves on.
- Held deployments: when nothing could be sent because every candidate's breaker holds it, and the
  earliest hold ends within `wait_for_recovery_s` (and the deadline), the plan waits it out and probes
  (once per candidate). Otherwise, when every hold has one cause class (429s, a refused key, an
  unknown model), the plan ends with a copy of that error (`held = True`, `retry_after` = the time
  left); mixed causes end with AllDeploymentsFailedError, whose `causes` lists each.
- A failure after content started (`content_started=True`) is never retried on the same deployment
  from scratch (only continued there, below), but for a plain call's, whose caller saw nothing. Without `recover` the plan ends with
  `StreamInterruptedError` carrying the partial text and the attempts. With `recover="continue"` (streams) the call moves on only to deployments that can
  continue a partial answer (`can_continue`), sent as `Send.is_continuation`; when none is left it
  ends with that StreamInterruptedError. With either stream mode the other continuers go first,
  then the cut deployment itself (a continuation counted as a retry, within `max_retries` and the
  retry budget, after a cut that was not a timeout); with `recover="continue_or_replay"` the candidates
  `can_replay` admits start the answer again as a replay (`Send.is_replay`: the shell holds the
  replay back until it has repeated the text the caller saw). A replay that diverges, or fails
  before it has caught up, moves on to the next replay; when none is left, the cut is the error.
  With `recover="continue_or_restart"` (plain calls) continuing deployments are tried first, then
  the next deployment starts the answer again
  (`Send.is_restart`), and last the cut deployment itself (continuing it if it can, else starting it
  again: a retry, on the same terms as a stream's). A continuation refused as a bad request (the platform does not take a
  prefill) moves on: the real failure is the cut, not the refusal; a plain call's answer then starts
  again from scratch on that same deployment (the caller has seen nothing), a stream's moves on.
- Client-side limits (bulkhead, rpm, tpm per pool) either admit, ask to wait within
  `queue_timeout_s`, or move on.

No I/O, no clock, no sleeping: every method takes `now`; randomness comes from the `rng` passed in.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import AbstractSet, Any, Callable, Literal, Mapping, Sequence, Union

from llmroute import errors as E
from llmroute.accounting.frozen import Fill
from llmroute.resilience.breaker import Permit, detached
from llmroute.resilience.balance import SLOW_START_POLL_S, BalanceChoice, LoadBalancer
from llmroute.resilience.deployment_health import BreakerRegistry
from llmroute.resilience.limits import Lease, Limits, fits
from llmroute.resilience.outcome import classify_failure, describe_error
from llmroute.resilience.policy import ResiliencePolicy
from llmroute.resilience.retry import BudgetRegistry, decide_retry, dropped_before_reply
from llmroute.types import Attempt

__all__ = [
    "Candidate",
    "Send",
    "Wait",
    "Exhausted",
    "Done",
    "Step",
    "PlannedAttempt",
    "FailoverPlan",
    "order_candidates",
    "order_tier",
    "sticky_point",
]


@dataclass(frozen=True)
class Candidate:
    deployment_id: str
    tier: str
    weight: float | None = None
    context_window: int | None = None
    provider: str | None = None  # for the route's lines; None: the part of `deployment_id` before ":"
    model: str | None = None  # None: the part of `deployment_id` after ":"


@dataclass(frozen=True)
class Send:
    """Send the request to `deployment_id` now, with a timeout of at most `timeout_s`."""

    deployment_id: str
    tier: str
    attempt_index: int  # 0-based over the whole call
    number: int  # 1 for the first try at this deployment, 2 for its first retry...
    is_retry: bool
    is_fallback: bool
    is_hedge: bool
    timeout_s: float  # time left before the call's deadline
    is_continuation: bool = False  # continue the partial answer of an attempt that was cut
    is_restart: bool = False  # start the answer again after a cut no deployment could continue
    is_replay: bool = False  # start a cut stream again, delivered only past the text the caller saw
    # The attempt's line in `plan.attempts` (the route's), made by the plan; ended by `record`/`cancel`.
    record: Attempt | None = field(default=None, compare=False, repr=False)


_FILL_SEND = Fill(Send)


@dataclass(frozen=True)
class Wait:
    """Sleep `seconds`, then ask `next_step` again."""

    seconds: float
    deployment_id: str
    reason: str  # "retry_after", "backoff" or "limit: ..."


@dataclass(frozen=True)
class Exhausted:
    """Give up: raise `error`."""

    reason: Literal["all_failed", "caller_error", "context_length", "stream_interrupted", "deadline", "held"]
    error: BaseException


@dataclass(frozen=True)
class Done:
    deployment_id: str


Step = Union[Send, Wait, Exhausted, Done]

AttemptStatus = Literal["ok", "error", "skipped", "cancelled", "interrupted"]

# One line of the route, an attempt (sent) or a skip: the plan writes `types.Attempt` itself (the
# record the caller sees on `route.attempts`). The old name stays for imports.
PlannedAttempt = Attempt


@dataclass(frozen=True)
class _Held:
    """A candidate skipped because its breaker was open, and when the hold ends (None: disabled)."""

    candidate: Candidate
    is_fallback: bool
    until: float | None


# Recovery modes that continue a cut answer on a deployment that can; the stream ones never restart it.
_CONTINUING = ("continue", "continue_or_replay", "continue_or_restart")
_STREAM_RECOVERY = ("continue", "continue_or_replay")


def sticky_point(sticky_value: str, salt: str = "") -> float:
    """A stable point in [0, 1) for a sticky value: the same on every run and every process."""
    digest = hashlib.sha256(f"{salt}\x00{sticky_value}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def order_candidates(
    candidates: Sequence[Candidate], *, rng: random.Random, sticky_value: str | None = None
) -> list[Candidate]:
    """Weighted entries share the first place by weight; everything else follows in list order."""
    weighted = [c for c in candidates if c.weight is not None and c.weight > 0]
    if not weighted:
        return list(candidates)
    total = sum(c.weight or 0.0 for c in weighted)  # (all set and > 0 here)
    if sticky_value is not None:
        point = sticky_point(sticky_value, salt=weighted[0].tier) * total
    else:
        point = rng.random() * total
    first = weighted[-1]
    acc = 0.0
    for c in weighted:
        acc += c.weight or 0.0
        if point < acc:
            first = c
            break
    return [first] + [c for c in candidates if c is not first]


def _sticky_index(candidates: Sequence[Candidate], sticky_value: str) -> int:
    """The candidate a sticky value hashes to: by weight among the weighted ones, else among all."""
    weighted = [i for i, c in enumerate(candidates) if c.weight is not None and c.weight > 0]
    pool = weighted or list(range(len(candidates)))
    weights = [candidates[i].weight or 1.0 for i in pool]
    point = sticky_point(sticky_value, salt=candidates[pool[0]].tier) * sum(weights)
    acc = 0.0
    for i, w in zip(pool, weights):
        acc += w
        if point < acc:
            return i
    return pool[-1]


def order_tier(
    candidates: Sequence[Candidate],
    *,
    mode: str,
    rng: random.Random,
    now: float,
    sticky_value: str | None = None,
    balancer: LoadBalancer | None = None,
) -> tuple[list[Candidate], BalanceChoice | None]:
    """A tier's candidates in the order the plan tries them, by the tier's `balance` mode:
    "load" (the weighted entries, or all when none has a weight, by lowest expected delay first,
    `balance.LoadBalancer.rank`; unweighted entries of a weighted tier follow in list order, as
    backups), "weighted" (weights share the first place, then list order: `order_candidates`) or
    "order" (list order)."""
    if mode == "order":
        return list(candidates), None
    if mode == "load" and balancer is not None and len(candidates) > 1:
        pool = [c for c in candidates if c.weight is not None and c.weight > 0] or list(candidates)
        sticky = _sticky_index(pool, sticky_value) if sticky_value is not None else None
        ranked, choice = balancer.rank(pool, [c.deployment_id for c in pool], now, rng=rng, sticky=sticky)
        if len(pool) < len(candidates):
            ranked += [c for c in candidates if c not in pool]
        return ranked, choice
    return order_candidates(candidates, rng=rng, sticky_value=sticky_value), None


@dataclass
class _InFlight:
    candidate: Candidate
    is_fallback: bool
    is_retry: bool
    is_hedge: bool
    number: int
    started_at: float
    permit: Permit | None
    lease: Lease | None
    record: Attempt  # its line in `attempts`
    is_continuation: bool = False
    is_replay: bool = False
    met: int = 0  # the in-flight count it met at the deployment (the balancer's, itself included)


@dataclass
class _Pending:
    """A retry scheduled, or a candidate queued behind a client-side limit."""

    candidate: Candidate
    is_fallback: bool
    is_retry: bool
    ready_at: float
    reason: str
    queued_since: float | None = None
    free: bool = False  # a resend after a dropped keep-alive connection: not counted in max_retries
    # What the send was for, kept across the wait: a continuation or a replay retried (or queued
    # behind a limit) is still one; sent plain, a stream would deliver its answer from the start.
    continuation: bool = False
    restart: bool = False
    replay: bool = False


@dataclass
class _ContextState:
    error: E.ContextLengthError | None = None
    refused_window: int | None = None  # the largest known window that refused the request
    skipped: list[str] = field(default_factory=list)
    fitting_tried: bool = False  # a candidate was sent after the context-length error


_NO_CONTEXT = _ContextState()  # no context-length error or skip yet: read, never written


class FailoverPlan:
    """Plans one call's attempts over a tier's candidates and an optional fallback tier."""

    # State that starts empty and changes only on the less common paths (retries, queues, cuts):
    # class-level starting values, set on the plan when they change (a plan is made per call).
    _choice_changed = False  # slow start sent the call elsewhere: `new_choice` hands it over
    # Slow start (balance.py): a first attempt that finds every deployment of the load-balanced
    # pool at its window waits for an answer, up to `slow_start_wait_s` after the call started.
    _slow_start: tuple[list[str], float] | None = None
    _ticket: int | None = None
    _queued_since: float | None = None
    queued_s = 0.0  # time spent in the client-side queue
    _pos = 0
    _sent = 0
    _pending: _Pending | None = None
    _terminal: Union[Exhausted, Done] | None = None
    used_fallback_tier: str | None = None
    # Recovery after a cut: None, "continue", "continue_or_replay", "continue_or_restart", "restart",
    # or "restarted" (done).
    _recover: str | None = None
    _cut: tuple[_InFlight, BaseException, str] | None = None
    _again: tuple[Candidate, bool] | None = None  # the cut deployment, to continue there once
    _replay: str | None = None  # after a cut: which candidates may replay it ("family", "any")
    # Collections that stay empty on the common path: immutable empties here, replaced by a
    # collection of the plan's own when something is added (never changed in place).
    _warming: Sequence[Candidate] = ()  # candidates found at their window in this pass
    _held_ids: AbstractSet[str] = frozenset()  # every deployment slow start held this call back from
    _full: Sequence[Candidate] = ()  # candidates found full in this pass over the queue
    _retries: Mapping[str, int] = MappingProxyType({})  # retries sent, per deployment
    _no_continue: AbstractSet[str] = frozenset()
    _resent_after_drop: AbstractSet[str] = frozenset()
    _held: Sequence[_Held] = ()  # candidates skipped for an open breaker, for a short wait
    _waited: AbstractSet[str] = frozenset()  # candidates whose hold this call already waited out
    _context: _ContextState = _NO_CONTEXT  # the context-length state, the plan's own once written (`_own_context`)

    def __init__(
        self,
        candidates: Sequence[Candidate],
        *,
        breakers: BreakerRegistry,
        budgets: BudgetRegistry,
        policies: Callable[[str], ResiliencePolicy],
        deadline_at: float,
        now: float,
        rng: random.Random,
        sticky_value: str | None = None,
        required_context_tokens: int | None = None,
        fallback: Sequence[Candidate] = (),
        fallback_tier: str | None = None,
        limits: Limits | None = None,
        pool: str = "interactive",
        request_tokens: int = 0,
        can_continue: Callable[[str], bool] | None = None,
        can_replay: Callable[[str, str], bool] | None = None,
        balancer: LoadBalancer | None = None,
        ordered: bool = False,
        choice: BalanceChoice | None = None,
        queue_when_full: bool = False,
        wall: Callable[[], float] | None = None,
    ) -> None:
        if not candidates and not fallback:
            raise ValueError("a plan needs at least one candidate")
        self.tier = candidates[0].tier if candidates else (fallback_tier or fallback[0].tier)
        self.fallback_tier = fallback_tier or (fallback[0].tier if fallback else None)
        self.deadline_at = deadline_at
        self.started_at = now
        self.required_context_tokens = required_context_tokens
        self.pool = pool
        self.request_tokens = request_tokens
        # The route's lines, in the order they happened; `number` is the place in this list (1-based).
        self.attempts: list[Attempt] = []
        self._wall = wall  # stamps the lines' `started_at` (wall-clock seconds); None: the `now` passed in
        self._breakers = breakers
        self._budgets = budgets
        self._policies = policies
        self._limits = limits
        self._rng = rng
        self._balancer = balancer  # told of every attempt's start and end (its load estimates)
        self.balance_choice = choice  # why the first candidate is first, when load chose it
        # A tier balanced by load: when every deployment is at its `max_concurrency`, the call waits
        # in the balancer's fair queue (up to `queue_timeout_s`) instead of failing or picking one to wait on.
        self._queue_when_full = queue_when_full and limits is not None and balancer is not None
        if queue_when_full and balancer is not None and len(candidates) > 1:
            pool_ids = [c.deployment_id for c in candidates if c.weight is not None and c.weight > 0] or [
                c.deployment_id for c in candidates]
            wait_s = policies(pool_ids[0]).slow_start_wait_s if len(pool_ids) > 1 else 0.0
            if wait_s > 0:
                self._slow_start = (pool_ids, min(deadline_at, now + wait_s))
        if not ordered:  # `ordered`: the candidates come in the order to try (`order_tier`)
            candidates = order_candidates(candidates, rng=rng, sticky_value=sticky_value)
            fallback = order_candidates(fallback, rng=rng, sticky_value=sticky_value)
        self._queue: list[tuple[Candidate, bool]] = [(c, False) for c in candidates] + [(c, True) for c in fallback]
        self._in_flight: dict[str, _InFlight] = {}
        self._can_continue = can_continue or (lambda deployment_id: False)
        # (candidate, cut deployment) -> may the candidate replay the cut stream? (same model family)
        self._can_replay = can_replay or (lambda deployment_id, cut: True)

    # ------------------------------------------------------------------ public

    @property
    def outstanding(self) -> tuple[str, ...]:
        """Deployments with a Send not yet recorded or cancelled."""
        return tuple(self._in_flight)

    @property
    def finished(self) -> bool:
        return self._terminal is not None

    def next_step(self, now: float) -> Step:
        """What to do next. Call it after each `record` (or `Wait`) until it returns Exhausted or Done."""
        if self._terminal is not None:
            return self._terminal
        if now >= self.deadline_at:
            return self._finish_exhausted("deadline", now)
        pending, self._pending = self._pending, None
        if pending is not None:
            if now < pending.ready_at - 1e-9:
                self._pending = pending
                return Wait(pending.ready_at - now, pending.candidate.deployment_id, pending.reason)
            step = self._admit(pending.candidate, pending.is_fallback, now, is_retry=pending.is_retry,
                               queued_since=pending.queued_since, free=pending.free,
                               continuation=pending.continuation and self._continues(pending.candidate),
                               restart=pending.restart, replay=pending.replay)
            if isinstance(step, Send) and step.is_restart:
                self._recover = "restarted"
            if step is not None:
                return step
        while self._pos < len(self._queue) or self._again is not None:
            if self._again is not None and (self._pos >= len(self._queue) or (
                    self._recover in _STREAM_RECOVERY and not self._continues(self._queue[self._pos][0]))):
                # No other deployment continues it first (a stream), or none is left (a plain call, which
                # every backup may answer again): the cut deployment itself, as a retry.
                again, again_fallback = self._again
                self._again = None
                if self._recover in _CONTINUING and self._continues(again):
                    step = self._admit(again, again_fallback, now, is_retry=True, queued_since=None,
                                       continuation=True)
                elif self._recover not in _STREAM_RECOVERY:  # a plain call: answered again there from scratch
                    step = self._admit(again, again_fallback, now, is_retry=True, queued_since=None, restart=True)
                    if isinstance(step, Send) and step.is_restart:
                        self._recover = "restarted"
                else:
                    step = None
                if step is not None:
                    return step
                continue
            candidate, is_fallback = self._queue[self._pos]
            self._pos += 1
            if candidate.deployment_id in self._in_flight:
                continue  # a hedge already holds it
            continuing = self._recover in _CONTINUING and self._continues(candidate)
            replaying = (not continuing and self._recover == "continue_or_replay" and self._cut is not None
                         and self._replay is not None
                         and (self._replay == "any"
                              or self._can_replay(candidate.deployment_id, self._cut[0].candidate.deployment_id)))
            if self._recover in _STREAM_RECOVERY and not continuing and not replaying:
                self._skip(candidate, now, "skipped: cannot continue a partial answer"
                           + (" nor repeat it" if self._replay is not None else ""))
                continue
            step = self._admit(candidate, is_fallback, now, is_retry=False, queued_since=None,
                               continuation=continuing, replay=replaying,
                               restart=self._recover in ("continue_or_restart", "restart") and not continuing)
            if step is not None:
                if isinstance(step, Send) and step.is_restart:
                    self._recover = "restarted"
                return step
        if self._warming and not self._in_flight:
            return self._wait_for_window(now)
        if self._full and not self._in_flight:
            return self._wait_in_queue(now)
        if self._in_flight:
            # Nothing left to start, but an attempt (a hedge) is still running: wait for its outcome.
            return Wait(max(0.0, min(self.deadline_at - now, self._policy(next(iter(self._in_flight))).queue_poll_s)),
                        next(iter(self._in_flight)), "waiting for an outstanding attempt")
        wait = self._wait_out_hold(now)
        if wait is not None:
            return wait
        return self._finish_exhausted("all_failed", now)

    def _wait_out_hold(self, now: float) -> Wait | None:
        """Nothing could be sent and a candidate's hold ends soon (within its `wait_for_recovery_s`
        and the deadline): wait for it, then try it (a probe), once per candidate per call."""
        if any(a.status != "skipped" for a in self.attempts):
            return None  # something was sent: its error says more than waiting would
        soonest: _Held | None = None
        for held in self._held:
            dep = held.candidate.deployment_id
            if held.until is None or dep in self._waited:
                continue
            if held.until - now > self._policy(dep).wait_for_recovery_s or held.until >= self.deadline_at:
                continue
            if soonest is None or held.until < soonest.until:  # type: ignore[operator]
                soonest = held
        if soonest is None or soonest.until is None:
            return None
        dep = soonest.candidate.deployment_id
        self._waited = {*self._waited, dep}
        self._pending = _Pending(soonest.candidate, soonest.is_fallback, False, soonest.until,
                                 "waiting out a short hold")
        return Wait(max(0.0, soonest.until - now), dep, "waiting out a short hold")

    def hedge_step(self, now: float) -> Send | None:
        """A Send for the next untried candidate, to race the attempt in flight; None if none can start now."""
        if self._terminal is not None or now >= self.deadline_at:
            return None
        while self._pos < len(self._queue):
            candidate, is_fallback = self._queue[self._pos]
            if candidate.deployment_id in self._in_flight or not self._fits_context(candidate, note=True, now=now):
                self._pos += 1
                continue
            if not self._breakers.breaker(candidate.deployment_id).peek(now):
                self._pos += 1
                self._skip_held(candidate, is_fallback, now)
                continue
            saved = self._pending
            step = self._admit(candidate, is_fallback, now, is_retry=False, queued_since=None, hedge=True)
            if isinstance(step, Send):
                self._pos += 1
                return step
            if isinstance(step, Wait):  # a hedge never queues behind a limit; try again at the next check
                self._pending = saved
                return None
            self._pos += 1
        return None

    def record(
        self,
        deployment_id: str,
        now: float,
        error: BaseException | None,
        *,
        ttft_s: float | None = None,
        latency_s: float | None = None,
        content_started: bool = False,
        partial_text: str = "",
        recover: str | None = None,
        replay: str | None = None,
        unsent: bool = False,
    ) -> None:
        """Record how the attempt at `deployment_id` ended (`error=None`: success): its line in
        `attempts` gets the status, error, duration, first-token time and what the plan decided next
        (`decision`); `unsent=True` (the request could not even be built) takes the line out again.

        `content_started=True` says content had started: a failure then ends the plan with
        StreamInterruptedError (nothing is replayed), unless `recover` ("continue" or
        "continue_or_restart", "restart") asks to finish the answer elsewhere; `partial_text` is the
        answer so far. With "continue_or_replay", `replay` says which candidates may replay it:
        "family" (those `can_replay` admits), "any", or None (none).
        """
        flight = self._in_flight.pop(deployment_id, None)
        if flight is None:
            raise ValueError(f"no attempt outstanding for {deployment_id!r}")
        if self._limits is not None:
            self._limits.release(flight.lease)
        if latency_s is None:
            latency_s = max(0.0, now - flight.started_at)
        if error is not None and (dropped_before_reply(error) or isinstance(error, E.ReplayDivergedError)):
            self._breakers.breaker(deployment_id).release(flight.permit)  # not the platform's health
        else:
            self._breakers.record(deployment_id, now, error, ttft_s=ttft_s, latency_s=latency_s, permit=flight.permit)
        outcome = classify_failure(error)
        if self._balancer is not None:
            if error is not None and (outcome == "caller" or dropped_before_reply(error) or content_started):
                self._balancer.abandoned(deployment_id)  # says nothing of its load
            else:
                self._balancer.finished(deployment_id, now, latency_s=now - flight.started_at, met=flight.met,
                                        ok=error is None)
        note: str | None = None
        status: AttemptStatus = "ok" if error is None else ("interrupted" if content_started else "error")
        rec = flight.record
        rec._set(status=status, duration_s=max(0.0, now - flight.started_at), ttft_s=ttft_s)
        if error is not None:
            rec.error = error

        if error is None:
            self._terminal = Done(deployment_id)
        elif content_started and recover is None:
            self._terminal = Exhausted("stream_interrupted", self._interrupted(flight, error, partial_text))
        elif content_started:
            self._cut = (flight, error, partial_text)
            if self._recover != "restarted":
                self._recover = recover
                self._replay = replay
                self._put_continuers_first()
                # One broken connection, not a broken server: the cut deployment itself may take the
                # answer up again as a retry (a stream only by continuing it; a plain call, whose
                # caller saw nothing, by continuing it or answering again from scratch).
                if ((recover not in _STREAM_RECOVERY or self._continues(flight.candidate))
                        and not isinstance(error, E.APITimeoutError)
                        and self._retries.get(deployment_id, 0) < self._policy(deployment_id).max_retries):
                    self._again = (flight.candidate, flight.is_fallback)
            note = "answer cut after content started: finishing it on another deployment"
        elif flight.is_replay:
            # A replay that diverged from the text the caller saw, or failed before catching up: the
            # next replay (or the cut) decides. Not the platform's health when it merely diverged.
            note = "replay did not finish: " + (describe_error(error) or "failed")
        elif flight.is_continuation and outcome == "caller":
            # The platform does not take a prefill: not the caller's fault, not the real failure.
            self._no_continue = {*self._no_continue, deployment_id}
            note = "cannot continue a partial answer: " + (describe_error(error) or "refused")
            if self._recover == "continue_or_restart":  # a plain call: the caller saw nothing, start again there
                self._queue.insert(self._pos, (flight.candidate, flight.is_fallback))
                note += "; restarting the answer there"
            elif self._recover == "continue_or_replay" and self._replay is not None:
                self._queue.insert(self._pos, (flight.candidate, flight.is_fallback))  # it may still replay it
        elif isinstance(error, E.ContextLengthError):
            note = "context window too small: trying a larger one"
            self._own_context().error = error
            window = flight.candidate.context_window
            if window is not None:
                self._own_context().refused_window = max(window, self._context.refused_window or 0)
        elif outcome == "caller":
            self._terminal = Exhausted("caller_error", error)
        elif outcome == "fatal":
            note = "deployment disabled: " + (describe_error(error) or "fatal error")
        elif dropped_before_reply(error) and deployment_id not in self._resent_after_drop and self._pending is None:
            # One immediate resend on a new connection, visible in the route and the ledger.
            self._resent_after_drop = {*self._resent_after_drop, deployment_id}
            self._pending = _Pending(flight.candidate, flight.is_fallback, True, now, "dropped keep-alive", free=True,
                                     continuation=flight.is_continuation, replay=flight.is_replay)
            note = "connection dropped before a reply: resending once on a new connection"
        else:
            policy = self._policy(deployment_id)
            breaker = self._breakers.breaker(deployment_id)
            decision = decide_retry(
                policy,
                error,
                retries_done=self._retries.get(deployment_id, 0),
                now=now,
                deadline_at=self.deadline_at,
                rng=self._rng,
                budget_ok=self._budgets.retry(deployment_id).allowed(now),
                breaker_open_until=breaker.open_until(now),
                has_backup=self._has_backup(deployment_id, now),
            )
            if decision.retry and not flight.is_hedge and self._pending is None:
                self._pending = _Pending(flight.candidate, flight.is_fallback, True, now + decision.wait_s, decision.reason,
                                         continuation=flight.is_continuation, replay=flight.is_replay)
                note = f"retrying after {decision.wait_s:.2f}s ({decision.reason})"
            else:
                note = f"moving on: {decision.reason}" if not decision.retry else "moving on"
        if note is not None:
            rec.decision = note
        if unsent:
            self.attempts.remove(rec)

    def cancel(self, deployment_id: str, now: float, *, note: str = "cancelled: another attempt won") -> None:
        """The shell cancelled this attempt (a hedge lost the race): free its slots, count no outcome."""
        flight = self._in_flight.pop(deployment_id, None)
        if flight is None:
            return
        self._breakers.breaker(deployment_id).release(flight.permit)
        if self._limits is not None:
            self._limits.release(flight.lease)
        if self._balancer is not None:
            self._balancer.abandoned(deployment_id)
        rec = flight.record
        rec.status = "cancelled"
        rec.duration_s = max(0.0, now - flight.started_at)
        rec.decision = note

    def new_choice(self) -> BalanceChoice | None:
        """The balance choice, once, when slow start changed it since the plan was made (the route's text)."""
        if not self._choice_changed:
            return None
        self._choice_changed = False
        return self.balance_choice

    # ------------------------------------------------------------------ internals

    def _has_backup(self, deployment_id: str, now: float) -> bool:
        """Is there an untried candidate, other than `deployment_id`, whose breaker admits calls now?"""
        for candidate, _ in self._queue[self._pos:]:
            dep = candidate.deployment_id
            if dep != deployment_id and dep not in self._in_flight and self._breakers.breaker(dep).peek(now):
                return True
        return False

    def _policy(self, deployment_id: str) -> ResiliencePolicy:
        return self._policies(deployment_id)

    def _continues(self, candidate: Candidate) -> bool:
        dep = candidate.deployment_id
        return dep not in self._no_continue and self._can_continue(dep)

    def _own_context(self) -> _ContextState:
        """The plan's own context-length state, to write to (the shared empty one is never written)."""
        if self._context is _NO_CONTEXT:
            self._context = _ContextState()
        return self._context

    def _put_continuers_first(self) -> None:
        """After a cut, the untried deployments that can continue the answer go first (stable)."""
        rest = self._queue[self._pos:]
        self._queue[self._pos:] = [x for x in rest if self._continues(x[0])] + [
            x for x in rest if not self._continues(x[0])]

    def _admit(
        self,
        candidate: Candidate,
        is_fallback: bool,
        now: float,
        *,
        is_retry: bool,
        queued_since: float | None,
        hedge: bool = False,
        continuation: bool = False,
        restart: bool = False,
        replay: bool = False,
        free: bool = False,
    ) -> Union[Send, Wait] | None:
        """Send to `candidate` if everything admits it, Wait if a limit asks to, None (skipped) otherwise."""
        dep = candidate.deployment_id
        if not is_retry and not self._fits_context(candidate, note=True, now=now):
            return None
        breaker = self._breakers.breaker(dep)
        if not breaker.peek(now):
            self._skip_held(candidate, is_fallback, now)
            return None
        if is_retry and not free and not self._budgets.retry(dep).allowed(now):
            self._skip(candidate, now, "retry not sent: retry budget exhausted")
            return None
        if self._slow_start is not None and not (is_fallback or hedge or is_retry) and self._held_by_window(dep, now):
            self._warming = [*self._warming, candidate]
            return None
        lease: Lease | None = None
        queues = self._queue_when_full and not (is_fallback or hedge or is_retry)
        if queues and self._queued_behind(now):
            self._full = [*self._full, candidate]  # calls queued before this one go first
            return None
        if self._limits is not None:
            admission = self._limits.try_acquire(now, dep, pool=self.pool, tokens=self.request_tokens)
            if not admission.granted and queues and admission.reason.startswith("concurrency"):
                self._full = [*self._full, candidate]
                return None
            if not admission.granted:
                since = now if queued_since is None else queued_since
                queue_timeout_s = self._limits.policy(self.pool, dep).queue_timeout_s
                if fits(admission.wait_s, now=now, queued_since=since,
                        queue_timeout_s=queue_timeout_s, deadline_at=self.deadline_at):
                    self._pending = _Pending(candidate, is_fallback, is_retry, now + admission.wait_s,
                                             "limit: " + admission.reason, queued_since=since, free=free,
                                             continuation=continuation, restart=restart, replay=replay)
                    return Wait(admission.wait_s, dep, "limit: " + admission.reason)
                self._skip(candidate, now, f"client-side {admission.reason} (pool {self.pool})")
                return None
            lease = admission.lease
        permit = breaker.acquire(now)
        if permit is None:  # raced with another call for the last probe slot
            if self._limits is not None:
                self._limits.release(lease)
            self._skip_held(candidate, is_fallback, now)
            return None
        if self._context.error is not None:
            self._context.fitting_tried = True
        budget = self._budgets.retry(dep)
        if is_retry and not free:
            budget.try_spend(now)
            self._retries = {**self._retries, dep: self._retries.get(dep, 0) + 1}
        elif not is_retry:
            budget.note_request(now)
        number = 1 + self._retries.get(dep, 0) + (dep in self._resent_after_drop) if is_retry else 1
        if self._queued_since is not None and not hedge:
            self.queued_s += now - self._queued_since
            self._queued_since = None
            self._leave_queue()
        if self._slow_start is not None or self._held_ids:  # only a call's first send waits for a window
            self._slow_start = None
            choice = self.balance_choice
            if choice is not None and choice.deployment_id != dep:
                ranked = [e[0] for e in choice.estimates]
                before = ranked[:ranked.index(dep)] if dep in ranked else ranked
                held = tuple(d for d in before if d in self._held_ids)
                if held:
                    self.balance_choice = replace(choice, deployment_id=dep, held=held)
                    self._choice_changed = True
            self._held_ids = frozenset()
            self._queue.extend((c, False) for c in self._warming)  # still backups for failover
            self._warming = ()
        met = self._balancer.started(dep, now) if self._balancer is not None else 0
        note = recovery = None  # a first send: the line's note and recovery stay unset
        if is_retry or is_fallback or hedge or continuation or restart or replay:
            note = ", ".join(n for n, on in (("retry", is_retry), ("fallback tier", is_fallback), ("hedge", hedge),
                                             ("continuation", continuation), ("restart", restart), ("replay", replay))
                             if on)
            recovery = "continued" if continuation else "replayed" if replay else "restarted" if restart else None
        record = self._line(candidate, now, candidate.tier or None, note=note, recovery=recovery)
        self._in_flight[dep] = _InFlight(candidate, is_fallback, is_retry, hedge, number, now, permit, lease, record,
                                         continuation, replay, met)
        if is_fallback and self.used_fallback_tier is None:
            self.used_fallback_tier = candidate.tier
        send = _FILL_SEND.make({  # one per attempt: made in one step (frozen.Fill), as Send(...) would
            "deployment_id": dep, "tier": candidate.tier, "attempt_index": self._sent, "number": number,
            "is_retry": is_retry, "is_fallback": is_fallback, "is_hedge": hedge, "timeout_s": self.deadline_at - now,
            "is_continuation": continuation, "is_restart": restart, "is_replay": replay, "record": record})
        self._sent += 1
        return send

    def _queued_behind(self, now: float) -> bool:
        """Are there calls queued ahead of this one, at least as many as free slots? (FIFO fairness)"""
        assert self._balancer is not None and self._limits is not None
        ahead = self._balancer.ahead(self.tier, self._ticket, now)
        if not ahead:
            return False
        free = 0
        for candidate, is_fallback in self._queue:
            if not is_fallback:
                limit = self._limits.policy(self.pool, candidate.deployment_id).max_concurrency
                if limit is None:
                    return False  # a deployment without a concurrency limit is never full
                free += max(0, limit - self._balancer.in_flight(candidate.deployment_id))
        return ahead >= free

    def _held_by_window(self, dep: str, now: float) -> bool:
        """Slow start: does a first attempt at `dep` wait for a window to open? (balance.py)"""
        assert self._slow_start is not None and self._balancer is not None
        pool, until = self._slow_start
        if now >= until:
            self._slow_start = None  # waited long enough: the order by expected delay decides alone
            self._leave_queue()
            self._queue.extend((c, False) for c in self._warming)
            self._warming = ()
            return False
        if dep not in pool:
            return bool(self._warming)  # a backup of the pool does not take the calls the pool holds back
        if self._balancer.holds(dep, pool, self.tier, self._ticket, now):
            self._held_ids = {*self._held_ids, dep}
            return True
        return False

    def _wait_for_window(self, now: float) -> Wait:
        """Every deployment of the pool is at its slow-start window: wait in the tier's queue for an
        answer to open one (then try them again, by expected delay), up to `slow_start_wait_s`."""
        assert self._balancer is not None
        waiting = [*self._warming, *(c for c in self._full if c not in self._warming)]
        self._warming, self._full = (), ()
        until = self._slow_start[1] if self._slow_start is not None else now
        if self._ticket is None:
            self._ticket = self._balancer.enqueue(self.tier, until + SLOW_START_POLL_S)
        if self._queued_since is None:
            self._queued_since = now
        ranked, choice = self._balancer.rank(waiting, [c.deployment_id for c in waiting], now, rng=self._rng)
        if choice is not None:
            self.balance_choice, self._choice_changed = choice, True
        self._queue.extend((c, False) for c in ranked)
        return Wait(max(0.0, min(SLOW_START_POLL_S, until - now)), ranked[0].deployment_id,
                    "slow start: every deployment is at its window")

    def _leave_queue(self) -> None:
        if self._ticket is not None and self._balancer is not None:
            self._balancer.dequeue(self.tier, self._ticket)
            self._ticket = None

    def _wait_in_queue(self, now: float) -> Union[Wait, Exhausted]:
        """Every deployment was full: wait in the queue and try them again, or give up past the timeout."""
        assert self._balancer is not None and self._limits is not None
        full, self._full = list(self._full), ()
        policy = self._limits.policy(self.pool, full[0].deployment_id)
        since = now if self._queued_since is None else self._queued_since
        if fits(policy.queue_poll_s, now=now, queued_since=since, queue_timeout_s=policy.queue_timeout_s,
                deadline_at=self.deadline_at):
            if self._ticket is None:
                self._ticket = self._balancer.enqueue(self.tier, since + policy.queue_timeout_s + policy.queue_poll_s)
            self._queued_since = since
            full, _ = self._balancer.rank(full, [c.deployment_id for c in full], now, rng=self._rng)
            self._queue.extend((c, False) for c in full)
            return Wait(policy.queue_poll_s, full[0].deployment_id, "queue: every deployment is full")
        self._leave_queue()
        self.queued_s += now - since
        self._queued_since = None
        for c in full:
            limit = self._limits.policy(self.pool, c.deployment_id).max_concurrency
            self._skip(c, now, f"client-side concurrency limit {limit} reached (pool {self.pool}); "
                                 f"queued {self.queued_s:.2f}s")
        self._pending = None
        exc = E.QueueTimeoutError(
            f"every deployment of tier {self.tier!r} stayed full (client-side max_concurrency, pool {self.pool}) "
            f"for the {self.queued_s:.2f}s the call waited in the queue",
            attempts=list(self.attempts), tier=self.tier, queued_s=self.queued_s)
        self._terminal = Exhausted("all_failed", exc)
        return self._terminal

    def _fits_context(self, candidate: Candidate, *, note: bool, now: float) -> bool:
        window = candidate.context_window
        required = self.required_context_tokens
        reason: str | None = None
        if self._context.error is None:
            if (required is not None and window is not None and window < required
                    and self._policy(candidate.deployment_id).context_precheck):
                reason = f"context window {window} < the request's ~{required} tokens"
        elif window is None:
            reason = "context window unknown after a context-length error"
        elif required is not None and window < required:
            reason = f"context window {window} < the request's ~{required} tokens"
        elif self._context.refused_window is not None and window <= self._context.refused_window:
            reason = f"context window {window} <= {self._context.refused_window}, which already refused the request"
        if reason is None:
            return True
        if note:
            self._own_context().skipped.append(f"{candidate.deployment_id} ({reason})")
            self._skip(candidate, now, reason)
        return False

    def _breaker_note(self, deployment_id: str, now: float) -> str:
        snap = self._breakers.breaker(deployment_id).snapshot(now)
        if snap.disabled_reason:
            return f"skipped: {snap.disabled_reason}"
        if snap.state == "half_open":
            return f"skipped: half-open, all {snap.probes_in_flight} probe slots in use"
        until = "" if snap.open_until is None else f" for {snap.open_until - now:.1f}s"
        return f"skipped: circuit open{until} ({snap.reason})"

    def _line(self, candidate: Candidate, now: float, tier: str | None, **fields: Any) -> Attempt:
        """A new line of the route for `candidate`, numbered by its place, stamped with the wall clock."""
        provider, model = candidate.provider, candidate.model
        if provider is None or model is None:
            provider, _, model = candidate.deployment_id.partition(":")
        record = Attempt._filled(deployment=candidate.deployment_id, provider=provider, model=model, tier=tier,
                                 number=len(self.attempts) + 1, started_at=now if self._wall is None else self._wall(),
                                 **fields)
        self.attempts.append(record)
        return record

    def _skip(self, candidate: Candidate, now: float, note: str, *, held_by: BaseException | None = None) -> None:
        self._line(candidate, now, candidate.tier, status="skipped", note=note, held_by=held_by)

    def _skip_held(self, candidate: Candidate, is_fallback: bool, now: float) -> None:
        """Skip a candidate whose breaker holds it, noting what holds it and until when."""
        breaker = self._breakers.breaker(candidate.deployment_id)
        until = breaker.open_until(now)
        disabled = breaker.snapshot(now).disabled_reason is not None
        self._held = [*self._held, _Held(candidate, is_fallback, None if disabled or until is None
                                         or until == float("inf") else until)]
        self._skip(candidate, now, self._breaker_note(candidate.deployment_id, now),
                   held_by=breaker.held_by(now))

    def _held_error(self, now: float) -> BaseException | None:
        """Nothing was sent and every skip is a hold of one error class: a copy of that error, marked
        held, with the time left on the first hold as its `retry_after`. None otherwise."""
        skips = self.attempts
        if not skips or any(a.status != "skipped" or a.held_by is None for a in skips):
            return None
        causes = [a.held_by for a in skips]
        if len({type(c) for c in causes}) != 1:
            return None
        first = skips[0]
        cause = causes[0]
        assert cause is not None
        held = detached(cause)
        held.held = True  # type: ignore[attr-defined]
        until = self._breakers.breaker(first.deployment).open_until(now)
        if isinstance(held, E.ProviderError):
            held.retry_after = None if until is None or until == float("inf") else max(0.0, until - now)
        return held

    def _interrupted(self, flight: _InFlight, error: BaseException, partial_text: str) -> E.StreamInterruptedError:
        if isinstance(error, E.StreamInterruptedError) and not partial_text:
            partial_text = error.partial_text
        attempts = list(self.attempts)  # the cut attempt's line among them, ended as "interrupted" by `record`
        exc = E.StreamInterruptedError(
            f"the stream broke after content had reached the caller ({len(partial_text)} characters); "
            f"not replayed: {describe_error(error)}",
            partial_text=partial_text,
            attempts=attempts,
            provider=getattr(error, "provider", None),
            deployment=flight.candidate.deployment_id,
            status=getattr(error, "status", None),
            request_id=getattr(error, "request_id", None),
        )
        exc.__cause__ = error
        return exc

    def _finish_exhausted(self, reason: str, now: float) -> Exhausted:
        for dep in list(self._in_flight):
            self.cancel(dep, now, note="cancelled: the call's deadline passed")
        self._pending = None
        self._leave_queue()
        if self._recover in _STREAM_RECOVERY and self._cut is not None:
            flight, error, partial = self._cut  # the real failure is the cut, whatever came after
            self._terminal = Exhausted("stream_interrupted", self._interrupted(flight, error, partial))
            return self._terminal
        sent = [a for a in self.attempts if a.status != "skipped"]
        skips = [a for a in self.attempts if a.status == "skipped"]
        only_context_skips = bool(skips) and len(skips) == len(self._context.skipped)
        if reason == "all_failed" and (
            (self._context.error is not None and not self._context.fitting_tried) or (not sent and only_context_skips)
        ):
            detail = "; ".join(self._context.skipped) or "no other deployment configured"
            base = self._context.error
            required = f" (~{self.required_context_tokens} tokens)" if self.required_context_tokens else ""
            said = f"{base.message}; " if base is not None else ""
            exc: BaseException = E.ContextLengthError(
                f"{said}no deployment of tier {self.tier!r} fits the request{required}: {detail}",
                provider=getattr(base, "provider", None),
                deployment=getattr(base, "deployment", None),
                status=getattr(base, "status", None),
                request_id=getattr(base, "request_id", None),
                provider_message=getattr(base, "provider_message", None),
                code=getattr(base, "code", None),
            )
            if base is not None:
                exc.__cause__ = base
            self._terminal = Exhausted("context_length", exc)
            return self._terminal
        held = self._held_error(now) if reason == "all_failed" and not sent else None
        if held is not None:
            self._terminal = Exhausted("held", held)
            return self._terminal
        tiers = repr(self.tier) + (f" and fallback tier {self.fallback_tier!r}" if self.fallback_tier else "")
        lines = []
        for a in self.attempts:
            what = describe_error(a.error) if a.error is not None else (a.decision or a.note or a.status)
            lines.append(f"{a.deployment}: {what}")
        head = "the call's deadline passed" if reason == "deadline" else f"every deployment of tier {tiers} failed"
        exc = E.AllDeploymentsFailedError(
            f"{head} after {len(sent)} attempt(s): " + ("; ".join(lines) if lines else "no attempt could start"),
            attempts=list(self.attempts),
            tier=self.tier,
            causes=[c for c in (a.error or a.held_by for a in self.attempts) if c is not None],
        )
        self._terminal = Exhausted("deadline" if reason == "deadline" else "all_failed", exc)
        return self._terminal
