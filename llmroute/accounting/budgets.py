"""Budgets and request guards: refuse, or downgrade, a call before it is sent.

Config (TOML):

    [[budgets]]
    name = "free-tier-daily"
    when = { metadata = { plan = "free" } }   # which calls count; also `feature = "chat"` or a list
    per = ["metadata.tenant"]                 # one counter per tenant (also "feature"); optional
    period = "daily"                          # daily | monthly, UTC calendar windows
    max_cost = 5                              # money cap, in `currency` ...
    currency = "USD"
    # max_tokens = 2_000_000                  # ... or a token cap (input + output tokens)
    action = "downgrade"                      # refuse (default) | downgrade
    downgrade_tier = "small"                  # with action = "downgrade"

    [guards."summarize"]                      # per feature; [guards."*"] applies to the others
    max_input_tokens = 8000
    max_tokens = 1024

Semantics: before a call, `BudgetBook.check` adds the call's *estimate* (prompt tokens plus
`max_tokens` at the deployment's price, all input uncached: an upper bound) to what the window has
spent. If that passes a `refuse` budget's cap, `BudgetExceededError` names the budget, its limit and
the spend. If it passes a `downgrade` budget's cap, the verdict says to use `downgrade_tier`
instead (the route should say so); a call already on that tier is allowed. After the call,
`record` (or `record_ledger`) adds what it actually cost. At start, `seed_from_ledger` reloads the
current windows from an existing ledger so a restart does not reset the spend.

Money spent in another currency than the budget's is converted with `[pricing.exchange_rates]`; a
call with no price (`pricing.strict = false`) counts toward token caps only.

Reserve-then-settle: `check(..., reserve=True)` (what the client does) also adds the estimate to
every counter the call counts toward and returns it as `verdict.reservation`; each attempt's
`record` adds its real cost and `release(reservation)` at the call's end takes the estimate back.
Concurrent calls therefore see each other's estimates. With a `shared` counter store
(`state.budgets.SharedBudgetCounters`, `[state] backend = "redis"`) the check and the reservation
are one atomic step across every process; docs/state.md gives the overshoot bound.

`BudgetBook` is sans-I/O except `seed_from_ledger`; time is always passed in (`now`, unix seconds).
"""

from __future__ import annotations

import calendar
import logging
import os
import threading
import time
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Literal, Mapping, Sequence, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from llmroute._runtime.config_model import ConfigModel

from llmroute._runtime.forksafe import renew_at_fork
from llmroute.errors import BudgetExceededError, ConfigError, RequestGuardError
from llmroute.accounting.cost import Cost, compute_cost
from llmroute.accounting.ledger import LedgerRecord
from llmroute.accounting.sinks import read_records
from llmroute.accounting.prices import ExchangeRates, Price, to_decimal


if TYPE_CHECKING:
    from llmroute.state.shared_budgets import SharedBudgetCounters  # (loaded only with [state] backend = "redis")
    from llmroute.state.shared_limits import LimitRequest

__all__ = [
    "BudgetWhen",
    "BudgetConfig",
    "GuardConfig",
    "BudgetVerdict",
    "BudgetBook",
    "check_budget_config",
    "check_guards",
    "estimate_cost",
    "window_of",
]

log = logging.getLogger("llmroute.budgets")

DEFAULT_GUARD = "*"


