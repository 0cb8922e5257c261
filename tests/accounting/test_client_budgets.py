"""Budgets and guards through the public client: a refuse budget raises BudgetExceededError naming the
budget, its limit and the spend; a downgrade budget moves the call to the cheaper tier and the route says
so; spend survives a restart through the ledger; guards refuse a prompt or max_tokens over their limit
before anything is sent, and cap an unset max_tokens."""

from __future__ import annotations

from decimal import Decimal

import pytest

import llmroute as L
from llmroute import Client
from llmroute.accounting.tokens import count_message_tokens
from tests.accounting._client import MESSAGES, config, per_million, provider
from tests.servers.script import Reply

TG_MODEL = "meta-llama/Llama-3.3-70B-Instruct-Turbo"  # 1.04 / 1.04 USD per million
FW_MODEL = "accounts/fireworks/models/llama-v3p1-8b-instruct"  # 0.20 / 0.20
# The server reports 1000 prompt tokens and 2 completion tokens: 1002 x 1.04 per million on Together.
BIG = dict(usage={"prompt_tokens": 1000}, pieces=["a", "b"])
SPENT_ON_TOGETHER = Decimal("0.00104208")


def _cfg(together_server, fireworks_server, budgets, ledger=None, **sections):
    return config(
        {"tg": provider("together", together_server), "fw": provider("fireworks", fireworks_server)},
        {"large": [f"tg:{TG_MODEL}"], "small": [f"fw:{FW_MODEL}"]},
        budgets=budgets, ledger=ledger, **sections,
    )


def test_refuse_budget_raises_naming_budget_limit_and_spend(together_server, fireworks_server):
    budgets = [{"name": "chat-daily", "when": {"feature": "chat"}, "max_cost": "0.001", "currency": "USD"}]
    together_server.push(Reply(**BIG))
    with Client(config=_cfg(together_server, fireworks_server, budgets)) as client:
        first = client.chat.completions.create(model="large", messages=MESSAGES, feature="chat", max_tokens=10)
        assert first.cost.amount == SPENT_ON_TOGETHER  # now over the 0.001 cap
        with pytest.raises(L.BudgetExceededError) as info:
            client.chat.completions.create(model="large", messages=MESSAGES, feature="chat", max_tokens=10)
        # Another feature is not counted by this budget.
        together_server.push(Reply(pieces=["x"]))
        client.chat.completions.create(model="large", messages=MESSAGES, feature="other", max_tokens=10)
    err = info.value
    assert (err.budget, err.limit, err.spent, err.unit) == ("chat-daily", Decimal("0.001"), SPENT_ON_TOGETHER, "USD")
    # The message rounds to 6 places; the attributes are exact.
    assert "budget 'chat-daily': daily limit 0.001 USD, spent 0.001042, this call ~" in str(err)
    assert [r.json.get("max_tokens") for r in together_server.requests] == [10, 10]  # the refused call sent nothing
    assert fireworks_server.requests == []


def test_refuse_budget_counts_the_estimate_before_the_first_call(together_server, fireworks_server):
    """An empty window still refuses a call whose own upper-bound estimate passes the cap."""
    budgets = [{"name": "tiny", "max_cost": "0.00001", "currency": "USD"}]
    with Client(config=_cfg(together_server, fireworks_server, budgets)) as client:
        with pytest.raises(L.BudgetExceededError) as info:
            client.chat.completions.create(model="large", messages=MESSAGES, max_tokens=100)
    # Estimate: the whole prompt uncached plus max_tokens, at Together's 1.04 per million.
    estimate = per_million(count_message_tokens(MESSAGES) + 100, "1.04")
    assert info.value.spent == Decimal(0) and estimate > Decimal("0.00001")
    assert f"this call ~{estimate.quantize(Decimal('0.000001')).normalize():f}" in str(info.value)
    assert together_server.requests == []


def test_per_tenant_token_budget(together_server, fireworks_server):
    budgets = [{"name": "tenant-tokens", "per": ["metadata.tenant"], "max_tokens": 1010}]
    together_server.push(Reply(**BIG), Reply(pieces=["x"]))
    with Client(config=_cfg(together_server, fireworks_server, budgets)) as client:
        client.chat.completions.create(model="large", messages=MESSAGES, metadata={"tenant": "a"}, max_tokens=10)
        with pytest.raises(L.BudgetExceededError) as info:
            client.chat.completions.create(model="large", messages=MESSAGES, metadata={"tenant": "a"}, max_tokens=10)
        client.chat.completions.create(model="large", messages=MESSAGES, metadata={"tenant": "b"}, max_tokens=10)
    assert (info.value.budget, info.value.limit, info.value.spent, info.value.unit) == (
        "tenant-tokens", 1010, 1002, "tokens")
    assert "metadata.tenant=a" in str(info.value)
    assert len(together_server.requests) == 2


