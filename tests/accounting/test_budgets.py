"""Budgets refuse and downgrade as configured; guards refuse before sending."""

from __future__ import annotations

import calendar
import tomllib
from decimal import Decimal as D

import pydantic
import pytest

from llmroute.accounting.budgets import (
    BudgetBook,
    BudgetConfig,
    GuardConfig,
    check_budget_config,
    check_guards,
    estimate_cost,
    window_of,
)
from llmroute.accounting.ledger import LedgerRecord, SQLiteSink
from llmroute.accounting.prices import ExchangeRates, Price
from llmroute.errors import BudgetExceededError, ConfigError, RequestGuardError

NOON = float(calendar.timegm((2026, 12, 2, 12, 0, 0)))
NEXT_DAY = NOON + 86400
NEXT_MONTH = float(calendar.timegm((2027, 1, 1, 0, 0, 1)))

CONFIG = tomllib.loads(
    """
[[budgets]]
name = "free-tier-daily"
when = { metadata = { plan = "free" } }
per = "metadata.tenant"
period = "daily"
max_cost = 5
currency = "USD"
action = "downgrade"
downgrade_tier = "small"

[[budgets]]
name = "free-tier-hard"
when = { metadata = { plan = "free" } }
per = ["metadata.tenant"]
period = "daily"
max_cost = 6
currency = "USD"

[[budgets]]
name = "summarize-monthly-tokens"
when = { feature = "summarize" }
period = "monthly"
max_tokens = 10000

[guards."summarize"]
max_input_tokens = 8000
max_tokens = 1024

[guards."*"]
max_tokens = 4096
"""
)
BUDGETS = [BudgetConfig.model_validate(b) for b in CONFIG["budgets"]]
GUARDS = {k: GuardConfig.model_validate(v) for k, v in CONFIG["guards"].items()}
FREE = {"plan": "free", "tenant": "acme"}


def book() -> BudgetBook:
    return BudgetBook(BUDGETS, rates=ExchangeRates("USD", {"CNY": D("0.14")}))


def test_allow_then_downgrade_then_refuse_with_names_limits_and_spend():
    b = book()
    v = b.check(NOON, feature="chat", metadata=FREE, tier="large", estimated_cost=D("1"), currency="USD")
    assert v.action == "allow"
    b.record(NOON, feature="chat", metadata=FREE, amount=D("4.5"), currency="USD", tokens=100)
    v = b.check(NOON, feature="chat", metadata=FREE, tier="large", estimated_cost=D("1"), currency="USD")
    assert (v.action, v.tier, v.budget) == ("downgrade", "small", "free-tier-daily")
    assert "downgraded to tier 'small'" in v.reason and "tenant=acme" in v.reason
    # Already on the cheap tier: the soft budget lets it through.
    assert b.check(NOON, feature="chat", metadata=FREE, tier="small", estimated_cost=D("1"), currency="USD").action == "allow"
    b.record(NOON, feature="chat", metadata=FREE, amount=D("1"), currency="USD", tokens=100)
    with pytest.raises(BudgetExceededError) as e:
        b.check(NOON, feature="chat", metadata=FREE, tier="small", estimated_cost=D("0.6"), currency="USD")
    err = e.value
    assert (err.budget, err.limit, err.spent, err.unit) == ("free-tier-hard", D("6"), D("5.5"), "USD")
    assert "free-tier-hard" in str(err) and "limit 6 USD" in str(err) and "spent 5.5" in str(err)


def test_counters_are_per_tenant_and_only_for_matching_calls():
    b = book()
    b.record(NOON, feature="chat", metadata=FREE, amount=D("5.9"), currency="USD", tokens=1)
    other = {"plan": "free", "tenant": "globex"}
    assert b.check(NOON, feature="chat", metadata=other, estimated_cost=D("1"), currency="USD").action == "allow"
    paid = {"plan": "pro", "tenant": "acme"}
    assert b.check(NOON, feature="chat", metadata=paid, estimated_cost=D("100"), currency="USD").action == "allow"
    assert b.spent("free-tier-hard", NOON, metadata=FREE) == D("5.9")
    assert b.spent("free-tier-hard", NOON, metadata=other) == 0


def test_windows_roll_over_daily_and_monthly():
    b = book()
    b.record(NOON, feature="chat", metadata=FREE, amount=D("5.9"), currency="USD", tokens=1)
    assert b.spent("free-tier-hard", NEXT_DAY, metadata=FREE) == 0
    assert b.check(NEXT_DAY, feature="chat", metadata=FREE, estimated_cost=D("5"), currency="USD").action == "allow"
    b.record(NOON, feature="summarize", amount=None, currency=None, tokens=9000)
    assert b.spent("summarize-monthly-tokens", NEXT_DAY) == 9000
    assert b.spent("summarize-monthly-tokens", NEXT_MONTH) == 0
    assert window_of("daily", NOON) == (2026, 12, 2) and window_of("monthly", NOON) == (2026, 12)


def test_token_budget_counts_unpriced_calls_and_refuses():
    b = book()
    b.record(NOON, feature="summarize", amount=None, currency=None, tokens=9000)
    with pytest.raises(BudgetExceededError) as e:
        b.check(NOON, feature="summarize", estimated_tokens=1500)
    assert (e.value.limit, e.value.spent, e.value.unit) == (10000, 9000, "tokens")


