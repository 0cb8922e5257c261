"""Costs against hand-computed cases, one per platform usage shape (docs/platforms.md §10, §11.3).

Every expected figure below was worked out by hand from the rule
    (prompt - cached) x input + cached x cached_rate + completion x output, per million tokens.
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
from decimal import Decimal as D

from hypothesis import given
from hypothesis import strategies as st

from llmroute.accounting.cost import MIXED, Cost, TokenUsage, compute_cost, cost_from_usage, read_usage, sum_costs
from llmroute.accounting.prices import ExchangeRates, PriceBook, PricingConfig

CONFIG = tomllib.loads(
    """
[pricing."together:my-finetune"]
input_per_million = 0.88
output_per_million = 0.88
cached_input_per_million = 0.44
currency = "USD"

[pricing."fw:accounts/me/models/tuned"]
input_per_million = 0.20
output_per_million = 0.20
cached_input_per_million = 0.10

[pricing."box:*"]
input_per_million = 0.05
output_per_million = 0.10
cached_input_per_million = 0.01

[pricing."free-box:*"]
input_per_million = 0
output_per_million = 0
"""
)["pricing"]
BOOK = PriceBook(PricingConfig.model_validate(CONFIG))


def price(provider, kind, region, model):
    p = BOOK.lookup(provider, kind, region, model)
    assert p is not None, (provider, model)
    return p


def test_together_flat_cached_tokens():
    # Recorded shape (non-reasoning model): details null, cached_tokens at the top of usage.
    usage = {"completion_tokens": 300, "prompt_tokens": 1200, "total_tokens": 1500,
             "completion_tokens_details": None, "prompt_tokens_details": None, "cached_tokens": 200}  # fmt: skip
    c = cost_from_usage(price("together", "together", None, "my-finetune"), usage)
    # 1000 x 0.88 + 200 x 0.44 + 300 x 0.88 = 880 + 88 + 264 = 1232 per million
    assert c.amount == D("0.001232") and c.currency == "USD"
    assert (c.input_amount, c.cached_amount, c.output_amount) == (D("0.00088"), D("0.000088"), D("0.000264"))
    assert (c.input_tokens, c.cached_tokens, c.output_tokens) == (1200, 200, 300)
    assert c.price_version.startswith("config:") and not c.estimated and c.priced


def test_together_reasoning_model_details_and_no_cached_rate():
    # Reasoning models put cached tokens in prompt_tokens_details; reasoning is inside completion.
    usage = {"prompt_tokens": 2000, "completion_tokens": 1500, "total_tokens": 3500,
             "prompt_tokens_details": {"cached_tokens": 1024}, "completion_tokens_details": {"reasoning_tokens": 1000}}  # fmt: skip
    p = price("tg", "together", None, "meta-llama/Llama-3.3-70B-Instruct-Turbo")
    c = cost_from_usage(p, usage)
    # No known cached rate: all 2000 prompt tokens at 1.04, 1500 output at 1.04 (reasoning once).
    assert c.amount == D("0.00364")
    assert c.cached_amount == D("0.00106496") and c.input_amount == D("0.00101504")
    assert c.output_tokens == 1500 and c.reasoning_tokens == 1000
    assert c.price_confirmed and c.price_version == BOOK.version  # on Together's own catalogue page


def test_fireworks_details_at_size_tier():
    usage = {"prompt_tokens": 5000, "completion_tokens": 100, "total_tokens": 5100,
             "prompt_tokens_details": {"cached_tokens": 4096}}  # fmt: skip
    c = cost_from_usage(price("fw", "fireworks", None, "accounts/fireworks/models/llama-v3p1-8b-instruct"), usage)
    assert c.amount == D("0.00102")  # 5100 x 0.20: size tier has no cached rate


def test_fireworks_cached_count_from_perf_metrics():
    usage = {"prompt_tokens": 5000, "completion_tokens": 100, "total_tokens": 5100}
    c = cost_from_usage(
        price("fw", "fireworks", None, "accounts/me/models/tuned"), usage, perf_metrics={"cached-prompt-tokens": 4096}
    )
    # 904 x 0.20 + 4096 x 0.10 + 100 x 0.20 = 180.8 + 409.6 + 20 = 610.4 per million
    assert c.amount == D("0.0006104") and c.cached_tokens == 4096


def test_siliconflow_cumulative_usage_in_cny():
    # SiliconFlow puts cumulative usage on every chunk; the adapter hands over the last one.
    last_chunk_usage = {"prompt_tokens": 30, "completion_tokens": 250, "total_tokens": 280}
    c = cost_from_usage(price("sf", "siliconflow", "cn", "Qwen/Qwen2.5-72B-Instruct"), last_chunk_usage)
    assert c.amount == D("0.0011564") and c.currency == "CNY"  # 280 x 4.13


def test_free_model_costs_zero_as_a_price_not_as_a_gap():
    c = cost_from_usage(price("sf", "siliconflow", "cn", "Qwen/Qwen2.5-7B-Instruct"), {"prompt_tokens": 9, "completion_tokens": 9})
    assert c.amount == 0 and c.priced


def test_dashscope_compat_cached_at_twenty_percent():
    # Implicit context-cache hits cost 20% of input (Alibaba's context-cache page, 2026).
    usage = {"prompt_tokens": 3000, "completion_tokens": 500, "total_tokens": 3500,
             "prompt_tokens_details": {"cached_tokens": 2000}}  # fmt: skip
    c = cost_from_usage(price("ali-sg", "bailian", "singapore", "qwen-plus"), usage)
    # 1000 x 0.40 + 2000 x 0.08 + 500 x 1.20 = 400 + 160 + 600 = 1160 per million
    assert c.amount == D("0.00116") and c.currency == "USD"
    big = {"prompt_tokens": 10000, "completion_tokens": 2000, "prompt_tokens_details": {"cached_tokens": 5000}}
    c = cost_from_usage(price("ali", "bailian", "cn-beijing", "qwen-max"), big)
    # 5000 x 2.4 + 5000 x 0.48 + 2000 x 9.6 = 12000 + 2400 + 19200 = 33600 per million
    assert c.amount == D("0.0336") and c.currency == "CNY"


def test_dashscope_native_input_output_tokens():
    usage = {"input_tokens": 120, "output_tokens": 80, "total_tokens": 200,
             "output_tokens_details": {"reasoning_tokens": 50}}  # fmt: skip
    c = cost_from_usage(price("ali", "bailian", "cn", "qwen-turbo"), usage)
    # Reasoning reported, so thinking mode: 120 x 0.3 + 80 x 3 (the thinking rate) = 36 + 240 = 276 per
    # million; reasoning is inside the 80
    assert c.amount == D("0.000276") and c.output_tokens == 80 and c.reasoning_tokens == 50 and c.thinking


def test_llamacpp_timings_cache_n_and_details():
    p = price("box", "llamacpp", None, "gemma-3-270m")
    with_details = {"prompt_tokens": 500, "completion_tokens": 20, "prompt_tokens_details": {"cached_tokens": 450}}
    only_timings = {"prompt_tokens": 500, "completion_tokens": 20}
    a = cost_from_usage(p, with_details)
    b = cost_from_usage(p, only_timings, timings={"cache_n": 450, "prompt_n": 50})
    # 50 x 0.05 + 450 x 0.01 + 20 x 0.10 = 2.5 + 4.5 + 2 = 9 per million
    assert a.amount == b.amount == D("0.000009")
    z = cost_from_usage(price("free-box", "llamacpp", None, "x"), with_details)
    assert z.amount == 0 and z.priced


def test_sglang_top_level_reasoning_tokens_are_not_added():
    t = read_usage({"prompt_tokens": 10, "completion_tokens": 100, "reasoning_tokens": 60})
    assert t == TokenUsage(10, 100, 0, 60)
    c = cost_from_usage(price("box", "sglang", None, "m"), t)
    assert c.output_tokens == 100 and c.amount == D("0.0000105")  # 10 x 0.05 + 100 x 0.10


def test_reasoning_reported_outside_completion_is_added_once():
    p = price("box", "vllm", None, "m")
    c = compute_cost(p, prompt_tokens=10, completion_tokens=40, reasoning_tokens=60, reasoning_in_completion=False)
    assert c.output_tokens == 100 and c.amount == D("0.0000105")


def test_openai_usage_model_objects_are_read_too():
    class Details:
        def __init__(self, **kw):
            self.__dict__.update(kw)

    class Usage:
        def model_dump(self):
            return {"prompt_tokens": 8, "completion_tokens": 9, "prompt_tokens_details": {"cached_tokens": 4}}

    assert read_usage(Usage()) == TokenUsage(8, 9, 4, 0)
    assert read_usage(Details(prompt_tokens=3, completion_tokens=2)) == TokenUsage(3, 2, 0, 0)
    assert read_usage(None) == TokenUsage()


def test_inconsistent_counts_are_clamped_not_raised():
    c = compute_cost(price("box", "vllm", None, "m"), prompt_tokens=10, completion_tokens=-3, cached_tokens=50)
    assert (c.input_tokens, c.cached_tokens, c.output_tokens) == (10, 10, 0)


def test_unpriced_is_none_and_flagged_never_zero():
    c = compute_cost(None, prompt_tokens=100, completion_tokens=10)
    assert c.amount is None and not c.priced and c.currency is None and c.price_version is None
    assert c.input_amount is None and "unpriced" in str(c)
    assert c.input_tokens == 100


def test_estimated_flag_is_carried():
    c = compute_cost(price("box", "vllm", None, "m"), prompt_tokens=100, completion_tokens=10, estimated=True)
    assert c.estimated and "estimated" in str(c)


def test_failover_sum_same_currency():
    p = price("together", "together", None, "my-finetune")
    a = compute_cost(p, prompt_tokens=1000, completion_tokens=0)  # billed, then failed
    b = compute_cost(p, prompt_tokens=1000, completion_tokens=500, cached_tokens=1000, estimated=True)
    s = sum_costs([a, b])
    # a: 1000 x 0.88 = 880; b: 1000 x 0.44 + 500 x 0.88 = 880 -> 1760 per million
    assert s.amount == D("0.00176") and s.currency == "USD" and s.estimated
    assert s.input_amount + s.cached_amount + s.output_amount == s.amount
    assert (s.input_tokens, s.cached_tokens, s.output_tokens) == (2000, 1000, 500)
    assert sum_costs([a]) is a


def test_failover_across_currencies():
    usd = compute_cost(price("ali-sg", "bailian", "singapore", "qwen-plus"), prompt_tokens=1000, completion_tokens=0)
    cny = compute_cost(price("sf", "siliconflow", "cn", "Qwen/Qwen2.5-72B-Instruct"), prompt_tokens=1000, completion_tokens=0)
    kept = sum_costs([usd, cny])
    assert kept.amount is None and kept.currency == MIXED and kept.priced
    assert kept.by_currency == {"USD": D("0.0004"), "CNY": D("0.00413")}
    joined = sum_costs([usd, cny], rates=ExchangeRates("USD", {"CNY": D("0.14")}))
    assert joined.currency == "USD" and joined.amount == D("0.0004") + D("0.00413") * D("0.14")
    assert joined.input_amount == joined.amount


def test_sum_with_an_unpriced_attempt_is_unpriced():
    a = compute_cost(price("box", "vllm", None, "m"), prompt_tokens=1000, completion_tokens=0)
    s = sum_costs([a, compute_cost(None, prompt_tokens=5, completion_tokens=5)])
    assert s.amount is None and not s.priced and s.by_currency == {"USD": D("0.00005")}
    assert s.input_tokens == 1005


def test_to_dict_is_exact():
    c = compute_cost(price("together", "together", None, "my-finetune"), prompt_tokens=1, completion_tokens=0)
    d = c.to_dict()
    assert d["amount"] == "8.8E-7" or D(d["amount"]) == D("0.00000088")
    assert d["by_currency"] == {"USD": str(c.amount)}


def test_to_dict_is_json_and_reads_back_to_the_same_amounts():
    c = compute_cost(price("together", "together", None, "my-finetune"), prompt_tokens=1_234_567,
                     completion_tokens=89, cached_tokens=1000)
    s = sum_costs([c, compute_cost(price("fw", "fireworks", None, "accounts/me/models/tuned"),
                                   prompt_tokens=3, completion_tokens=7)])
    for cost in (c, s, compute_cost(None, prompt_tokens=5, completion_tokens=5)):
        text = json.dumps(cost.to_dict())
        back = json.loads(text)
        assert set(back) == {f.name for f in dataclasses.fields(Cost)}
        for name in ("amount", "input_amount", "cached_amount", "output_amount"):
            value = getattr(cost, name)
            assert back[name] == (None if value is None else str(value))
            assert value is None or D(back[name]) == value  # no precision lost
        assert {k: D(v) for k, v in back["by_currency"].items()} == dict(cost.by_currency)
        assert (back["input_tokens"], back["priced"], back["currency"]) == (cost.input_tokens, cost.priced,
                                                                            cost.currency)
    # 28 significant digits survive: a float would keep about 17.
    tiny = Cost(amount=D("0.0000001234567890123456789012345678"), currency="USD")
    assert json.loads(json.dumps(tiny.to_dict()))["amount"] == "1.234567890123456789012345678E-7"
    assert D(json.loads(json.dumps(tiny.to_dict()))["amount"]) == tiny.amount


def test_cost_is_the_typed_cost_of_responses():

    import llmroute
    from llmroute.embeddings import CreateEmbeddingResponse
    from llmroute.types import Attempt, ChatCompletion

    assert llmroute.Cost is Cost and "Cost" in llmroute.__all__
    for model in (ChatCompletion, Attempt, CreateEmbeddingResponse):
        assert model.model_fields["cost"].annotation == Cost | None


@given(
    prompt=st.integers(0, 10**7),
    cached_frac=st.floats(0, 1),
    completion=st.integers(0, 10**6),
    rates=st.tuples(*[st.decimals(0, 100, places=4)] * 3),
)
def test_each_token_is_billed_once_at_its_rate(prompt, cached_frac, completion, rates):
    from llmroute.accounting.prices import Price

    cached = int(prompt * cached_frac)
    p = Price(rates[0], rates[1], rates[2], "USD", "v")
    c = compute_cost(p, prompt_tokens=prompt, completion_tokens=completion, cached_tokens=cached)
    assert c.amount * 1_000_000 == (prompt - cached) * rates[0] + cached * rates[2] + completion * rates[1]
    assert c.amount == c.input_amount + c.cached_amount + c.output_amount
    assert isinstance(c, Cost)
