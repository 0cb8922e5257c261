"""What the platforms bill beyond the plain rates, through the public client to the loopback servers:
input-length tiers (a 200K-token prompt), thinking-mode output, explicit context-cache writes and
hits, implicit cache hits and cached-input rates, each priced exactly (Decimal) against the shipped
table (version TABLE_VERSION) and hand-computed here.

The servers report the usage (prompt, cached, cache-creation and reasoning counts) the test scripts in
each platform's own shape (tests/servers/bailian.py renders Alibaba's `prompt_tokens_details` with
`cache_creation_input_tokens` and `cache_type`); no test sends 200K tokens of text.
"""

from __future__ import annotations

import sqlite3
from decimal import Decimal

import pytest

from llmroute import Client
from llmroute.config import Config
from llmroute.errors import ConfigError
from tests.accounting._client import MESSAGES, TABLE_VERSION, config, per_million, provider
from tests.providers.helpers import drain
from tests.servers.script import Reply

PIECES = ["one", " two", " three", " four", " five"]  # 5 completion tokens
REASONING = ["think", " hard", " now"]  # 3 reasoning tokens, streamed before the answer


def _call(client: Client, stream: bool, **kwargs):
    out = client.chat.completions.create(model="t", messages=MESSAGES, stream=stream, **kwargs)
    if not stream:
        return out
    with out:
        drain(out)
    return out.response


def _client(server, kind: str, model: str, **extras) -> Client:
    prov = provider(kind, server, **extras)
    if extras.get("protocol") == "native":
        prov["base_url"] = server.native_url
    return Client(config=config({"p": prov}, {"t": [f"p:{model}"]}))


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_a_200k_token_prompt_is_billed_at_its_input_length_tier(bailian_server, stream):
    # help.aliyun.com/zh/model-studio/models, Qwen-Plus (Beijing): 0-128K 0.8 / 2, 128K-256K 2.4 / 20 CNY.
    # Every token of the request is billed at the tier its input falls in.
    bailian_server.push(Reply(usage={"prompt_tokens": 200_000}, pieces=PIECES))
    with _client(bailian_server, "bailian", "qwen-plus") as client:
        cost = _call(client, stream).cost
    assert (cost.input_tokens, cost.output_tokens, cost.tier_above) == (200_000, 5, 131_072)
    assert cost.input_amount == per_million(200_000, "2.4") == Decimal("0.48")
    assert cost.output_amount == per_million(5, "20") == Decimal("0.0001")
    assert cost.amount == Decimal("0.4801") and cost.currency == "CNY"
    # The first tier's rates (what the table charged before tiers) would have been a third of the bill.
    assert cost.amount > 3 * (per_million(200_000, "0.8") + per_million(5, "2"))
    assert cost.price_version == TABLE_VERSION and cost.price_detail == "tier>131072"


def test_tiers_apply_to_cached_tokens_too(bailian_server):
    bailian_server.push(Reply(usage={"prompt_tokens": 200_000}, cached_tokens=50_000, pieces=PIECES))
    with _client(bailian_server, "bailian", "qwen-plus") as client:
        cost = _call(client, False).cost
    # 150000 x 2.4 + 50000 x 0.48 (implicit hits: 20% of the tier's input) + 5 x 20 = 360000 + 24000 + 100
    assert (cost.input_amount, cost.cached_amount, cost.output_amount) == (
        Decimal("0.36"), Decimal("0.024"), Decimal("0.0001"))
    assert cost.amount == Decimal("0.3841")


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_reported_reasoning_bills_output_at_the_thinking_rate(bailian_server, stream):
    # Qwen-Plus (Beijing) first tier: output 2 CNY, 8 in thinking mode.
    bailian_server.push(Reply(usage={"prompt_tokens": 1000}, reasoning=REASONING, pieces=["a", " b"]))
    with _client(bailian_server, "bailian", "qwen-plus") as client:
        cost = _call(client, stream, extra_body={"enable_thinking": True}).cost
    assert (cost.output_tokens, cost.reasoning_tokens, cost.thinking) == (5, 3, True)
    # 1000 x 0.8 + 5 x 8 = 800 + 40
    assert cost.output_amount == per_million(5, "8") and cost.amount == Decimal("0.00084")
    assert cost.price_detail == "thinking"


