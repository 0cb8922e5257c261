"""Budget counters in Redis: reserve-then-settle, so concurrent calls in many processes share one cap.

Each (budget, group, window) is one integer counter: tokens, or money in units of 1e-9 of the
budget's currency (exact for every price in the price book; a reservation is rounded up). Before a
call, one Lua script checks every budget the call counts toward and, if none refuses, adds the
call's estimate (an upper bound: the whole prompt uncached plus `max_tokens`) to all of them
atomically: concurrent calls see each other's reservations, so they cannot all pass a nearly spent
budget. Each attempt then adds what it really cost, and the call's end takes the reservation back;
both are sent by a background thread, batched, so the call waits for one round trip (the reserve).

Overshoot bound (documented in docs/state.md): with Redis answering, a budget passes its cap only by
what the calls admitted under it spent beyond their estimates (an attempt that outran `max_tokens`
or an unset `max_tokens` default of 1024, a retry or failover attempt, which is not reserved; at
most the in-flight calls' extra attempts). A process that dies between reserve and settle leaves its
reservation counted until the window ends (it can only refuse early, never overshoot).

While Redis is unavailable, each process counts alone (N processes: up to N times the cap in that
window, on top of the bound above); spend recorded meanwhile is kept and added to Redis when it
returns, so the shared counters end up with every attempt's cost.
"""

from __future__ import annotations

import logging
import threading
from decimal import ROUND_CEILING, ROUND_HALF_UP, Decimal
from typing import Any, Sequence

from llmroute._runtime.forksafe import renew_at_fork
from llmroute._runtime.lifecycle import start_daemon
from llmroute.state.shared_limits import ADMIT_FUNCTION_LUA, LimitRequest
from llmroute.state.redis_state import SharedState, Unavailable

__all__ = ["SharedBudgetCounters", "RESERVE_LUA", "UNITS_PER_CURRENCY"]

log = logging.getLogger("llmroute.state")

UNITS_PER_CURRENCY = Decimal(10) ** 9
# Settlements (spend, reservations taken back) are sent this often, in one pipeline, off the call path.
SETTLE_INTERVAL_S = 0.05

# reserve(K, A). K: counters. A: reserve ("1"/"0"), ttl_s, then (limit, need, mode) per key; mode
# "refuse", "downgrade" or "count" (counted, not judged). Returns {0} (allow), {1, i, spent}
# (downgrade by budget i) or {2, i, spent} (refused by budget i; nothing reserved).
RESERVE_FUNCTION_LUA = """
local function reserve(KEYS, ARGV)
local down = 0; local down_spent = '0'
for i = 1, #KEYS do
  local spent = tonumber(redis.call('GET', KEYS[i]) or '0')
  local limit = tonumber(ARGV[3 * i]); local need = tonumber(ARGV[3 * i + 1]); local mode = ARGV[3 * i + 2]
  if spent + need > limit then
    if mode == 'refuse' then return {2, i, tostring(spent)} end
    if mode == 'downgrade' and down == 0 then down = i; down_spent = tostring(spent) end
  end
end
if ARGV[1] == '1' then
  for i = 1, #KEYS do
    redis.call('INCRBY', KEYS[i], ARGV[3 * i + 1]); redis.call('EXPIRE', KEYS[i], ARGV[2])
  end
end
if down > 0 then return {1, down, down_spent} end
return {0}
end
"""
RESERVE_LUA = RESERVE_FUNCTION_LUA + "return reserve(KEYS, ARGV)\n"


# One round trip before sending: KEYS: the budget counters, then `ADMIT_LUA`'s three keys. ARGV: the
# number of counters, `RESERVE_LUA`'s arguments, then `ADMIT_LUA`'s. The budgets are checked (and the
# estimate reserved) first; only when none refuses or downgrades are the limits checked and taken.
# Returns `RESERVE_LUA`'s refusal or downgrade, or {0, 0, '0', <ADMIT_LUA's reply>}.
RESERVE_AND_ADMIT_LUA = RESERVE_FUNCTION_LUA + ADMIT_FUNCTION_LUA + """
local n = tonumber(ARGV[1]); local nb = 2 + 3 * n
local bk, ba, lk, la = {}, {}, {}, {}
for i = 1, n do bk[i] = KEYS[i] end
for i = 1, 3 do lk[i] = KEYS[n + i] end
for i = 1, nb do ba[i] = ARGV[1 + i] end
for i = 1, #ARGV - 1 - nb do la[i] = ARGV[1 + nb + i] end
free_released(lk[3], la, 8)
local b = reserve(bk, ba)
if b[1] ~= 0 then return b end
local a = admit(lk, la)
return {0, 0, '0', a[1], a[2] or '0', a[3] or ''}
"""


def to_units(amount: Decimal | int, *, money: bool, up: bool = False) -> int:
    if not money:
        return int(amount)
    scaled = Decimal(amount) * UNITS_PER_CURRENCY
    return int(scaled.to_integral_value(rounding=ROUND_CEILING if up else ROUND_HALF_UP))


def from_units(units: int, *, money: bool) -> Decimal | int:
    return (Decimal(units) / UNITS_PER_CURRENCY).normalize() if money else int(units)


def ttl_of(period: str) -> int:
    return 3 * 86400 if period == "daily" else 35 * 86400