class BudgetWhen(BaseModel):
    """Which calls a budget counts. Empty: every call."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    feature: Union[str, list[str], None] = None
    metadata: dict[str, str] = Field(default_factory=dict)

    @field_validator("metadata", mode="before")
    @classmethod
    def _stringify(cls, v: Any) -> Any:
        # `plan = 1` and `plan = "1"` mean the same to a user; metadata is compared as text.
        return {str(k): str(x) for k, x in v.items()} if isinstance(v, Mapping) else v

    def matches(self, feature: str | None, metadata: Mapping[str, Any]) -> bool:
        if self.feature is not None:
            wanted = [self.feature] if isinstance(self.feature, str) else self.feature
            if feature not in wanted:
                return False
        return all(k in metadata and str(metadata[k]) == v for k, v in self.metadata.items())


class BudgetConfig(ConfigModel):
    """One `[[budgets]]` entry."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    name: str = Field(min_length=1)
    when: BudgetWhen = Field(default_factory=BudgetWhen)
    # Dimensions that split the budget into one counter per value: "feature", "metadata.<key>".
    per: list[str] = Field(default_factory=list)
    period: Literal["daily", "monthly"] = "daily"
    max_cost: Decimal | None = None
    currency: Literal["USD", "CNY"] = "USD"
    max_tokens: int | None = Field(default=None, gt=0)
    action: Literal["refuse", "downgrade"] = "refuse"
    downgrade_tier: str | None = None

    @field_validator("per", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    @field_validator("per")
    @classmethod
    def _dimensions(cls, v: list[str]) -> list[str]:
        for d in v:
            if d != "feature" and not (d.startswith("metadata.") and len(d) > len("metadata.")):
                raise ValueError(f'per: {d!r} is not "feature" or "metadata.<key>"')
        return v

    @field_validator("max_cost", mode="before")
    @classmethod
    def _exact(cls, v: Any) -> Any:
        if v is None:
            return None
        d = to_decimal(v, what="max_cost")
        if d <= 0:
            raise ValueError(f"max_cost must be > 0, got {v!r}")
        return d

    @model_validator(mode="after")
    def _one_cap(self) -> "BudgetConfig":
        if (self.max_cost is None) == (self.max_tokens is None):
            raise ValueError(f"budget {self.name!r}: set exactly one of max_cost or max_tokens")
        if self.action == "downgrade" and not self.downgrade_tier:
            raise ValueError(f'budget {self.name!r}: action = "downgrade" needs downgrade_tier')
        if self.action == "refuse" and self.downgrade_tier:
            raise ValueError(f'budget {self.name!r}: downgrade_tier is set but action is "refuse"')
        return self

    @property
    def unit(self) -> str:
        return self.currency if self.max_cost is not None else "tokens"

    @property
    def limit(self) -> Decimal | int:
        if self.max_cost is not None:
            return self.max_cost
        assert self.max_tokens is not None  # the validator requires exactly one of the two
        return self.max_tokens

    def group_of(self, feature: str | None, metadata: Mapping[str, Any]) -> tuple[str | None, ...]:
        out: list[str | None] = []
        for d in self.per:
            if d == "feature":
                out.append(feature)
            else:
                v = metadata.get(d[len("metadata.") :])
                out.append(None if v is None else str(v))
        return tuple(out)


class GuardConfig(ConfigModel):
    """One `[guards."<feature>"]` table: limits checked before a call is sent."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    max_input_tokens: int | None = Field(default=None, gt=0)
    max_tokens: int | None = Field(default=None, gt=0)


def check_budget_config(
    budgets: Sequence[BudgetConfig],
    *,
    tiers: Iterable[str],
    currencies: Iterable[str] = (),
    rates: ExchangeRates | None = None,
    key: str = "budgets",
) -> None:
    """Cross-checks at config load: unique names, a known downgrade tier, and a rate for every
    currency a money budget would have to count in (`currencies`: those of the priced deployments)."""
    tiers = set(tiers)
    currencies = set(currencies)
    seen: set[str] = set()
    for i, b in enumerate(budgets):
        where = f"{key}[{i}]"
        if b.name in seen:
            raise ConfigError(f"budget name {b.name!r} is used twice", key=f"{where}.name")
        seen.add(b.name)
        if b.downgrade_tier is not None and b.downgrade_tier not in tiers:
            raise ConfigError(
                f"downgrade_tier {b.downgrade_tier!r} names no tier (known: {', '.join(sorted(tiers)) or 'none'})",
                key=f"{where}.downgrade_tier",
            )
        if b.max_cost is not None:
            for cur in sorted(currencies - {b.currency}):
                if rates is None or rates.convert(Decimal(1), cur, b.currency) is None:
                    raise ConfigError(
                        f"budget {b.name!r} is in {b.currency} but deployments bill in {cur}; "
                        f"set pricing.reporting_currency and [pricing.exchange_rates] so it can be converted",
                        key=f"{where}.currency",
                    )


def check_guards(
    guards: Mapping[str, GuardConfig], feature: str | None, *, input_tokens: int, max_tokens: int | None
) -> int | None:
    """Refuse a call whose prompt or `max_tokens` passes its feature's guard (`"*"` for features
    with none of their own). Returns the `max_tokens` to send: the caller's, or the guard's cap when
    the caller set none (so an unset `max_tokens` cannot slip past the guard)."""
    guard = guards.get(feature) if feature is not None else None
    if guard is None:
        guard = guards.get(DEFAULT_GUARD)
    if guard is None:
        return max_tokens
    name = feature if feature is not None else "(no feature)"
    if guard.max_input_tokens is not None and input_tokens > guard.max_input_tokens:
        raise RequestGuardError(
            f"feature {name!r}: the prompt has ~{input_tokens} tokens, over its guard "
            f"max_input_tokens = {guard.max_input_tokens}; nothing was sent",
            feature=feature,
            guard="max_input_tokens",
            limit=guard.max_input_tokens,
            value=input_tokens,
        )
    if guard.max_tokens is not None:
        if max_tokens is None:
            return guard.max_tokens
        if max_tokens > guard.max_tokens:
            raise RequestGuardError(
                f"feature {name!r}: max_tokens = {max_tokens} is over its guard max_tokens = "
                f"{guard.max_tokens}; nothing was sent",
                feature=feature,
                guard="max_tokens",
                limit=guard.max_tokens,
                value=max_tokens,
            )
    return max_tokens


def estimate_cost(
    price: Price | None, *, prompt_tokens: int, max_tokens: int | None, default_max_tokens: int = 1024
) -> Cost:
    """An upper-bound estimate for a call not yet sent: the whole prompt uncached at the input
    rate of its input-length tier plus `max_tokens` (or `default_max_tokens` when unset) at the
    output rate, the thinking-output rate where the price has a higher one (the call may think)."""
    thinking = price is not None and price.thinking_output_per_million is not None
    return compute_cost(
        price,
        prompt_tokens=prompt_tokens,
        completion_tokens=default_max_tokens if max_tokens is None else max_tokens,
        estimated=True,
        thinking=thinking,
    )


def window_of(period: str, now: float) -> tuple[int, ...]:
    """The UTC calendar window `now` falls in: (year, month, day) or (year, month)."""
    t = time.gmtime(now)
    return (t.tm_year, t.tm_mon, t.tm_mday) if period == "daily" else (t.tm_year, t.tm_mon)


@dataclass(frozen=True)
class BudgetVerdict:
    """`action` is "allow" or "downgrade"; a refusal is raised, not returned."""

    action: Literal["allow", "downgrade"] = "allow"
    tier: str | None = None  # the tier to use instead, when downgrading
    budget: str | None = None  # the budget that decided it
    reason: str = ""
    reservation: Reservation | None = None  # with check(reserve=True): hand it to `release` when the call ends
    admitted: Any = None  # with check(admit=...): the shared limits' reply, when they were asked


_ALLOW = BudgetVerdict()


_CounterKey = tuple[str, tuple[str | None, ...]]  # (budget name, group)


@dataclass
class Reservation:
    """A call's estimate, added to its counters by `check(reserve=True)`; `release` takes it back once."""

    local: list[tuple[_CounterKey, tuple[int, ...], Decimal | int]]  # (counter key, window, amount) in the local counters
    shared: list[tuple[str, int, int]]  # (redis key, units, ttl) in the shared counters
    released: bool = False