def test_thinking_request_without_reasoning_is_billed_at_the_plain_rate(bailian_server):
    # "开启思考模式时如果没有输出思考过程，按非思考模式价格进行收费" (the models page): the usage decides.
    bailian_server.push(Reply(usage={"prompt_tokens": 1000}, pieces=PIECES))
    with _client(bailian_server, "bailian", "qwen-plus") as client:
        cost = _call(client, False, extra_body={"enable_thinking": True}).cost
    assert cost.thinking is False and cost.amount == Decimal("0.00081")  # 1000 x 0.8 + 5 x 2


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_reasoning_text_the_usage_does_not_count_is_billed_as_thinking(bailian_server, stream):
    # A usage without a reasoning breakdown, but the answer carried reasoning: thinking happened.
    bailian_server.push(Reply(usage={"prompt_tokens": 1000, "reasoning_tokens": 0}, reasoning=REASONING,
                              pieces=["a", " b"]))
    with _client(bailian_server, "bailian", "qwen-plus") as client:
        cost = _call(client, stream, extra_body={"enable_thinking": True}).cost
    assert (cost.reasoning_tokens, cost.thinking, cost.amount) == (0, True, Decimal("0.00084"))


def test_thinking_request_with_estimated_usage_takes_the_thinking_rate(bailian_server):
    # No usage from the platform: llmroute counts the tokens and trusts the request's enable_thinking.
    bailian_server.push(Reply(omit_usage=True, pieces=PIECES))
    with _client(bailian_server, "bailian", "qwen-plus") as client:
        cost = _call(client, False, extra_body={"enable_thinking": True}).cost
    assert cost.estimated is True and cost.thinking is True and cost.output_tokens > 0
    assert cost.output_amount == per_million(cost.output_tokens, "8")


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_explicit_cache_writes_and_hits_have_their_own_rates(bailian_server, stream, tmp_path):
    # alibabacloud.com/help/en/model-studio/context-cache: creation 125% of input, explicit hits 10%.
    db = tmp_path / "ledger.db"
    bailian_server.push(Reply(usage={"prompt_tokens": 3019, "cache_creation_tokens": 500, "explicit_cache": 1},
                              cached_tokens=2048, pieces=PIECES))
    prov = provider("bailian", bailian_server)
    with Client(config=config({"p": prov}, {"t": ["p:qwen-plus"]}, ledger={"path": str(db)})) as client:
        cost = _call(client, stream).cost
    assert (cost.input_tokens, cost.cached_tokens, cost.cache_write_tokens, cost.explicit_cache) == (3019, 2048, 500, True)
    # 471 x 0.8 + 2048 x 0.08 + 500 x 1.0 + 5 x 2 = 376.8 + 163.84 + 500 + 10 per million
    assert cost.input_amount == Decimal("0.0003768") and cost.cached_amount == Decimal("0.00016384")
    assert cost.cache_write_amount == Decimal("0.0005") and cost.output_amount == Decimal("0.00001")
    assert cost.amount == Decimal("0.00105064")
    assert cost.amount == cost.input_amount + cost.cached_amount + cost.cache_write_amount + cost.output_amount
    with sqlite3.connect(db) as con:
        row = con.execute("SELECT cost, cache_write_tokens, cached_tokens, price_detail FROM ledger").fetchone()
    assert row == ("0.00105064", 500, 2048, "cache-write,explicit-cache")