class SharedBudgetCounters:
    """The Redis side of `BudgetBook`. Keys share the hash tag `{budgets}` (one script, one slot)."""

    def __init__(self, state: SharedState) -> None:
        self.state = state
        self._lock = threading.Lock()
        self._pending: dict[str, tuple[int, int]] = {}  # key -> (units, ttl) not yet sent to Redis
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        renew_at_fork(self, "_lock", "_stop")

    def _after_fork_in_child(self) -> None:
        """A forked child: the pending settlements are the parent's calls' (the parent sends them); the
        child's first settlement starts its own sender thread."""
        self._pending, self._flusher = {}, None

    def key(self, name: str, group: Sequence[Any], window: Sequence[int]) -> str:
        parts = [name, *("" if g is None else str(g) for g in group), "-".join(f"{w:02d}" for w in window)]
        return self.state.key("budgets", "|".join(p.replace("|", "/") for p in parts))

    def reserve(self, items: list[tuple[str, int, int, str]], ttl_s: int, *, reserve: bool,
                admit: LimitRequest | None = None) -> tuple[int, int, int, list[Any] | None]:
        """items: (key, limit units, need units, mode). Returns (verdict, 1-based index, spent units).
        `admit` (a `limits.LimitRequest`): when the budgets allow the call, its client-side limits are
        taken in the same script (`RESERVE_AND_ADMIT_LUA`), and `ADMIT_LUA`'s reply is returned as a
        fourth element (None when the budgets refused or downgraded: nothing was taken). With
        `cluster = true` the two are on different slots, so `admit` is not sent. Raises Unavailable."""
        keys = [k for k, *_ in items]
        args: list[Any] = ["1" if reserve else "0", ttl_s]
        for _, limit, need, mode in items:
            args += [limit, need, mode]
        freed: list[str] = []
        freed_from: tuple[Any, str] | None = None  # (SharedLimits, slots key) `freed` goes back to if unsent
        if admit is not None and not self.state.config.cluster:
            if admit.holds_slot and admit.limits is not None:
                freed_from = (admit.limits, admit.keys[2])
                freed = admit.limits.take_released(admit.keys[2])  # this process's released slots go first
            keys, args = keys + admit.keys, [len(items), *args, *admit.args, *freed]
            script = self.state.script("budget_reserve_admit", RESERVE_AND_ADMIT_LUA)
        else:
            admit = None
            script = self.state.script("budget_reserve", RESERVE_LUA)
        try:
            reply = self.state.run(lambda client: script(keys=keys, args=args, client=client))
        except Unavailable:
            if freed_from is not None:
                freed_from[0].unsent(freed_from[1], freed)
            raise
        verdict = int(reply[0])
        if verdict == 0:
            return (0, 0, 0, reply[3:] if admit is not None else None)
        return verdict, int(reply[1]), int(float(reply[2])), None

    def add(self, deltas: list[tuple[str, int, int]]) -> None:
        """(key, units, ttl): add spend (or take back a reservation, with negative units). Off the
        call's path: a background thread sends what accumulated every `SETTLE_INTERVAL_S` in one
        pipeline (a reservation and the spend that replaces it go in the same one, so a counter is
        never lower than the truth); what Redis could not take is sent when it answers again."""
        with self._lock:
            for key, units, ttl in deltas:
                old = self._pending.get(key, (0, ttl))[0]
                self._pending[key] = (old + units, ttl)
            if self._flusher is None:  # none at interpreter exit: close() sends what is pending
                self._flusher = start_daemon(self._flush_loop, "llmroute-state-budgets")

    def flush(self) -> bool:
        """Send the pending settlements now; False when Redis did not take them."""
        try:
            self.state.run(self._send_pending)
            return True
        except Unavailable:
            return False

    def _flush_loop(self) -> None:
        while not self._stop.wait(SETTLE_INTERVAL_S):
            if self._pending:
                try:
                    self.flush()
                except Exception:  # noqa: BLE001 - the settler must keep running
                    log.exception("shared state: sending budget settlements failed")

    def close(self) -> None:
        """Stop the settler and send what is pending (before the connection is closed)."""
        self._stop.set()
        if self._flusher is not None:
            self._flusher.join(timeout=5)
        if self._pending:
            self.flush()

    def seed(self, values: list[tuple[str, int, int]]) -> None:
        """Set counters Redis does not have yet (SET NX): the first process to start after a Redis
        restart seeds them from the ledger; later ones change nothing."""
        def go(client: Any) -> Any:
            pipe = client.pipeline(transaction=False)
            for key, units, ttl in values:
                pipe.set(key, units, nx=True, ex=ttl)
            return pipe.execute()

        try:
            self.state.run(go)
        except Unavailable:
            pass

    def _send_pending(self, client: Any) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
        try:
            if pending:
                pipe = client.pipeline(transaction=False)
                for key, (units, ttl) in pending.items():
                    pipe.incrby(key, units)
                    pipe.expire(key, ttl)
                pipe.execute()
        except BaseException:
            if pending:
                with self._lock:
                    for key, (units, ttl) in pending.items():
                        old = self._pending.get(key, (0, ttl))[0]
                        self._pending[key] = (old + units, ttl)
            raise
