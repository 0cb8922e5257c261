"""Load-aware balancing: which deployment of a tier a call should try first, from what the client measures.

`LoadBalancer` is the one owner of every deployment's load estimate in a client. The failover plan
tells it when an attempt starts (`started`), ends (`finished`) or is abandoned (`abandoned`); the
gauge scraper hands it the queue gauges self-hosted servers publish (`set_gauges`); with shared
state, the breaker sync hands it the other processes' in-flight counts (`set_remote`). `rank` orders
a tier's candidates by **expected delay**, lowest first:

    delay = service_s * max(1, (n + 1) / capacity) * kv_factor * error_factor

- `n`: requests in flight there: this process's (exact, counted when sent), plus what the server's
  gauges held beyond this process's calls at the last scrape (other clients), or, with shared state,
  the other processes' counts (last sync), whichever is larger.
- `service_s`: a peak-sensitive EWMA of the service time (a latency divided by the queueing it met):
  a slower sample moves it a quarter of the way up, a faster one a twentieth of the way down; an
  estimate not refreshed for a while relaxes toward the fastest service time seen, so a deployment
  that got no traffic after a slow spell is tried again.
- `capacity`: concurrent requests the deployment serves without queueing. Prior: the deployment's
  weight relative to the smallest weight of the tier (weights are capacity hints); learned: a call
  answered at the service time with n in flight (itself included) proves capacity >= n; a slower
  one met with n above the capacity queued as predicted (its service time is its latency over the
  rounds it waited); a slower one with n within the capacity moves the capacity toward n - 1 (and
  the service time up); a server's gauges with a waiting queue say capacity = its running count.
- `kv_factor`: 1 + 4 * (KV-cache usage - 0.85) above 85% (a nearly full KV cache preempts and recomputes).
- `error_factor`: 1 / (1 - error rate EWMA), capped at 10.

Exact minimum, not power-of-two-choices: a tier holds a handful of deployments (the whole scan costs
a few microseconds), this process's counts are exact and change the moment a call is sent, so the
herding P2C guards against (every chooser reading the same stale numbers) does not happen within a
process; P2C would, with three deployments, send a third of the pairs' choices to the worse of two.
Delays within 10% of the best count as ties (two equal servers' estimates differ by noise): the
lower utilization goes first, then at random.

Sticky keys: the deployment the sticky value hashes to keeps the call unless the call would queue
there (its in-flight count, this process's, other processes' and the server's gauges, is at its
capacity) and its expected delay is more than `STICKY_SLACK` times the best's and more than
`STICKY_GAP_S` longer (bounded-load affinity, as consistent hashing with bounded loads: a prefix
cache is not worth a queue, but a slower sample on an idle server is not load, and moving its users
away would leave it unmeasured); the route says when load won.

**Slow start** (TCP's slow start, Envoy's slow-start mode, Finagle's probation): a deployment whose
capacity is not learned yet holds at most a small *window* of this process's calls in flight. The
window starts at `SLOW_START_WINDOW` per unit of prior capacity (the weight over the smallest) and
doubles with each call answered at its service time; it ends (the capacity estimate replaces it) at
the first answer that shows queueing with two or more in flight, when it reaches `MAX_WINDOW`, or
when the server's gauges show a waiting queue once its service time is measured. A
deployment whose error rate passes one half (what opens a breaker) starts a new slow start when it
recovers, which ends once the window is back at the capacity learned before. The window only holds
calls back: the failover plan (`FailoverPlan`, `slow_start_wait_s`) makes a first attempt that finds
every deployment of a load-balanced pool at its window wait in the tier's fair queue for an answer,
up to `slow_start_wait_s`, then go to the lowest expected delay anyway. Without it, the first burst
of calls (all sent before any answer, every deployment unmeasured with the same prior) goes
round-robin and queues deep on the smallest server. `grow_window` is the rule, a plain function.

Sans-I/O: every method takes `now`; nothing here sleeps, opens a socket or reads a clock. One lock
guards the table (calls on several threads share a balancer).
"""

from __future__ import annotations

import math
import random
import threading
from dataclasses import dataclass
from typing import Mapping, Sequence, TypeVar

from llmroute._runtime.forksafe import renew_at_fork

