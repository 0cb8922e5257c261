"""Client-side limits (`rpm`, `tpm`, `max_concurrency` per pool and deployment) held across processes.

`SharedLimits` has the interface of `resilience.limits.DeploymentLimits` and the same semantics
(token buckets holding one minute's worth, a bulkhead), but the counters live in Redis and one Lua
script decides and takes atomically, on Redis's clock: one round trip per admission. A release is
sent by a background thread at once (a pipeline of ZREMs), off the call's path. A concurrency slot is a member of a sorted set scored by its lease's expiry; each
process renews the slots it holds every `lease_s / 3`, so the slots of a process that died (SIGKILL,
OOM) expire after at most `lease_s` and are taken back by the next admission.

When Redis is unavailable the local `DeploymentLimits` decides (per process: N processes may then
admit up to N times the limit) or, with `on_unavailable = "refuse"`, the call is refused.
"""

from __future__ import annotations

import itertools
import logging
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from llmroute._runtime.forksafe import renew_at_fork
from llmroute._runtime.lifecycle import start_daemon
from llmroute.resilience.limits import Admission, DeploymentLimits, Lease
from llmroute.resilience.policy import ResiliencePolicy
from llmroute.state.redis_state import SharedState, Unavailable

__all__ = ["SharedLimits", "SharedLease", "LimitRequest", "ADMIT_LUA"]

log = logging.getLogger("llmroute.state")

# admit(K, A). K: request bucket, token bucket, slots. A: rpm, tpm, max_concurrency (0 = none), tokens,
# lease_s, slot id, poll_s. Returns {1} (granted, all taken) or {0, wait_s, reason}.
# free_released(slots, A, first): removes the slot ids A[first..]: slots this process released whose
# ZREM had not been sent yet, so a process's own finished calls never count against its next one.
ADMIT_FUNCTION_LUA = """
local function free_released(slots, ARGV, first)
  for i = first, #ARGV do redis.call('ZREM', slots, ARGV[i]) end
end
local function admit(KEYS, ARGV)
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local rpm = tonumber(ARGV[1]); local tpm = tonumber(ARGV[2]); local conc = tonumber(ARGV[3])
local tokens = tonumber(ARGV[4]); local lease = tonumber(ARGV[5]); local poll = ARGV[7]
if conc > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  if redis.call('ZCARD', KEYS[3]) >= conc then return {0, poll, 'concurrency limit ' .. ARGV[3] .. ' reached'} end
end
local function level(key, rate, cap)
  local v = redis.call('HMGET', key, 't', 'ts')
  local tok = tonumber(v[1]); local ts = tonumber(v[2])
  if tok == nil or ts == nil then return cap end
  if now > ts then tok = math.min(cap, tok + (now - ts) * rate / 60) end
  return tok
end
local wait = 0; local reason = ''
local rtok = 0; local ttok = 0; local tneed = 0
if rpm > 0 then
  rtok = level(KEYS[1], rpm, math.max(1, rpm))
  if rtok < 1 - 1e-9 then wait = (1 - rtok) / (rpm / 60); reason = 'requests-per-minute limit' end
end
if tpm > 0 and tokens > 0 then
  local cap = math.max(1, tpm)
  tneed = math.min(tokens, cap)
  ttok = level(KEYS[2], tpm, cap)
  if ttok < tneed - 1e-9 then
    local w = (tneed - ttok) / (tpm / 60)
    if w > wait then wait = w; reason = 'tokens-per-minute limit' end
  end
end
if wait > 0 then return {0, tostring(wait), reason} end
if rpm > 0 then
  redis.call('HSET', KEYS[1], 't', tostring(rtok - 1), 'ts', tostring(now)); redis.call('EXPIRE', KEYS[1], 180)
end
if tneed > 0 then
  redis.call('HSET', KEYS[2], 't', tostring(ttok - tneed), 'ts', tostring(now)); redis.call('EXPIRE', KEYS[2], 180)
end
if conc > 0 then
  redis.call('ZADD', KEYS[3], now + lease, ARGV[6]); redis.call('EXPIRE', KEYS[3], math.ceil(lease) + 60)
end
return {1}
end
"""
ADMIT_LUA = ADMIT_FUNCTION_LUA + "free_released(KEYS[3], ARGV, 8)\nreturn admit(KEYS, ARGV)\n"

