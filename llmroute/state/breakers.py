"""Breakers shared through Redis: one process's discovery protects every process.

A narrow layer over the local `CircuitBreaker`s (their logic is unchanged):

* Publish: each transition a process's breaker makes (trip, hold, disable, close) is written to the
  deployment's hash `<prefix>{breakers}:<deployment>` by one script that never shortens an open
  deadline and never lets a stale "closed" overwrite a newer trip. Deadlines are wall-clock seconds.
* Adopt: every process reads all the hashes (one pipelined round trip) every `breaker_sync_s` and
  holds its own breaker open until the fleet's deadline (`CircuitBreaker.extend_open`: a hold, not a
  trip), so an open breaker is skipped everywhere within one sync interval plus one round trip.
* Probes: when the open period ends, every process's breaker goes half-open at about the same time;
  `SharedCircuitBreaker.acquire` then also takes a cluster-wide probe slot (a leased sorted-set
  member, like a concurrency slot), so at most `half_open_probes` probes run across the fleet.
  The slot is given back when the probe's outcome is recorded or the permit released, and expires
  after the call deadline if its process died.
* Samples: each process pushes its recent TTFT and latency samples to capped lists (the last
  `SAMPLES_KEPT` of the fleet) in the same sync round trip and reads them back, so
  `hedge_delay = "p95"` and health percentiles use the fleet's figures.

While Redis is unavailable each breaker works alone, as in one process.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
import uuid
from dataclasses import replace
from typing import Any, Callable, Iterable, Literal

from llmroute import errors as E
from llmroute._runtime.forksafe import renew_at_fork
from llmroute.resilience.breaker import SAMPLES_KEPT, BreakerSnapshot, CircuitBreaker, Permit, Transition, percentile
from llmroute.resilience.policy import ResiliencePolicy
from llmroute.state.shared_limits import ADMIT_LUA
from llmroute.state.redis_state import SharedState, Unavailable

__all__ = ["SharedBreakers", "SharedCircuitBreaker", "PUBLISH_LUA"]

log = logging.getLogger("llmroute.state")

# KEYS: the deployment's hash. ARGV: state ("open"/"closed"), open_until (wall s, "inf"), reason,
# disabled ("1"/"0"), now (wall s), process id, ttl_s, cause ("ErrorClass|status" or ""). Returns 1
# when written.
PUBLISH_LUA = """
local cur = redis.call('HMGET', KEYS[1], 'state', 'open_until')
local now = tonumber(ARGV[5])
local cur_until = tonumber(cur[2] or '0') or 0
if cur[2] == 'inf' then cur_until = math.huge end
local new_until = tonumber(ARGV[2]) or 0
if ARGV[2] == 'inf' then new_until = math.huge end
if ARGV[1] == 'open' then
  if cur[1] == 'open' and cur_until >= new_until then return 0 end
else
  if cur[1] == 'open' and cur_until > now and ARGV[4] ~= '1' then return 0 end
end
redis.call('HSET', KEYS[1], 'state', ARGV[1], 'open_until', ARGV[2], 'reason', ARGV[3], 'disabled', ARGV[4],
           'changed_at', ARGV[5], 'by', ARGV[6], 'cause', ARGV[8] or '')