__all__ = ["QueueGauges", "LoadBalancer", "BalanceChoice", "DeploymentLoad", "BALANCE_MODES", "STICKY_SLACK",
           "STICKY_GAP_S", "grow_window"]

BALANCE_MODES = ("load", "weighted", "order")

STICKY_SLACK = 2.0  # a sticky deployment keeps the call while its delay is within this factor of the best
STICKY_GAP_S = 0.05  # ... or within this many seconds of it
UP_ALPHA = 0.25  # a slower service sample moves the estimate this far up at once (peak-sensitive)
DOWN_ALPHA = 0.05  # a faster one this far down
DOWN_TAU_S = 2.0  # the raw latency average (display) decays with this time constant
IDLE_TAU_S = 10.0  # an estimate not refreshed relaxes toward the fastest seen with this time constant
FAST = 1.5  # a latency within this factor of the service time met no queue
CAPACITY_ALPHA = 0.2  # weight of one saturated sample in the capacity estimate
ERROR_ALPHA = 0.2  # weight of one outcome in the error rate
GAUGES_FRESH_S = 5.0  # gauges older than this are ignored
REMOTE_FRESH_S = 5.0  # other processes' counts older than this are ignored
KV_KNEE = 0.85
TIE = 1.10  # expected delays within 10% of the best count as equal
MAX_CAPACITY = 4096.0
SLOW_START_WINDOW = 1.0  # calls in flight a deployment not yet measured gets, per unit of prior capacity
MAX_WINDOW = 64.0  # a slow-start window this large ends the slow start (the deployment never queued)
SLOW_START_POLL_S = 0.01  # a call held by slow start checks the windows again this often
RESTART_ERRORS = 0.5  # an error rate above this (a failing deployment) starts a new slow start

C = TypeVar("C")


@dataclass(frozen=True)
class QueueGauges:
    """What a self-hosted server says about its own queue (Prometheus `/metrics`)."""

    running: float | None = None  # requests being decoded now
    waiting: float | None = None  # requests queued for a batch slot
    kv_cache: float | None = None  # KV-cache usage, 0..1


@dataclass
class DeploymentLoad:
    """One deployment's load estimate. Read it through `LoadBalancer.snapshot`."""

    prior_capacity: float = 1.0
    capacity: float = 1.0
    in_flight: int = 0
    service_s: float | None = None
    fastest_s: float | None = None
    latency_s: float | None = None  # peak-EWMA of raw latencies (display)
    updated_at: float = 0.0
    errors: float = 0.0
    completed: int = 0
    remote_in_flight: int = 0
    remote_at: float = -math.inf
    gauges: QueueGauges | None = None
    gauges_at: float = -math.inf
    gauge_others: float = 0.0  # the server's running + waiting beyond this process's in flight, at the scrape
    gauge_error: str | None = None  # the last scrape's failure (health line), None once one succeeds
    # Slow start: this process's calls in flight allowed while the capacity is not learned (None: learned).
    window: float | None = SLOW_START_WINDOW
    window_goal: float = MAX_WINDOW  # the window ends here (after a failure spell: the capacity learned before)
    balanced: bool = False  # in a tier balanced by load (`set_prior`): the only place its window is used


@dataclass(frozen=True)
class BalanceChoice:
    """Why `rank` put a deployment first: its estimate against the others' (the route carries `text`)."""

    deployment_id: str
    estimates: tuple[tuple[str, float, int, float], ...]  # (deployment, delay_s, in flight, capacity), ranked
    sticky_overridden: str | None = None  # the sticky deployment load moved the call away from
    windows: tuple[tuple[str, float], ...] = ()  # deployments in slow start and their window
    held: tuple[str, ...] = ()  # better-ranked deployments slow start held the call back from

    @property
    def text(self) -> str:
        window = dict(self.windows)
        parts = [f"{d} {delay * 1000:.0f}ms (in flight {n}, "
                 + (f"slow start window {window[d]:.0f})" if d in window else f"capacity ~{cap:.0f})")
                 for d, delay, n, cap in self.estimates]
        head = f"load: {self.deployment_id} has the lowest expected delay"
        if self.held:
            head += f" of those with room ({', '.join(self.held)} at the slow-start window)"
        head += ": " + "; ".join(parts)
        if self.sticky_overridden:
            head += f" (sticky {self.sticky_overridden} is over {STICKY_SLACK:g}x the best)"
        return head