class BudgetBook:
    """Spend counters per (budget, group, window). Thread-safe; no clock of its own."""

    def __init__(self, budgets: Sequence[BudgetConfig], *, rates: ExchangeRates | None = None,
                 shared: SharedBudgetCounters | None = None) -> None:
        self.budgets = list(budgets)
        self.rates = rates
        self.shared = shared  # SharedBudgetCounters, or None: counters of this process only
        self._lock = threading.Lock()
        # (budget name, group) -> (window, spent); one window kept per counter: old ones drop off.
        self._spent: dict[tuple[str, tuple[str | None, ...]], tuple[tuple[int, ...], Decimal | int]] = {}
        renew_at_fork(self, "_lock")  # a forked child keeps the counters as they stood (docs/fork.md)

    def _amount_in(self, b: BudgetConfig, amount: Decimal | None, currency: str | None) -> Decimal | None:
        if amount is None or currency is None:
            return None
        if currency == b.currency:
            return amount
        converted = self.rates.convert(amount, currency, b.currency) if self.rates else None
        if converted is None:
            log.warning("budget %r: no exchange rate from %s to %s; amount not counted", b.name, currency, b.currency)
        return converted

    def _usage(self, b: BudgetConfig, amount: Decimal | None, currency: str | None, tokens: int) -> Decimal | int | None:
        return self._amount_in(b, amount, currency) if b.max_cost is not None else int(tokens)

    def _matching(self, feature: str | None, metadata: Mapping[str, Any], amount: Decimal | None,
                  currency: str | None, tokens: int
                  ) -> Iterator[tuple[BudgetConfig, _CounterKey, Decimal | int]]:  # fmt: skip
        """(budget, counter key, what this call adds) for each budget that counts it. Budgets a money
        figure cannot judge (unpriced, no exchange rate) are skipped."""
        for b in self.budgets:
            if b.when.matches(feature, metadata):
                value = self._usage(b, amount, currency, tokens)
                if value is not None:
                    yield b, (b.name, b.group_of(feature, metadata)), value

    def spent(self, name: str, now: float, *, feature: str | None = None, metadata: Mapping[str, Any] | None = None
              ) -> Decimal | int:
        """What budget `name` has spent in the window holding `now` (for the group of feature/metadata)."""
        b = next((x for x in self.budgets if x.name == name), None)
        if b is None:
            raise KeyError(name)
        key = (b.name, b.group_of(feature, metadata or {}))
        with self._lock:
            return self._current(b, key, now)

    def _current(self, b: BudgetConfig, key: tuple[str, tuple[str | None, ...]], now: float) -> Decimal | int:
        zero: Decimal | int = Decimal(0) if b.max_cost is not None else 0
        window = window_of(b.period, now)
        got = self._spent.get(key)
        return got[1] if got is not None and got[0] == window else zero

    def check(
        self,
        now: float,
        *,
        feature: str | None,
        metadata: Mapping[str, Any] | None = None,
        tier: str | None = None,
        estimated_cost: Decimal | None = None,
        currency: str | None = None,
        estimated_tokens: int = 0,
        reserve: bool = False,
        admit: LimitRequest | None = None,
    ) -> BudgetVerdict:
        """Decide before a call. Raises BudgetExceededError for a `refuse` budget; returns a
        downgrade verdict for the first `downgrade` budget it would pass (unless already on its tier).
        `reserve`: also count the estimate until `release(verdict.reservation)`. `admit` (a
        `state.limits.LimitRequest`): with shared counters, take the call's client-side limits in the
        same round trip when the budgets allow it; `verdict.admitted` is then the limits' reply."""
        metadata = metadata or {}
        matching = list(self._matching(feature, metadata, estimated_cost, currency, estimated_tokens))
        if not matching:
            return _ALLOW
        if self.shared is not None:
            verdict = self._check_shared(self.shared, now, matching, feature, metadata, tier, reserve, admit)
            if verdict is not None:
                return verdict
        downgrade: BudgetVerdict | None = None
        with self._lock:
            for b, key, need in matching:
                spent = self._current(b, key, now)
                if spent + need <= b.limit:
                    continue
                text = self._over_text(b, feature, metadata, spent, need)
                if b.action == "refuse":
                    raise BudgetExceededError(text, budget=b.name, limit=b.limit, spent=spent, unit=b.unit)
                if downgrade is None and tier != b.downgrade_tier:
                    downgrade = BudgetVerdict("downgrade", b.downgrade_tier, b.name, text + f"; downgraded to tier {b.downgrade_tier!r}")
            if not reserve:
                return downgrade or _ALLOW
            held = []
            for b, key, need in matching:
                window = window_of(b.period, now)
                self._add(key, window, need)
                held.append((key, window, need))
        reservation = Reservation(local=held, shared=[])
        if downgrade is not None:
            return BudgetVerdict(downgrade.action, downgrade.tier, downgrade.budget, downgrade.reason, reservation)
        return BudgetVerdict(reservation=reservation)

    @staticmethod
    def _over_text(b: BudgetConfig, feature: str | None, metadata: Mapping[str, Any], spent: Any, need: Any) -> str:
        group = ", ".join(f"{d}={v}" for d, v in zip(b.per, b.group_of(feature, metadata)))
        scope = f" for {group}" if group else ""
        return (f"budget {b.name!r}{scope}: {b.period} limit {_fmt(b.limit)} {b.unit}, spent {_fmt(spent)}, "
                f"this call ~{_fmt(need)}")

    def _check_shared(self, shared: SharedBudgetCounters, now: float, matching: list[tuple[BudgetConfig, _CounterKey, Decimal | int]], feature: str | None, metadata: Mapping[str, Any],
                      tier: str | None, reserve: bool, admit: LimitRequest | None = None) -> BudgetVerdict | None:
        """The check (and reservation) against the shared counters; None when they are unavailable."""
        from llmroute.state.shared_budgets import from_units, to_units, ttl_of  # shared state only ([state] backend = "redis")
        from llmroute.state.redis_state import Unavailable  # shared state only ([state] backend = "redis")

        items, held = [], []
        for b, key, need in matching:
            money = b.max_cost is not None
            rkey = shared.key(b.name, key[1], window_of(b.period, now))
            need_units = to_units(need, money=money, up=True)
            mode = "refuse" if b.action == "refuse" else ("downgrade" if tier != b.downgrade_tier else "count")
            items.append((rkey, to_units(b.limit, money=money), need_units, mode))
            held.append((rkey, -need_units, ttl_of(b.period)))
        try:
            verdict, index, spent_units, admitted = shared.reserve(items, max(t for *_, t in held),
                                                                   reserve=reserve, admit=admit)
        except Unavailable:
            shared.state.fallback("budgets")
            return None
        reservation = Reservation(local=[], shared=held) if reserve and verdict != 2 else None
        if verdict == 0:
            return BudgetVerdict(reservation=reservation, admitted=admitted)
        b, _, need = matching[index - 1]
        spent = from_units(spent_units, money=b.max_cost is not None)
        text = self._over_text(b, feature, metadata, spent, need)
        if verdict == 2:
            raise BudgetExceededError(text, budget=b.name, limit=b.limit, spent=spent, unit=b.unit)
        return BudgetVerdict("downgrade", b.downgrade_tier, b.name,
                             text + f"; downgraded to tier {b.downgrade_tier!r}", reservation)

    def release(self, reservation: "Reservation | None") -> None:
        """Take a call's reservation back (at its end; repeats are ignored)."""
        if reservation is None or reservation.released:
            return
        reservation.released = True
        if reservation.local:
            with self._lock:
                for key, window, amount in reservation.local:
                    self._add(key, window, -amount)
        if reservation.shared and self.shared is not None:  # (shared reservations come from the shared counters)
            self.shared.add(reservation.shared)

    def _add(self, key: tuple[str, tuple[str | None, ...]], window: tuple[int, ...], add: Any) -> None:
        got = self._spent.get(key)
        if got is None or got[0] < window:
            self._spent[key] = (window, add)
        elif got[0] == window:
            self._spent[key] = (window, got[1] + add)
        # A record from an older window than the counter's (late, out of order) no longer counts.

    def record(
        self,
        ts: float,
        *,
        feature: str | None,
        metadata: Mapping[str, Any] | None = None,
        amount: Decimal | None,
        currency: str | None,
        tokens: int,
    ) -> None:
        """Add what an attempt cost (ts: when it ended, unix seconds)."""
        metadata = metadata or {}
        shared = []
        with self._lock:
            for b, key, add in self._matching(feature, metadata, amount, currency, tokens):
                window = window_of(b.period, ts)
                self._add(key, window, add)
                if self.shared is not None and add:
                    from llmroute.state.shared_budgets import to_units, ttl_of  # shared state only ([state] backend = "redis")

                    shared.append((self.shared.key(b.name, key[1], window), to_units(add, money=b.max_cost is not None),
                                   ttl_of(b.period)))
        if shared and self.shared is not None:
            self.shared.add(shared)

    def record_ledger(self, rec: LedgerRecord) -> None:
        self.record(
            rec.ts,
            feature=rec.feature,
            metadata=rec.metadata,
            amount=rec.cost,
            currency=rec.currency,
            tokens=rec.input_tokens + rec.output_tokens,
        )

    def seed_from_ledger(self, path: str | os.PathLike[str], now: float) -> int:
        """Reload the current windows' spend from a ledger file (or a postgresql:// ledger); returns
        the records read. A missing file seeds nothing. With shared counters, the ones Redis lacks
        (a Redis restarted empty) are set from it."""
        is_url = isinstance(path, str) and path.startswith(("postgresql://", "postgres://"))
        if not self.budgets or (not is_url and not os.path.exists(path)):
            return 0
        monthly = any(b.period == "monthly" for b in self.budgets)
        t = time.gmtime(now)
        start = time.struct_time((t.tm_year, t.tm_mon, 1 if monthly else t.tm_mday, 0, 0, 0, 0, 0, 0))
        since = float(calendar.timegm(start))
        n = 0
        shared, self.shared = self.shared, None  # count the ledger locally, then seed Redis once
        try:
            for rec in read_records(path, since=since):
                self.record_ledger(rec)
                n += 1
        finally:
            self.shared = shared
        if shared is not None:
            from llmroute.state.shared_budgets import to_units, ttl_of  # shared state only ([state] backend = "redis")

            with self._lock:
                values = []
                for (name, group), (window, spent) in self._spent.items():
                    b = next(x for x in self.budgets if x.name == name)
                    if window == window_of(b.period, now):
                        values.append((shared.key(name, group, window), to_units(spent, money=b.max_cost is not None),
                                       ttl_of(b.period)))
            shared.seed(values)
        return n


def _fmt(x: Any) -> str:
    if isinstance(x, Decimal):
        return f"{x.normalize():f}" if x == x.to_integral() else f"{x.quantize(Decimal('0.000001')).normalize():f}"
    return str(x)
