"""Batch prices: exact Decimal arithmetic over the catalogue's online prices and the batch factors."""

from __future__ import annotations

from decimal import Decimal

import pytest

from llmroute.accounting.prices import PriceBook
from llmroute.batch.pricing import batch_factor, batch_price, load_discounts
from tests.batch.helpers import client, config, requests

M = Decimal(1_000_000)


def _online(kind, model, region=None):
    return PriceBook().lookup("p", kind, region, model)


def test_together_discount_applies_only_to_listed_models():
    listed = _online("together", "meta-llama/Llama-3.3-70B-Instruct-Turbo")
    assert listed.input_per_million == Decimal("1.04")
    price = batch_price(listed, kind="together", model="meta-llama/Llama-3.3-70B-Instruct-Turbo")
    assert price.input_per_million == Decimal("0.520") and price.output_per_million == Decimal("0.520")
    unlisted = _online("together", "meta-llama/Meta-Llama-3.1-8B-Instruct-Turbo")
    same = batch_price(unlisted, kind="together", model="meta-llama/Meta-Llama-3.1-8B-Instruct-Turbo")
    assert same.input_per_million == unlisted.input_per_million  # "models not listed run at standard rates"


def test_bailian_batch_has_no_cache_discount_and_fireworks_halves_cached_again():
    online = _online("bailian", "qwen-plus", "cn-beijing")
    price = batch_price(online, kind="bailian", model="qwen-plus")
    assert price.input_per_million == online.input_per_million / 2
    assert price.cached_rate == price.input_per_million  # no context-cache discount in batch mode
    fw = _online("fireworks", "accounts/fireworks/models/llama-v3p3-70b-instruct")
    fw_batch = batch_price(fw, kind="fireworks", model="accounts/fireworks/models/llama-v3p3-70b-instruct")
    assert fw_batch.input_per_million == Decimal("0.450") and fw_batch.cached_rate == Decimal("0.2250")


def test_config_override_wins_and_unpriced_stays_unpriced():
    assert batch_factor("siliconflow", "m", "sf", {"sf": 0.4})[0] == Decimal("0.4")
    assert batch_factor("siliconflow", "m", "sf", {"sf:m": 0.3, "sf": 0.4})[0] == Decimal("0.3")
    assert batch_price(None, kind="siliconflow", model="m") is None
    assert all(d.source.startswith("https://") for d in load_discounts().values())


def test_result_cost_and_ledger_row_are_exact(servers, tmp_path):
    from llmroute.accounting.ledger import MemorySink

    sink = MemorySink()
    with client(config(servers, tmp_path), ledger=sink) as c:
        job = c.batches.create(requests(1), model="together")
        c.batches.wait(job.id)
        r0 = c.batches.results(job.id)["r0"].completion
    # "item number 0": 3 prompt tokens (1 of them cached, reported flat by Together), 2 completion tokens.
    assert (r0.usage.prompt_tokens, r0.usage.cached_tokens, r0.usage.completion_tokens) == (3, 1, 2)
    expected = (2 * Decimal("0.52") + 1 * Decimal("0.52") + 2 * Decimal("0.52")) / M
    assert r0.cost.amount == expected == Decimal("0.0000026")
    [row] = [r for r in sink.records if r.pool == "batch"]
    assert row.cost == expected and row.currency == "USD"
    assert Decimal(row.metadata["online_cost"]) == 5 * Decimal("1.04") / M
    assert row.price_version.endswith("+batch-2026.12.03-1")


def test_budget_refuses_a_job_whose_estimate_passes_it_before_anything_is_sent(servers, tmp_path):
    from llmroute import BudgetExceededError

    cfg = config(servers, tmp_path)
    cfg["budgets"] = [{"name": "tiny", "max_cost": "0.0001", "currency": "USD"}]
    cfg["pricing"] = {"reporting_currency": "USD", "exchange_rates": {"CNY": 0.14}}
    with client(cfg) as c:
        # 200 requests x (their prompt + max_tokens 8) at the batch rate 0.52/M pass 0.0001 USD.
        with pytest.raises(BudgetExceededError, match="tiny"):
            c.batches.create(requests(200), model="together")
        assert c.batches.list() == [] and servers["together"].requests == []
        job = c.batches.create(requests(2), model="together")
        assert c.batches.wait(job.id).done == 2