class LoadBalancer:
    """Every deployment's load estimate, and the order it implies for a tier's candidates."""

    def __init__(self, *, default_service_s: float = 1.0) -> None:
        self._lock = threading.Lock()
        self._loads: dict[str, DeploymentLoad] = {}
        self.default_service_s = default_service_s
        # The client-side queue of each tier whose deployments are all full: ticket -> expiry, in
        # arrival order. A ticket expires by itself (its call's queue timeout), so a call abandoned
        # while queued cannot block the ones behind it.
        self._queues: dict[str, dict[int, float]] = {}
        self._tickets = 0
        renew_at_fork(self, "_lock")

    def _after_fork_in_child(self) -> None:
        """A forked child keeps the estimates; the calls in flight and queued are the parent's."""
        for load in self._loads.values():
            load.in_flight = 0
        self._queues = {}

    # -- the table -------------------------------------------------------------------------------
    def _load(self, deployment_id: str) -> DeploymentLoad:
        load = self._loads.get(deployment_id)
        if load is None:
            load = self._loads[deployment_id] = DeploymentLoad()
        return load

    def set_prior(self, weights: Mapping[str, float | None]) -> None:
        """Weights of one tier's deployments as capacity hints: each one's weight over the smallest."""
        given = [w for w in weights.values() if w is not None and w > 0]
        smallest = min(given) if given else 1.0
        with self._lock:
            for dep, w in weights.items():
                load = self._load(dep)
                load.balanced = True
                prior = max(1.0, (w or smallest) / smallest)
                if load.completed == 0:
                    load.capacity = max(load.capacity, prior)
                    if load.window is not None:
                        load.window = max(load.window, SLOW_START_WINDOW * prior)
                load.prior_capacity = max(load.prior_capacity, prior)

    def known_capacity(self, deployment_id: str) -> None:
        """`deployment_id`'s capacity is declared (a client-side `max_concurrency`): no slow start."""
        with self._lock:
            self._load(deployment_id).window = None

    # -- choosing --------------------------------------------------------------------------------
    def _service(self, load: DeploymentLoad, now: float, fallback: float) -> float:
        s = load.service_s
        if s is None:
            return fallback
        fastest = load.fastest_s if load.fastest_s is not None else s
        idle = now - load.updated_at
        if idle > 0 and s > fastest:
            s = fastest + (s - fastest) * math.exp(-idle / IDLE_TAU_S)
        return s

    def _delay(self, load: DeploymentLoad, now: float, fallback: float) -> tuple[float, int, float, float]:
        n = load.in_flight
        if now - load.remote_at <= REMOTE_FRESH_S:
            n += load.remote_in_flight
        capacity = load.capacity
        kv = 1.0
        g = load.gauges
        if g is not None and now - load.gauges_at <= GAUGES_FRESH_S:
            # What the server holds beyond this process's own calls (other clients, other processes):
            # this process's count is exact now, the gauge's only as of the scrape.
            others = load.gauge_others
            if now - load.remote_at <= REMOTE_FRESH_S:
                others = max(0.0, others - load.remote_in_flight)
            n += int(others)
            if g.kv_cache is not None and g.kv_cache > KV_KNEE:
                kv = 1.0 + 4.0 * (g.kv_cache - KV_KNEE) / (1.0 - KV_KNEE)
        utilization = (n + 1) / capacity
        delay = self._service(load, now, fallback) * max(1.0, utilization) * kv
        if load.errors > 0.01:
            delay /= max(0.1, 1.0 - load.errors)
        return delay, n, capacity, utilization

    def rank(self, candidates: Sequence[C], ids: Sequence[str], now: float, *, rng: random.Random,
             sticky: int | None = None) -> tuple[list[C], BalanceChoice | None]:
        """`candidates` (with their deployment `ids`) ordered by expected delay, lowest first.

        `sticky`: the index of the candidate a sticky value chose; it stays first unless the call
        would queue there and its delay is over `STICKY_SLACK` times the best's and over
        `STICKY_GAP_S` longer."""
        if len(candidates) < 2:
            return list(candidates), None
        with self._lock:
            known = [load.service_s for d in ids if (load := self._loads.get(d)) is not None and load.service_s]
            fallback = min(known) if known else self.default_service_s  # an unmeasured one is tried
            scored = []
            windows: list[tuple[str, float]] = []
            for i, dep in enumerate(ids):
                load = self._load(dep)
                delay, n, capacity, utilization = self._delay(load, now, fallback)
                scored.append((delay, utilization, rng.random(), i, n, capacity))
                if load.window is not None:
                    windows.append((dep, load.window))
        scored.sort()
        best = scored[0]
        # Within TIE of the best: the lower utilization first (spreads load over equal servers whose
        # estimates differ by noise).
        near = [s for s in scored if s[0] <= best[0] * TIE]
        if len(near) > 1:
            near.sort(key=lambda s: (s[1], s[2]))
            scored = near + [s for s in scored if s[0] > best[0] * TIE]
        overridden: str | None = None
        if sticky is not None:
            pos = next(k for k, s in enumerate(scored) if s[3] == sticky)
            delay, utilization = scored[pos][0], scored[pos][1]
            if utilization <= 1.0 or delay <= max(STICKY_SLACK * scored[0][0], scored[0][0] + STICKY_GAP_S):
                scored.insert(0, scored.pop(pos))
            else:
                overridden = ids[sticky]
        order = [candidates[s[3]] for s in scored]
        estimates = tuple((ids[s[3]], s[0], s[4], s[5]) for s in scored)
        return order, BalanceChoice(ids[scored[0][3]], estimates, overridden, tuple(windows))

    # -- slow start ------------------------------------------------------------------------------
    def holds(self, deployment_id: str, pool: Sequence[str], key: str, ticket: int | None, now: float) -> bool:
        """Should a first attempt at `deployment_id` wait (slow start)? Yes when it is at its window
        (this process's calls in flight there; other processes' too while no one has measured it),
        or when the calls queued in `key`'s queue ahead of this one (`ticket`) fill every window of
        `pool` (first come, first served). A pool with a deployment out of slow start never holds
        calls behind the others' windows."""
        with self._lock:
            load = self._loads.get(deployment_id)
            if load is None or load.window is None:
                return False
            n = load.in_flight
            if load.service_s is None and now - load.remote_at <= REMOTE_FRESH_S:
                # Nobody has heard back from it yet: the fleet's calls there count too (one small
                # server must not take one call from every process before any of them answers).
                n += load.remote_in_flight
            if n >= load.window:
                return True
            queue = self._queues.get(key)
            if not queue:
                return False
            ahead = 0
            for t, expires in queue.items():
                if t == ticket:
                    break
                if expires >= now:
                    ahead += 1
            if not ahead:
                return False
            room = 0.0
            for dep in pool:
                other = self._loads.get(dep)
                if other is None or other.window is None:
                    return False
                room += max(0.0, other.window - other.in_flight)
            return ahead >= room

    # -- measuring -------------------------------------------------------------------------------
    def started(self, deployment_id: str, now: float) -> int:
        """An attempt was sent: counts it in flight; returns the in-flight count it met (itself included)."""
        with self._lock:
            load = self._load(deployment_id)
            load.in_flight += 1
            return load.in_flight + (load.remote_in_flight if now - load.remote_at <= REMOTE_FRESH_S else 0)

    def abandoned(self, deployment_id: str) -> None:
        """An attempt ended without an outcome that says anything of the deployment (cancelled, a caller error)."""
        with self._lock:
            load = self._load(deployment_id)
            load.in_flight = max(0, load.in_flight - 1)

    def finished(self, deployment_id: str, now: float, *, latency_s: float, met: int, ok: bool) -> None:
        """An attempt ended: `met` is what `started` returned; `ok` False for a platform failure."""
        with self._lock:
            load = self._load(deployment_id)
            load.in_flight = max(0, load.in_flight - 1)
            load.errors += ERROR_ALPHA * ((0.0 if ok else 1.0) - load.errors)
            if not ok and load.errors > RESTART_ERRORS and load.window is None and load.completed:
                # Failing: once it recovers, ramp its traffic up again (as after a breaker opens).
                load.window = SLOW_START_WINDOW * load.prior_capacity
                load.window_goal = max(load.window * 2.0, load.capacity)
            if not ok or latency_s <= 0:
                return
            # The requests ahead of it when it started (a FIFO server's queue): not those that came after.
            _learn(load, now, latency_s, max(1.0, float(met)))

    def set_gauges(self, deployment_id: str, gauges: QueueGauges, now: float) -> None:
        with self._lock:
            load = self._load(deployment_id)
            load.gauges, load.gauges_at, load.gauge_error = gauges, now, None
            load.gauge_others = max(0.0, (gauges.running or 0.0) + (gauges.waiting or 0.0) - load.in_flight)
            if gauges.waiting and gauges.running:
                load.capacity = max(1.0, min(MAX_CAPACITY, gauges.running))  # a queue: the batch is full
                if load.service_s is not None:  # and its speed is measured: no slow start
                    load.window = None

    def gauge_failed(self, deployment_id: str, reason: str) -> None:
        """A scrape failed: only the health line changes (the last gauges age out on their own)."""
        with self._lock:
            self._load(deployment_id).gauge_error = reason

    def set_remote(self, deployment_id: str, in_flight: int, now: float) -> None:
        """The other processes' in-flight count at `deployment_id` (shared state)."""
        with self._lock:
            load = self._load(deployment_id)
            load.remote_in_flight, load.remote_at = max(0, int(in_flight)), now

    # -- the client-side queue ------------------------------------------------------------------
    def enqueue(self, key: str, expires_at: float) -> int:
        """A place at the back of `key`'s queue (a tier's), valid until `expires_at`."""
        with self._lock:
            self._tickets += 1
            self._queues.setdefault(key, {})[self._tickets] = expires_at
            return self._tickets

    def dequeue(self, key: str, ticket: int | None) -> None:
        if ticket is None:
            return
        with self._lock:
            queue = self._queues.get(key)
            if queue is not None:
                queue.pop(ticket, None)

    def ahead(self, key: str, ticket: int | None, now: float) -> int:
        """Calls queued ahead of `ticket` (all of them for None: a call that has not queued)."""
        with self._lock:
            queue = self._queues.get(key)
            if not queue:
                return 0
            for t in [t for t, expires in queue.items() if expires < now]:
                del queue[t]
            count = 0
            for t in queue:
                if t == ticket:
                    break
                count += 1
            return count

    # -- shared state (llmroute/state/breakers.py carries these in its sync round trip) --------------
    def published(self, deployment_ids: Sequence[str]) -> list[str]:
        """This process's "in_flight|service_s|capacity|window" per deployment, for the other processes
        (window empty once the slow start ended)."""
        with self._lock:
            out = []
            for dep in deployment_ids:
                load = self._loads.get(dep)
                if load is None:
                    out.append("0||")
                else:
                    service = "" if load.service_s is None else f"{load.service_s:.6g}"
                    window = "" if load.window is None else f"{load.window:.6g}"
                    out.append(f"{load.in_flight}|{service}|{load.capacity:.6g}|{window}")
            return out

    def adopt(self, deployment_id: str, others: Sequence[str], now: float) -> None:
        """The other processes' `published` values for one deployment: their in-flight counts add to
        this process's; their estimates stand in for this process's until it has measured its own."""
        total = 0
        services: list[float] = []
        capacities: list[float] = []
        learned: list[float] = []  # capacities of processes out of slow start
        windows: list[float] = []  # windows of processes still in it
        for value in others:
            parts = value.split("|")
            try:
                total += max(0, int(parts[0]))
                if len(parts) > 2 and parts[1]:
                    services.append(float(parts[1]))
                    capacities.append(float(parts[2]))
                    if len(parts) > 3 and parts[3]:
                        windows.append(float(parts[3]))
                    else:  # no window (a process without slow start publishes three fields): learned
                        learned.append(capacities[-1])
            except ValueError:
                continue
        with self._lock:
            load = self._load(deployment_id)
            load.remote_in_flight, load.remote_at = total, now
            if load.completed == 0 and services:
                services.sort()
                load.service_s = load.fastest_s = services[len(services) // 2]
                load.capacity = max(load.capacity, sorted(capacities)[len(capacities) // 2])
                load.updated_at = now
            if load.window is not None and services:
                # The fleet's knowledge: another process learned the capacity (its slow start ended),
                # or ramped its window further than this one.
                if learned:
                    load.capacity = max(load.capacity, sorted(learned)[len(learned) // 2])
                    load.window = None
                elif windows:
                    load.window = max(load.window, min(windows))

    def local_in_flight(self) -> dict[str, int]:
        with self._lock:
            return {d: load.in_flight for d, load in self._loads.items()}

    def in_flight(self, deployment_id: str) -> int:
        with self._lock:
            load = self._loads.get(deployment_id)
            return load.in_flight if load is not None else 0

    def snapshot(self, now: float) -> dict[str, dict[str, object]]:
        """Every deployment's estimate, for `client.health()` and the metrics."""
        out: dict[str, dict[str, object]] = {}
        with self._lock:
            known = [load.service_s for load in self._loads.values() if load.service_s]
            fallback = min(known) if known else self.default_service_s
            for dep, load in self._loads.items():
                delay, n, capacity, _ = self._delay(load, now, fallback)
                g = load.gauges if load.gauges is not None and now - load.gauges_at <= GAUGES_FRESH_S else None
                out[dep] = {
                    "in_flight": load.in_flight,
                    "remote_in_flight": load.remote_in_flight if now - load.remote_at <= REMOTE_FRESH_S else 0,
                    "latency_s": load.latency_s,
                    "service_s": load.service_s,
                    "capacity": capacity,
                    "expected_delay_s": delay if load.service_s is not None else None,
                    "error_rate": load.errors,
                    "queue_running": g.running if g is not None else None,
                    "queue_waiting": g.waiting if g is not None else None,
                    "kv_cache": g.kv_cache if g is not None else None,
                    "gauge_error": load.gauge_error,
                    "window": load.window if load.balanced else None,
                }
        return out


def _learn(load: DeploymentLoad, now: float, latency_s: float, n: float) -> None:
    """Fold one successful call's latency, met at concurrency `n`, into the service time and capacity."""
    load.completed += 1
    raw = load.latency_s
    load.latency_s = latency_s if raw is None or latency_s > raw else raw + (latency_s - raw) * (
        1.0 - math.exp(-max(0.0, now - load.updated_at) / DOWN_TAU_S))
    s = load.service_s
    if s is None:
        load.service_s = load.fastest_s = latency_s
        load.capacity = max(load.capacity, n)
        load.updated_at = now
        load.window = grow_window(load.window, load.window_goal, fast=True, met=n)
        return
    capacity = load.capacity
    fast = latency_s <= FAST * s
    load.window = grow_window(load.window, load.window_goal, fast=fast, met=n)
    if fast:
        capacity = max(capacity, n)  # served at speed with n in flight: it holds at least n
        sample = latency_s
    elif n > capacity:
        sample = latency_s / math.ceil(n / capacity)  # it queued, as predicted: one service per round waited
    else:
        # Slower than its service time with no queue predicted: the server slowed down, or it holds
        # fewer than believed. Both move: the service time (below) and the capacity, toward n - 1.
        capacity -= CAPACITY_ALPHA * (capacity - max(1.0, n - 1.0))
        sample = latency_s
    load.capacity = min(MAX_CAPACITY, max(1.0, capacity))
    s += (UP_ALPHA if sample > s else DOWN_ALPHA) * (sample - s)
    load.service_s = s
    fastest = load.fastest_s if load.fastest_s is not None else s
    # The fastest seen, forgotten slowly (a deployment that got faster for good becomes the new floor).
    load.fastest_s = min(s, fastest + (s - fastest) * 0.02)
    load.updated_at = now


def grow_window(window: float | None, goal: float, *, fast: bool, met: float) -> float | None:
    """Slow start: the window after one answered call (None: the slow start is over).

    `fast`: answered at the deployment's service time (no queueing), with `met` calls in flight
    (itself included). A fast answer doubles the window (the deployment held what it was given);
    it ends at `goal`. A slow answer met with two or more in flight shows queueing: the capacity
    estimate has learned what the window was probing for, and replaces it. A slow answer alone in
    flight says the service got slower, not that the deployment is full: the window stays."""
    if window is None:
        return None
    if not fast:
        return None if met >= 2 else window
    window *= 2.0
    return None if window >= goal else window