# KEYS: slots. ARGV: lease_s, slot ids... Pushes each held slot's expiry out (only if still there).
RENEW_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
for i = 2, #ARGV do redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[1]), ARGV[i]) end
redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[1])) + 60)
return 1
"""


# Releases are sent at most this long after the call ends, batched into one pipeline.
RELEASE_BATCH_S = 0.01


@dataclass(frozen=True)
class LimitRequest:
    """One admission's keys and arguments for `ADMIT_LUA` (sent alone, or with a budget reservation)."""

    pool: str
    deployment_id: str
    tokens: int
    keys: list[str]
    args: list[Any]
    holds_slot: bool
    limits: Any = field(default=None, compare=False, repr=False)  # the SharedLimits that made it


@dataclass
class SharedLease(Lease):
    """A lease whose slot (if any) is held in Redis (`slots_key`), or locally when `local_lease` is set."""

    slots_key: str | None = None
    slot_id: str | None = None
    local_lease: Lease | None = None


class SharedLimits:
    """`DeploymentLimits` over Redis, with the local one as the fallback."""

    def __init__(self, state: SharedState, local: DeploymentLimits) -> None:
        self.state = state
        self.local = local
        self._held: dict[str, set[str]] = {}  # slots key -> slot ids this process holds
        self._lock = threading.Lock()
        self._renewer: threading.Thread | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._to_release: list[tuple[str, str]] = []  # (slots key, slot id) to ZREM
        self._owner = uuid.uuid4().hex[:12]
        self._slot_numbers = itertools.count(1)
        renew_at_fork(self, "_lock", "_stop", "_wake")

    def _after_fork_in_child(self) -> None:
        """A forked child: the slots held (and being released) are the parent's, renewed by the parent's
        thread; the child takes slots under its own owner id and starts its own renewer when it holds one."""
        self._held, self._to_release, self._renewer = {}, [], None
        self._owner = uuid.uuid4().hex[:12]
        self._slot_numbers = itertools.count(1)

    def policy(self, pool: str, deployment_id: str) -> ResiliencePolicy:
        return self.local.policy(pool, deployment_id)

    def _keys(self, pool: str, deployment_id: str) -> list[str]:
        scope = f"limits:{pool}:{deployment_id}"
        return [self.state.key(scope, "rpm"), self.state.key(scope, "tpm"), self.state.key(scope, "slots")]

    def request(self, deployment_id: str, *, pool: str = "interactive", tokens: int = 0) -> "LimitRequest" | None:
        """What `ADMIT_LUA` needs to admit one call to `deployment_id` in `pool`; None when no limit applies."""
        p = self.local.policy(pool, deployment_id)
        if not (p.rpm or p.tpm or p.max_concurrency):
            return None
        slot_id = f"{self._owner}:{next(self._slot_numbers)}"  # (uuid4 per call costs a getrandom syscall)
        args = [p.rpm or 0, p.tpm or 0, p.max_concurrency or 0, int(tokens), self.state.config.lease_s, slot_id,
                p.queue_poll_s]
        return LimitRequest(pool, deployment_id, int(tokens), self._keys(pool, deployment_id), args,
                            bool(p.max_concurrency), self)

    def take_released(self, slots_key: str) -> list[str]:
        """Slot ids of `slots_key` this process released and has not yet removed from Redis: the next
        admission script removes them first (`free_released`), so they never count against it."""
        with self._lock:
            mine = [slot for key, slot in self._to_release if key == slots_key]
            if mine:
                self._to_release = [(k, slot) for k, slot in self._to_release if k != slots_key]
        return mine

    def unsent(self, slots_key: str, slots: list[str]) -> None:
        """`take_released`'s slots, when the script carrying them did not run: back to the release queue."""
        if slots:
            with self._lock:
                self._to_release.extend((slots_key, slot) for slot in slots)
            self._wake.set()

    def try_acquire(self, now: float, deployment_id: str, *, pool: str = "interactive", tokens: int = 0) -> Admission:
        req = self.request(deployment_id, pool=pool, tokens=tokens)
        if req is None:
            return Admission(True, lease=SharedLease(pool, deployment_id))
        freed = self.take_released(req.keys[2]) if req.holds_slot else []
        try:
            script = self.state.script("admit", ADMIT_LUA)
            reply = self.state.run(lambda client: script(keys=req.keys, args=[*req.args, *freed], client=client))
        except Unavailable:
            self.unsent(req.keys[2], freed)
            self.state.fallback("client-side limits")
            admission = self.local.try_acquire(now, deployment_id, pool=pool, tokens=tokens)
            if not admission.granted:
                return admission
            return Admission(True, lease=SharedLease(pool, deployment_id, local_lease=admission.lease))
        return self.admission(req, reply)

    def admission(self, req: "LimitRequest", reply: Any) -> Admission:
        """The Admission for `ADMIT_LUA`'s reply to `req`; a granted slot is renewed from now on."""
        if int(reply[0]) != 1:
            reason = reply[2].decode() if isinstance(reply[2], bytes) else str(reply[2])
            return Admission(False, float(reply[1]), reason)
        lease = SharedLease(req.pool, req.deployment_id)
        if req.holds_slot:
            slots_key, slot_id = req.keys[2], req.args[5]
            lease.slots_key, lease.slot_id = slots_key, slot_id
            with self._lock:
                self._held.setdefault(slots_key, set()).add(slot_id)
                if self._renewer is None:  # none at interpreter exit: the lease ends by its TTL
                    self._renewer = start_daemon(self._renew_loop, "llmroute-state-leases")
        return Admission(True, lease=lease)

    def release(self, lease: Lease | None) -> None:
        if lease is None or lease.released:
            return
        lease.released = True
        if not isinstance(lease, SharedLease):
            self.local.release(lease)
            return
        if lease.local_lease is not None:
            self.local.release(lease.local_lease)
            return
        if lease.slots_key is None or lease.slot_id is None:  # both set together, by admit
            return
        with self._lock:
            held = self._held.get(lease.slots_key)
            if held is not None:
                held.discard(lease.slot_id)
            self._to_release.append((lease.slots_key, lease.slot_id))
        self._wake.set()  # the background thread frees it now, off the call's path

    def in_flight(self, deployment_id: str, *, pool: str = "interactive") -> int:
        """Slots held cluster-wide (expired leases excluded); the local count while Redis is away."""
        key = self._keys(pool, deployment_id)[2]
        try:
            import time as _time

            return int(self.state.run(lambda client: client.zcount(key, _time.time(), "+inf")))
        except Unavailable:
            return self.local.in_flight(deployment_id, pool=pool)

    def _renew_loop(self) -> None:
        """Frees released slots as soon as they are released (one pipeline) and renews held ones
        every `lease_s / 3`."""
        import time

        interval = max(0.05, self.state.config.lease_s / 3.0)
        renew_at = time.monotonic() + interval
        while not self._stop.is_set():
            if self._wake.wait(max(0.0, renew_at - time.monotonic())):
                self._stop.wait(RELEASE_BATCH_S)  # gather the releases of calls ending together
            self._wake.clear()
            if self._stop.is_set():
                return  # close() frees what is left
            try:
                self._free_released()
                if time.monotonic() >= renew_at:
                    renew_at = time.monotonic() + interval
                    self._renew()
            except Exception:  # noqa: BLE001 - the renewer must keep running
                log.exception("shared state: releasing or renewing concurrency slots failed")

    def _free_released(self) -> None:
        with self._lock:
            todo, self._to_release = self._to_release, []
        if not todo:
            return

        def go(client: Any) -> Any:
            pipe = client.pipeline(transaction=False)
            for key, slot in todo:
                pipe.zrem(key, slot)
            return pipe.execute()

        try:
            self.state.run(go)
        except Unavailable:
            pass  # not renewed any more: those slots free themselves when their leases end

    def _renew(self) -> None:
        with self._lock:
            held = {k: list(v) for k, v in self._held.items() if v}
        for key, slots in held.items():
            try:
                script = self.state.script("renew", RENEW_LUA)
                self.state.run(lambda client: script(keys=[key], args=[self.state.config.lease_s, *slots],
                                                     client=client))
            except Unavailable:
                return
            except Exception:  # noqa: BLE001 - the renewer must keep running
                log.exception("shared state: renewing concurrency leases failed")

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._renewer is not None:
            self._renewer.join(timeout=5)
        self._free_released()