def test_other_currencies_are_converted():
    b = book()
    b.record(NOON, feature="chat", metadata=FREE, amount=D("40"), currency="CNY", tokens=1)  # = 5.6 USD
    assert b.spent("free-tier-hard", NOON, metadata=FREE) == D("5.60")
    with pytest.raises(BudgetExceededError):
        b.check(NOON, feature="chat", metadata=FREE, estimated_cost=D("3"), currency="CNY")  # + 0.42


def test_seeded_from_an_existing_ledger(tmp_path):
    path = tmp_path / "l.db"
    with SQLiteSink(path) as sink:
        for ts, cost in ((NOON - 3600, "3"), (NOON - 60, "2.5"), (NOON - 86400 * 40, "100")):
            sink.write(LedgerRecord(ts=ts, request_id="r", feature="chat", metadata=FREE, cost=D(cost),
                                    currency="USD", priced=True, input_tokens=10, output_tokens=5))  # fmt: skip
    b = book()
    assert b.seed_from_ledger(path, NOON) == 2  # the 40-day-old record is outside every window
    assert b.spent("free-tier-hard", NOON, metadata=FREE) == D("5.5")
    assert book().seed_from_ledger(tmp_path / "missing.db", NOON) == 0


@pytest.mark.parametrize(
    "entry",
    [
        {"name": "x", "period": "daily"},  # no cap
        {"name": "x", "max_cost": 1, "max_tokens": 5},  # two caps
        {"name": "x", "max_cost": 1, "action": "downgrade"},  # no tier
        {"name": "x", "max_cost": 0},
        {"name": "x", "max_cost": 1, "period": "weekly"},
        {"name": "x", "max_cost": 1, "per": "tenant"},
        {"name": "x", "max_cost": 1, "limit": 3},
    ],
)
def test_bad_budgets_are_rejected(entry):
    with pytest.raises(pydantic.ValidationError):
        BudgetConfig.model_validate(entry)


def test_cross_checks():
    check_budget_config(BUDGETS, tiers=["small", "large"], currencies=["USD", "CNY"], rates=ExchangeRates("USD", {"CNY": D("0.14")}))
    with pytest.raises(ConfigError) as e:
        check_budget_config(BUDGETS, tiers=["large"])
    assert e.value.key == "budgets[0].downgrade_tier"
    with pytest.raises(ConfigError) as e:
        check_budget_config(BUDGETS, tiers=["small"], currencies=["CNY"])
    assert e.value.key == "budgets[0].currency"
    with pytest.raises(ConfigError):
        check_budget_config(BUDGETS + BUDGETS[:1], tiers=["small"])


def test_guards_refuse_before_sending_and_cap_unset_max_tokens():
    with pytest.raises(RequestGuardError) as e:
        check_guards(GUARDS, "summarize", input_tokens=9000, max_tokens=100)
    assert (e.value.guard, e.value.limit, e.value.value, e.value.feature) == ("max_input_tokens", 8000, 9000, "summarize")
    with pytest.raises(RequestGuardError) as e:
        check_guards(GUARDS, "summarize", input_tokens=10, max_tokens=2000)
    assert "max_tokens = 2000" in str(e.value) and "nothing was sent" in str(e.value)
    assert check_guards(GUARDS, "summarize", input_tokens=10, max_tokens=None) == 1024
    assert check_guards(GUARDS, "chat", input_tokens=10**6, max_tokens=None) == 4096  # the "*" guard
    with pytest.raises(RequestGuardError):
        check_guards(GUARDS, None, input_tokens=1, max_tokens=5000)
    assert check_guards({}, "chat", input_tokens=1, max_tokens=None) is None


def test_estimate_is_an_upper_bound():
    p = Price(D("1"), D("2"), D("0.5"), "USD", "v")
    est = estimate_cost(p, prompt_tokens=1000, max_tokens=500)
    assert est.amount == D("0.002") and est.estimated  # 1000 x 1 + 500 x 2, nothing assumed cached
    assert estimate_cost(p, prompt_tokens=0, max_tokens=None, default_max_tokens=100).amount == D("0.0002")
    assert estimate_cost(None, prompt_tokens=10, max_tokens=10).amount is None


def test_reservations_hold_concurrent_calls_to_the_cap_until_released():
    b = BudgetBook([BudgetConfig(name="d", max_cost=D("1"), currency="USD")])
    first = b.check(NOON, feature=None, estimated_cost=D("0.6"), currency="USD", reserve=True)
    with pytest.raises(BudgetExceededError):  # the first call's estimate is still reserved
        b.check(NOON, feature=None, estimated_cost=D("0.6"), currency="USD", reserve=True)
    b.record(NOON, feature=None, amount=D("0.1"), currency="USD", tokens=0)  # what the first really cost
    b.release(first.reservation)
    b.release(first.reservation)  # a repeat is ignored
    assert b.spent("d", NOON) == D("0.1")
    second = b.check(NOON, feature=None, estimated_cost=D("0.6"), currency="USD", reserve=True)
    assert second.reservation is not None and b.spent("d", NOON) == D("0.7")
    assert b.check(NOON, feature=None, estimated_cost=D("0.3"), currency="USD").reservation is None  # a plain check
