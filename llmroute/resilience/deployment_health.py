"""The breakers of every deployment, and the health table `client.health()` and `llmroute health` show.

`BreakerRegistry` holds one `CircuitBreaker` per deployment id ("provider:model"), each with its
merged policy, classifies outcomes through `classify_failure`, and reports transitions: a disabled
deployment (auth, billing, unknown model) is logged at ERROR because it is a configuration fault,
not a blip. `ProbeTally` counts what `llmroute health` probes saw, and `health_status` joins it with
the breaker: a deployment that failed every probe is "failing", whatever its breaker says (a breaker
needs several failures before it opens). `format_health` renders both as a plain-text table.

No clock, no I/O besides the `logging` records of transitions.
"""

from __future__ import annotations

import logging
import math
import random
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Union

from llmroute._runtime.forksafe import renew_at_fork
from llmroute.resilience.breaker import BreakerSnapshot, CircuitBreaker, Permit, Transition
from llmroute.resilience.outcome import classify_failure
from llmroute.resilience.policy import ResiliencePolicy

if TYPE_CHECKING:
    from llmroute.accounting.ledger import LedgerHealth

__all__ = ["BreakerRegistry", "HealthReport", "ProbeTally", "health_status", "format_health"]

logger = logging.getLogger("llmroute.resilience")

PolicySource = Union[Callable[[str], ResiliencePolicy], Mapping[str, ResiliencePolicy], ResiliencePolicy, None]


class BreakerRegistry:
    """One breaker per deployment id. `policies` maps an id to its merged policy (callable, dict or one policy)."""

    def __init__(
        self,
        policies: PolicySource = None,
        *,
        on_transition: Callable[[Transition], None] | None = None,
        rng: random.Random | None = None,
        breaker_factory: Callable[..., CircuitBreaker] = CircuitBreaker,
    ) -> None:
        self._policy_of = _policy_resolver(policies)
        self._rng = rng  # jitters open periods; None: exact
        self._on_transition = on_transition
        self._breaker_factory = breaker_factory  # e.g. state.breakers.SharedCircuitBreaker
        self._lock = threading.Lock()
        self._breakers: dict[str, CircuitBreaker] = {}
        renew_at_fork(self, "_lock")

    def policy(self, deployment_id: str) -> ResiliencePolicy:
        return self._policy_of(deployment_id)

    def breaker(self, deployment_id: str) -> CircuitBreaker:
        breaker = self._breakers.get(deployment_id)  # made once, never replaced: read without the lock
        if breaker is not None:
            return breaker
        with self._lock:
            breaker = self._breakers.get(deployment_id)
            if breaker is None:
                breaker = self._breaker_factory(self._policy_of(deployment_id), deployment_id, rng=self._rng)
                self._breakers[deployment_id] = breaker
            return breaker

    def register(self, deployment_ids: Iterable[str]) -> None:
        """Create breakers up front so health lists every configured deployment, called or not."""
        for deployment_id in deployment_ids:
            self.breaker(deployment_id)

    def record(
        self,
        deployment_id: str,
        now: float,
        error: BaseException | None,
        *,
        ttft_s: float | None = None,
        latency_s: float | None = None,
        permit: Permit | None = None,
    ) -> Transition | None:
        """Classify `error` (None = success), feed the breaker, report any transition."""
        transition = self.breaker(deployment_id).record(
            now, classify_failure(error), ttft_s=ttft_s, latency_s=latency_s, error=error, permit=permit
        )
        if transition is not None:
            self._report(transition)
        return transition

    def health(self, now: float) -> dict[str, BreakerSnapshot]:
        with self._lock:
            breakers = list(self._breakers.values())
        return {b.deployment_id: b.snapshot(now) for b in sorted(breakers, key=lambda b: b.deployment_id)}

    def _report(self, transition: Transition) -> None:
        if transition.disabled and transition.to_state == "open":
            logger.error("deployment %s taken out of rotation: %s", transition.deployment_id, transition.reason)
        elif transition.to_state == "open":
            logger.warning(
                "circuit open for %s until +%.1fs: %s",
                transition.deployment_id,
                (transition.open_until or transition.at) - transition.at,
                transition.reason,
            )
        else:
            logger.info("circuit %s for %s: %s", transition.to_state, transition.deployment_id, transition.reason)
        if self._on_transition is not None:
            self._on_transition(transition)


def _policy_resolver(policies: PolicySource) -> Callable[[str], ResiliencePolicy]:
    if policies is None:
        default = ResiliencePolicy()
        return lambda _id: default
    if isinstance(policies, ResiliencePolicy):
        return lambda _id: policies
    if isinstance(policies, Mapping):
        fallback = ResiliencePolicy()
        return lambda deployment_id: policies.get(deployment_id, fallback)
    return policies


@dataclass
class ProbeTally:
    """What the probes of one deployment saw: how many were sent, how many failed, the last error."""

    sent: int = 0
    failed: int = 0
    last_error: str | None = None

    def add(self, error: BaseException | None) -> None:
        self.sent += 1
        if error is not None:
            self.failed += 1
            self.last_error = f"{type(error).__name__}: {error}"

    @property
    def all_failed(self) -> bool:
        return self.sent > 0 and self.failed == self.sent

    def as_dict(self) -> dict[str, Any]:
        return {"sent": self.sent, "failed": self.failed, "last_error": self.last_error}