def test_downgrade_budget_moves_the_call_to_the_cheaper_tier(together_server, fireworks_server):
    budgets = [{"name": "large-daily", "max_cost": "0.001", "currency": "USD", "action": "downgrade",
                "downgrade_tier": "small"}]
    together_server.push(Reply(**BIG))
    fireworks_server.push(Reply(**BIG))
    with Client(config=_cfg(together_server, fireworks_server, budgets)) as client:
        first = client.chat.completions.create(model="large", messages=MESSAGES, max_tokens=10)
        second = client.chat.completions.create(model="large", messages=MESSAGES, max_tokens=10)
    assert first.route.tier == "large" and first.route.deployment == f"tg:{TG_MODEL}"
    assert second.route.tier == "small" and second.route.deployment == f"fw:{FW_MODEL}"
    assert second.route.reason.startswith("budget: budget 'large-daily'")
    assert "downgraded to tier 'small'" in second.route.reason
    assert second.cost.amount == per_million(1002, "0.20")
    assert len(together_server.requests) == 1 and len(fireworks_server.requests) == 1


@pytest.mark.parametrize("sink", ["sqlite", "jsonl"])
def test_spend_is_reloaded_from_the_ledger_after_a_restart(together_server, fireworks_server, tmp_path, sink):
    budgets = [{"name": "daily", "max_cost": "0.001", "currency": "USD"}]
    ledger = {"sink": sink, "path": str(tmp_path / f"ledger.{sink}"), "flush_interval_s": 0.05}
    together_server.push(Reply(**BIG))
    with Client(config=_cfg(together_server, fireworks_server, budgets, ledger)) as client:
        client.chat.completions.create(model="large", messages=MESSAGES, max_tokens=10)
    with Client(config=_cfg(together_server, fireworks_server, budgets, ledger)) as restarted:
        with pytest.raises(L.BudgetExceededError) as info:
            restarted.chat.completions.create(model="large", messages=MESSAGES, max_tokens=10)
    assert info.value.spent == SPENT_ON_TOGETHER
    assert len(together_server.requests) == 1


# -- guards ------------------------------------------------------------------------------------------------

GUARDS = {"summarize": {"max_input_tokens": 20, "max_tokens": 64}, "*": {"max_tokens": 16}}


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_guard_refuses_a_long_prompt_before_sending(together_server, fireworks_server, stream):
    long = [{"role": "user", "content": "word " * 100}]
    with Client(config=_cfg(together_server, fireworks_server, [], guards=GUARDS)) as client:
        with pytest.raises(L.RequestGuardError) as info:
            client.chat.completions.create(model="large", messages=long, feature="summarize", stream=stream)
    err = info.value
    assert (err.feature, err.guard, err.limit, err.value) == (
        "summarize", "max_input_tokens", 20, count_message_tokens(long))
    assert "nothing was sent" in str(err)
    assert together_server.requests == [] and fireworks_server.requests == []


def test_guard_refuses_max_tokens_over_its_limit_and_the_default_guard_applies(together_server, fireworks_server):
    with Client(config=_cfg(together_server, fireworks_server, [], guards=GUARDS)) as client:
        with pytest.raises(L.RequestGuardError) as own:
            client.chat.completions.create(model="large", messages=MESSAGES, feature="summarize", max_tokens=65)
        with pytest.raises(L.RequestGuardError) as default:
            client.chat.completions.create(model="large", messages=MESSAGES, feature="chat", max_tokens=17)
    assert (own.value.guard, own.value.limit, own.value.value) == ("max_tokens", 64, 65)
    assert (default.value.feature, default.value.guard, default.value.limit) == ("chat", "max_tokens", 16)
    assert together_server.requests == []


def test_guard_caps_an_unset_max_tokens(together_server, fireworks_server):
    together_server.push(Reply(pieces=["x"]), Reply(pieces=["x"]))
    with Client(config=_cfg(together_server, fireworks_server, [], guards=GUARDS)) as client:
        client.chat.completions.create(model="large", messages=MESSAGES, feature="summarize")
        client.chat.completions.create(model="large", messages=MESSAGES, feature="summarize", max_tokens=30)
    assert [r.json["max_tokens"] for r in together_server.requests] == [64, 30]