def test_first_explicit_cache_request_pays_the_creation_premium(bailian_server):
    # The context-cache page's own example: 18628 prompt tokens, 18613 of them written to the cache.
    bailian_server.push(Reply(usage={"prompt_tokens": 18628, "cache_creation_tokens": 18613, "explicit_cache": 1},
                              pieces=PIECES))
    with _client(bailian_server, "bailian", "qwen-plus") as client:
        cost = _call(client, False).cost
    # 15 x 0.8 + 18613 x 1.0 + 5 x 2 = 12 + 18613 + 10
    assert cost.amount == Decimal("0.018635") and cost.cached_amount == 0


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_dashscope_native_us_tier_thinking_and_cache(bailian_server, stream):
    # qwen-plus-us (US mode, USD): 256K-1M 1.2 / 3.6, thinking 12; implicit hits 20% of 1.2 = 0.24.
    bailian_server.push(Reply(usage={"prompt_tokens": 300_000}, cached_tokens=100_000, reasoning=["r", " s"],
                              pieces=["x", " y", " z"]))
    with _client(bailian_server, "bailian", "qwen-plus-us", protocol="native", region="us") as client:
        cost = _call(client, stream).cost
    assert (cost.tier_above, cost.thinking, cost.reasoning_tokens, cost.output_tokens) == (262_144, True, 2, 5)
    # 200000 x 1.2 + 100000 x 0.24 + 5 x 12 = 240000 + 24000 + 60 per million
    assert cost.amount == Decimal("0.26406") and cost.currency == "USD"


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_fireworks_cached_input_rate(fireworks_server, stream):
    # docs.fireworks.ai/serverless/pricing, GPT OSS 120B: 0.15 input, 0.015 cached, 0.60 output.
    fireworks_server.push(Reply(usage={"prompt_tokens": 1000}, cached_tokens=600, reasoning=["r", " s"],
                                pieces=["x", " y", " z"]))
    with _client(fireworks_server, "fireworks", "accounts/fireworks/models/gpt-oss-120b") as client:
        cost = _call(client, stream).cost
    # 400 x 0.15 + 600 x 0.015 + 5 x 0.60 = 60 + 9 + 3; no thinking rate of its own, so none recorded
    assert cost.amount == Decimal("0.000072") and cost.cached_amount == Decimal("0.000009")
    assert cost.reasoning_tokens == 2 and cost.thinking is False and cost.price_detail is None


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_siliconflow_intl_cached_input_rate(siliconflow_server, stream):
    siliconflow_server.push(Reply(usage={"prompt_tokens": 2000}, cached_tokens=1500, pieces=PIECES))
    with _client(siliconflow_server, "siliconflow", "deepseek-ai/DeepSeek-V3.2", region="intl") as client:
        cost = _call(client, stream).cost
    # 500 x 0.27 + 1500 x 0.135 + 5 x 0.42 = 135 + 202.5 + 2.1 per million, in USD
    assert cost.amount == Decimal("0.0003396") and cost.currency == "USD"


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_together_flat_cached_tokens_at_the_catalogue_cached_rate(together_server, stream):
    # docs.together.ai/docs/serverless/models, Kimi K3: 3.00 input, 0.30 cached, 15.00 output.
    together_server.push(Reply(usage={"prompt_tokens": 1000}, cached_tokens=400, pieces=PIECES))
    with _client(together_server, "together", "moonshotai/Kimi-K3") as client:
        cost = _call(client, stream).cost
    # 600 x 3 + 400 x 0.30 + 5 x 15 = 1800 + 120 + 75 per million
    assert cost.cached_amount == Decimal("0.00012") and cost.amount == Decimal("0.001995")


def test_together_flat_cached_tokens_without_a_cached_rate(together_server):
    together_server.push(Reply(usage={"prompt_tokens": 1000}, cached_tokens=400, pieces=PIECES))
    with _client(together_server, "together", "openai/gpt-oss-120b") as client:
        cost = _call(client, False).cost
    # No cached rate ships for Together: 1000 x 0.15 + 5 x 0.60 = 150 + 3 per million
    assert cost.cached_tokens == 400 and cost.amount == Decimal("0.000153")


def test_a_team_catalogue_prices_calls_and_its_version_reaches_the_ledger(bailian_server, tmp_path):
    (tmp_path / "prices.toml").write_text(
        'version = "acme-2026.12.04"\nread_on = "2026-12-04"\n\n'
        '[[price]]\nkind = "bailian"\nregion = "cn-beijing"\nmodel = "qwen-plus"\n'
        'input_per_million = 0.7\noutput_per_million = 1.8\ncurrency = "CNY"\nconfirmed = true\n'
        'source = "our contract"\n\n[[price.tiers]]\nabove = 131072\ninput_per_million = 2\noutput_per_million = 18\n',
        encoding="utf-8")
    db = tmp_path / "ledger.db"
    cfg = config({"p": provider("bailian", bailian_server)}, {"t": ["p:qwen-plus"]},
                 pricing={"catalogue": "prices.toml"}, ledger={"path": str(db)})
    bailian_server.push(Reply(usage={"prompt_tokens": 200_000}, pieces=PIECES))
    with Client(config=Config.from_dict(cfg, base_dir=tmp_path)) as client:
        cost = _call(client, False).cost
    assert cost.amount == Decimal("0.40009") and cost.price_version == "acme-2026.12.04"  # 200000 x 2 + 5 x 18
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT price_version, price_detail FROM ledger").fetchone() == (
            "acme-2026.12.04", "tier>131072")


def test_a_bad_team_catalogue_names_its_file_and_line(tmp_path):
    (tmp_path / "prices.toml").write_text(
        'version = "acme"\n\n[[price]]\nkind = "bailian"\nregion = "cn-beijing"\nmodel = "qwen-plus"\n'
        'input_per_million = 0.7\noutput_per_million = "lots"\ncurrency = "CNY"\nsource = "x"\n', encoding="utf-8")
    cfg = config({"p": {"kind": "bailian", "base_url": "http://127.0.0.1:9/v1", "api_key": "k"}},
                 {"t": ["p:qwen-plus"]}, pricing={"catalogue": ["prices.toml"]})
    with pytest.raises(ConfigError) as e:
        Config.from_dict(cfg, base_dir=tmp_path)
    assert f"{tmp_path / 'prices.toml'}:8: price[0]: output_per_million must be a number" in str(e.value)