redis.call('HINCRBY', KEYS[1], 'trips', ARGV[1] == 'open' and 1 or 0)
redis.call('EXPIRE', KEYS[1], ARGV[7])
return 1
"""

def cause_field(cause: BaseException | None) -> str:
    """What the fleet is told of the error that opened a breaker: its class and status, no message
    (a message may quote a request or a platform's text; the reason field carries the summary)."""
    if not isinstance(cause, E.ProviderError):
        return ""
    return f"{type(cause).__name__}|{'' if cause.status is None else cause.status}"


def cause_from_field(field: str | None, reason: str, deployment_id: str) -> BaseException | None:
    """The error another process's breaker was opened by, rebuilt from `cause_field` (same class and
    status, `reason` as its message); None for an empty or unknown field."""
    name, _, status = (field or "").partition("|")
    cls = getattr(E, name, None) if name else None
    if not (isinstance(cls, type) and issubclass(cls, E.ProviderError)):
        return None
    try:
        return cls(reason, deployment=deployment_id, status=int(status) if status.isdigit() else None)
    except Exception:  # noqa: BLE001 - a class with a constructor of its own: not named, as before
        return None


# Shared breaker records outlive any open period worth remembering.
RECORD_TTL_S = 7 * 86400


class SharedCircuitBreaker(CircuitBreaker):
    """A `CircuitBreaker` whose half-open probes also need a cluster-wide probe slot."""

    def __init__(self, policy: ResiliencePolicy, deployment_id: str, shared: "SharedBreakers", *,
                 rng: random.Random | None = None) -> None:
        super().__init__(policy, deployment_id, rng=rng)
        self._shared = shared
        self._probe_slots: dict[int, list[str]] = {}  # epoch -> slot ids held by this process
        self._slots_lock = threading.Lock()
        # Samples not yet published, and the fleet's recent ones as last read (None: not read yet).
        self.unpublished: list[tuple[str, float]] = []  # ("ttft" | "latency", seconds)
        self.fleet_ttft: list[float] | None = None
        self.fleet_latency: list[float] | None = None
        renew_at_fork(self, "_slots_lock")

    def _after_fork_in_child(self) -> None:
        """Also the parent's: its probes' cluster-wide slots and the samples it has yet to publish."""
        super()._after_fork_in_child()
        self._probe_slots, self.unpublished = {}, []

    def recent_ttft(self) -> list[float]:
        """The fleet's recent TTFTs (for `hedge_delay = "p95"`); this process's until first read."""
        fleet = self.fleet_ttft
        return sorted(fleet) if fleet else super().recent_ttft()

    def snapshot(self, now: float) -> BreakerSnapshot:
        """This process's breaker, with TTFT and latency percentiles over the fleet's recent samples."""
        snap = super().snapshot(now)
        ttft, latency = self.fleet_ttft, self.fleet_latency
        if not ttft and not latency:
            return snap
        ttft, latency = sorted(ttft or []), sorted(latency or [])
        return replace(snap, p50_ttft_s=percentile(ttft, 50), p95_ttft_s=percentile(ttft, 95),
                       p50_latency_s=percentile(latency, 50), p95_latency_s=percentile(latency, 95))

    def acquire(self, now: float) -> Permit | None:
        permit = super().acquire(now)
        if permit is None or not permit.probe:
            return permit
        slot = self._shared.take_probe(self.deployment_id, self.policy)
        if slot is False:
            super().release(permit)
            return None
        if slot:
            with self._slots_lock:
                self._probe_slots.setdefault(permit.epoch, []).append(slot)
        return permit

    def _give_back(self, permit: Permit | None) -> None:
        if permit is None or not permit.probe:
            return
        with self._slots_lock:
            slots = self._probe_slots.get(permit.epoch)
            slot = slots.pop() if slots else None
            if slots is not None and not slots:
                del self._probe_slots[permit.epoch]
        if slot:
            self._shared.give_probe(self.deployment_id, slot)

    def release(self, permit: Permit | None) -> None:
        super().release(permit)
        self._give_back(permit)

    def record(self, now: float, outcome: str, *, permit: Permit | None = None, **kw: Any) -> Transition | None:
        transition = super().record(now, outcome, permit=permit, **kw)
        self._give_back(permit)
        if outcome != "caller":
            for kind in ("ttft", "latency"):
                value = kw.get(f"{kind}_s")
                if value is not None:
                    with self._slots_lock:
                        if len(self.unpublished) < 2 * SAMPLES_KEPT:
                            self.unpublished.append((kind, float(value)))
        return transition

    def take_unpublished(self) -> list[tuple[str, float]]:
        with self._slots_lock:
            samples, self.unpublished = self.unpublished, []
        return samples


class SharedBreakers:
    """Publishes this process's breaker transitions and adopts the fleet's open deadlines."""

    def __init__(self, state: SharedState, *, wall: Callable[[], float] = time.time,
                 mono: Callable[[], float] = time.monotonic) -> None:
        self.state = state
        self._wall = wall
        self._mono = mono
        self._owner = uuid.uuid4().hex[:12]
        self._registry: Any = None
        self._deployments: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.fleet: dict[str, dict[str, Any]] = {}  # last read: deployment -> shared record
        self.adopted = 0  # open deadlines taken from another process
        # Runs a publish's or a probe slot's give-back round trip later, off the caller's thread
        # (`AsyncClient` sets its `Offload.submit`: in order, on one worker thread); None: at once.
        self.later: Callable[..., None] | None = None
        # The client's `LoadBalancer`: each sync also publishes this process's in-flight count and
        # estimate per deployment and reads the others' (same round trip; docs/state.md, "Load").
        self.balancer: Any = None
        self._stale_load: list[tuple[str, str]] = []  # (hash key, field) of processes gone quiet, to HDEL
        renew_at_fork(self, "_stop")

    def _after_fork_in_child(self) -> None:
        """A forked child publishes under its own owner id, and runs its own sync thread if the parent
        ran one (the parent's does not exist in the child)."""
        self._owner = uuid.uuid4().hex[:12]
        if self._thread is not None and not self._stop.is_set():
            self._thread = threading.Thread(target=self._loop, name="llmroute-state-breakers", daemon=True)
            self._thread.start()

    def key(self, deployment_id: str) -> str:
        return self.state.key("breakers", deployment_id)

    def factory(self, policy: ResiliencePolicy, deployment_id: str, *,
                rng: random.Random | None = None) -> SharedCircuitBreaker:
        if deployment_id not in self._deployments:
            self._deployments.append(deployment_id)
        return SharedCircuitBreaker(policy, deployment_id, self, rng=rng)

    def attach(self, registry: Any, deployment_ids: Iterable[str]) -> None:
        """Watch `registry`'s breakers (those of `deployment_ids` and any created later)."""
        self._registry = registry
        for deployment_id in deployment_ids:
            if deployment_id not in self._deployments:
                self._deployments.append(deployment_id)
        self.sync_now()
        self._thread = threading.Thread(target=self._loop, name="llmroute-state-breakers", daemon=True)
        self._thread.start()

    # -- publish --------------------------------------------------------------------------------
    def publish(self, transition: Transition) -> None:
        if transition.to_state not in ("open", "closed"):
            return
        now_wall, now_mono = self._wall(), self._mono()
        until = "0"
        if transition.to_state == "open" and transition.open_until is not None:
            until = "inf" if math.isinf(transition.open_until) else repr(now_wall + (transition.open_until - now_mono))
        args = [transition.to_state, until, transition.reason[:300], "1" if transition.disabled else "0",
                repr(now_wall), self._owner, RECORD_TTL_S, cause_field(transition.cause)]
        key = self.key(transition.deployment_id)
        if self.later is not None:
            self.later(self._send_publish, key, args)
        else:
            self._send_publish(key, args)

    def _send_publish(self, key: str, args: list[Any]) -> None:
        try:
            script = self.state.script("breaker_publish", PUBLISH_LUA)
            self.state.run(lambda client: script(keys=[key], args=args, client=client))
        except Unavailable:
            pass  # this process's breaker still protects this process

    # -- probes ---------------------------------------------------------------------------------
    def take_probe(self, deployment_id: str, policy: ResiliencePolicy) -> "str | Literal[False] | None":
        """A cluster-wide probe slot id; False when the fleet's probes are all out; None without Redis."""
        key = self.state.key("breakers", deployment_id + ":probes")
        slot = f"{self._owner}:{uuid.uuid4().hex[:8]}"
        args = [0, 0, policy.half_open_probes, 0, max(1.0, policy.deadline_s + 5.0), slot, 0]
        try:
            script = self.state.script("admit", ADMIT_LUA)
            reply = self.state.run(lambda client: script(keys=[key + ":r", key + ":t", key], args=args, client=client))
        except Unavailable:
            return None
        return slot if int(reply[0]) == 1 else False

    def give_probe(self, deployment_id: str, slot: str) -> None:
        if self.later is not None:
            self.later(self._send_give_probe, deployment_id, slot)
        else:
            self._send_give_probe(deployment_id, slot)

    def _send_give_probe(self, deployment_id: str, slot: str) -> None:
        key = self.state.key("breakers", deployment_id + ":probes")
        try:
            self.state.run(lambda client: client.zrem(key, slot))
        except Unavailable:
            pass  # expires with its lease

    # -- adopt ----------------------------------------------------------------------------------
    def sync_now(self) -> bool:
        """Read the fleet's breakers (one round trip) and hold open what another process opened.
        False when Redis did not answer."""
        registry = self._registry
        if registry is None:
            return False
        deployments = list(self._deployments)
        keys = [self.key(d) for d in deployments]
        breakers = [registry.breaker(d) for d in deployments]
        outgoing = [b.take_unpublished() if isinstance(b, SharedCircuitBreaker) else [] for b in breakers]
        balancer = self.balancer
        mine = balancer.published(deployments) if balancer is not None else None
        load_ttl = max(2.0, 8 * self.state.config.breaker_sync_s)
        stale, self._stale_load = self._stale_load, []
        wall_at_send = self._wall()

        def read(client: Any) -> Any:
            pipe = client.pipeline(transaction=False)
            for k, samples in zip(keys, outgoing):
                for kind in ("ttft", "latency"):
                    values = [repr(v) for what, v in samples if what == kind]
                    if values:
                        pipe.lpush(f"{k}:{kind}", *values)
                        pipe.ltrim(f"{k}:{kind}", 0, SAMPLES_KEPT - 1)
                        pipe.expire(f"{k}:{kind}", RECORD_TTL_S)
            for key, stale_field in stale:
                pipe.hdel(key, stale_field)
            if mine is not None:
                for k, value in zip(keys, mine):
                    pipe.hset(f"{k}:load", self._owner, f"{value}|{wall_at_send + load_ttl!r}")
                    pipe.expire(f"{k}:load", int(load_ttl) + 60)
            for k in keys:
                pipe.hgetall(k)
                pipe.lrange(f"{k}:ttft", 0, -1)
                pipe.lrange(f"{k}:latency", 0, -1)
                if mine is not None:
                    pipe.hgetall(f"{k}:load")
            width = 3 if mine is None else 4
            return pipe.execute()[-width * len(keys):]

        try:
            replies = self.state.run(read)
        except Unavailable:
            return False
        width = 3 if mine is None else 4
        rows = replies[0::width]
        if mine is not None:
            self._adopt_load(deployments, keys, replies[3::width])
        for b, ttft, latency in zip(breakers, replies[1::width], replies[2::width]):
            if isinstance(b, SharedCircuitBreaker):
                b.fleet_ttft = [float(v) for v in ttft] or None
                b.fleet_latency = [float(v) for v in latency] or None
        now_wall, now_mono = self._wall(), self._mono()
        fleet = {}
        for deployment_id, raw in zip(deployments, rows):
            if not raw:
                continue
            rec = {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
                   for k, v in raw.items()}
            fleet[deployment_id] = rec
            if rec.get("state") != "open":
                continue
            until_wall = math.inf if rec.get("open_until") == "inf" else float(rec.get("open_until") or 0)
            if until_wall <= now_wall:
                continue
            until_mono = math.inf if math.isinf(until_wall) else now_mono + (until_wall - now_wall)
            breaker = registry.breaker(deployment_id)
            local_until = breaker.open_until(now_mono)
            if local_until is not None and local_until >= until_mono - 0.05:
                continue
            if rec.get("by") == self._owner and local_until is not None:
                continue
            reason = f"opened by another process: {rec.get('reason', '')}"
            breaker.extend_open(now_mono, until_mono, reason=reason,
                                cause=cause_from_field(rec.get("cause"), reason, deployment_id))
            self.adopted += 1
        self.fleet = fleet
        return True

    def _adopt_load(self, deployments: list[str], keys: list[str], rows: list[Any]) -> None:
        """Hand the other processes' in-flight counts and estimates to the balancer; note expired fields."""
        now_wall, now_mono = self._wall(), self._mono()
        for deployment_id, key, raw in zip(deployments, keys, rows):
            others = []
            for owner, value in (raw or {}).items():
                owner = owner.decode() if isinstance(owner, bytes) else owner
                value = value.decode() if isinstance(value, bytes) else value
                *fields, expires = value.split("|")
                try:
                    if float(expires) < now_wall:
                        self._stale_load.append((f"{key}:load", owner))
                        continue
                except ValueError:
                    continue
                if owner != self._owner:
                    others.append("|".join(fields))
            self.balancer.adopt(deployment_id, others, now_mono)

    def _loop(self) -> None:
        interval = self.state.config.breaker_sync_s
        while not self._stop.wait(interval):
            try:
                self.sync_now()
            except Exception:  # noqa: BLE001 - the sync thread must keep running
                log.exception("shared state: breaker sync failed")

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