def health_status(snapshot: BreakerSnapshot, probe: ProbeTally | None = None) -> str:
    """The breaker's state (closed, open, half_open), except that a deployment whose probes all failed
    is "failing" while its breaker is not open (one failure seldom opens a breaker)."""
    if probe is not None and probe.all_failed and snapshot.state != "open":
        return "failing"
    return snapshot.state


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 10:
        return f"{value:.2f}"
    return f"{value:.1f}"


def load_line(load: Mapping[str, Any]) -> str:
    """One deployment's load estimate as `llmroute health` prints it."""
    parts = [f"load: in flight {load.get('in_flight', 0)}"]
    if load.get("remote_in_flight"):
        parts.append(f"other processes {load['remote_in_flight']}")
    latency = load.get("latency_s")
    parts.append(f"latency ~{_seconds(latency)}{'s' if latency is not None else ''}, "
                 f"capacity ~{float(load.get('capacity') or 1):.0f}")
    if load.get("window") is not None:
        parts.append(f"slow start window {float(load['window']):.0f}")
    if load.get("queue_running") is not None or load.get("queue_waiting") is not None:
        kv = load.get("kv_cache")
        parts.append(f"server running {load.get('queue_running') or 0:g}, waiting {load.get('queue_waiting') or 0:g}"
                     + (f", KV cache {kv:.0%}" if kv is not None else ""))
    if load.get("gauge_error"):
        parts.append(str(load["gauge_error"]))
    return "; ".join(parts)


def format_health(snapshots: Mapping[str, BreakerSnapshot], *, now: float | None = None,
                  probes: Mapping[str, ProbeTally] | None = None) -> str:
    """A plain-text table of breaker snapshots; with `now`, open deadlines are shown as time left.
    With `probes`, a "probes" column (ok/sent) and the state a failed probe run makes "failing"."""
    header: tuple[str, ...] = ("deployment", "state", "fail", "slow", "calls", "open for", "trips", "ttft p50/p95", "latency p50/p95", "last error")
    if probes is not None:
        header = header[:2] + ("probes",) + header[2:]
    rows = [header]
    notes = []
    for deployment_id, s in snapshots.items():
        probe = probes.get(deployment_id) if probes is not None else None
        if s.open_until is None:
            open_for = "-"
        elif math.isinf(s.open_until):
            open_for = "disabled"
        elif s.disabled_reason and now is not None:  # a 401: tried again then, or when the key changes
            open_for = f"disabled {max(0.0, s.open_until - now):.0f}s"
        elif now is not None:
            open_for = f"{max(0.0, s.open_until - now):.1f}s"
        else:
            open_for = f"until {s.open_until:.1f}"
        last_error = s.last_error or "-"
        if len(last_error) > 60:
            last_error = last_error[:59] + "…"
        row: tuple[str, ...] = (
            deployment_id,
            health_status(s, probe),
            f"{s.failure_rate:.0%}",
            f"{s.slow_rate:.0%}",
            str(s.calls_in_window),
            open_for,
            str(s.trips),
            f"{_seconds(s.p50_ttft_s)}/{_seconds(s.p95_ttft_s)}",
            f"{_seconds(s.p50_latency_s)}/{_seconds(s.p95_latency_s)}",
            last_error,
        )
        if probes is not None:
            row = row[:2] + (f"{probe.sent - probe.failed}/{probe.sent} ok" if probe else "-",) + row[2:]
        rows.append(row)
        if probe is not None and probe.all_failed and not s.disabled_reason:
            notes.append(f"!! {deployment_id}: every probe failed ({probe.failed}/{probe.sent}); "
                         f"breaker {s.state}; last: {probe.last_error}")
        if s.disabled_reason:
            notes.append(f"!! {deployment_id}: {s.disabled_reason}")
        elif s.state != "closed" and s.reason:
            notes.append(f"   {deployment_id}: {s.reason}")
        if s.load is not None:
            notes.append(f"   {deployment_id}: {load_line(s.load)}")
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    if not snapshots:
        lines.append("(no deployments)")
    return "\n".join(lines + notes)


class HealthReport(dict[str, BreakerSnapshot]):
    """What `client.health()` returns: `{"provider:model": breaker snapshot}`, plus `.ledger`, the
    ledger sink's `LedgerHealth` (records written, waiting in the spool, lost), or None without one,
    and `.shared_state` (with `[state] backend = "redis"`: whether Redis answers; else None)."""

    def __init__(self, snapshots: Mapping[str, BreakerSnapshot], *, ledger: LedgerHealth | None = None,
                 shared_state: Any = None) -> None:
        super().__init__(snapshots)
        self.ledger = ledger
        self.shared_state = shared_state

    def ledger_line(self) -> str:
        led = self.ledger
        if led is None:
            return "ledger: none"
        line = f"ledger: {led.sink}: {led.written} written, {led.waiting} waiting, {led.lost} lost"
        if led.last_error:
            line += f" (failing: {led.last_error})"
        return line
