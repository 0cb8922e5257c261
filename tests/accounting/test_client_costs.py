"""`resp.cost` through the public client, exact against hand-computed Decimals, for every platform's
usage shape (cached tokens included), streamed and not; each attempt's share in the route; failover,
interrupted streams, estimated usage and unpriced deployments.

Hand computation: cost = (prompt - cached) x input + cached x cached_input + completion x output, per
million tokens, at the figures in llmroute/accounting/prices.toml (version TABLE_VERSION) or the
config's override. The loopback servers report the prompt/cached counts the test scripts and one
completion token per text piece.
"""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

import llmroute as L
from llmroute import Client
from tests.accounting._client import MESSAGES, TABLE_VERSION, config, per_million, provider
from tests.providers.helpers import drain
from tests.servers.bailian import NATIVE_PATH
from tests.servers.script import Reply
from llmroute.accounting.tokens import count_message_tokens, count_text_tokens

PIECES = ["one", " two", " three", " four", " five"]  # 5 completion tokens on every server
PROMPT, CACHED, COMPLETION = 1000, 400, len(PIECES)
USAGE_REPLY = dict(usage={"prompt_tokens": PROMPT}, cached_tokens=CACHED, pieces=PIECES)


def _call(client: Client, model: str, stream: bool, **kwargs):
    out = client.chat.completions.create(model=model, messages=MESSAGES, stream=stream, **kwargs)
    if not stream:
        return out
    with out:
        drain(out)
    return out.response


# (fixture, kind, provider extras, model, expected parts (uncached input, cached, output), total, currency)
PLATFORMS = [
    # Together: flat `usage.cached_tokens`; the table has no cached rate, so cached tokens cost the input price.
    pytest.param("together_server", "together", {}, "meta-llama/Llama-3.3-70B-Instruct-Turbo",
                 ("0.000624", "0.000416", "0.0000052"), "0.0010452", "USD", id="together"),
    # Fireworks: prompt_tokens_details.cached_tokens; size-tier price, no cached rate.
    pytest.param("fireworks_server", "fireworks", {}, "accounts/fireworks/models/llama-v3p1-8b-instruct",
                 ("0.00012", "0.00008", "0.000001"), "0.000201", "USD", id="fireworks"),
    # SiliconFlow (cn, CNY): cumulative usage on every stream chunk; the last one is the bill.
    pytest.param("siliconflow_server", "siliconflow", {}, "Qwen/Qwen2.5-72B-Instruct",
                 ("0.002478", "0.001652", "0.00002065"), "0.00415065", "CNY", id="siliconflow-cny"),
    # Bailian compatible mode, cn-beijing: implicit cache hits at 20% of the input price (0.16 of 0.8 CNY).
    pytest.param("bailian_server", "bailian", {}, "qwen-plus",
                 ("0.00048", "0.000064", "0.00001"), "0.000554", "CNY", id="bailian-compat-cny"),
    # DashScope native protocol (input_tokens/output_tokens), Singapore prices in USD, cached at 20%.
    pytest.param("bailian_server", "bailian", {"protocol": "native", "region": "singapore"}, "qwen-max",
                 ("0.00096", "0.000128", "0.000032"), "0.00112", "USD", id="dashscope-native-usd"),
]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("fixture, kind, extras, model, parts, total, currency", PLATFORMS)
def test_cost_is_exact_for_each_platform(request, fixture, kind, extras, model, parts, total, currency, stream):
    server = request.getfixturevalue(fixture)
    prov = provider(kind, server, **extras)
    if extras.get("protocol") == "native":
        prov["base_url"] = server.native_url
    server.push(Reply(**USAGE_REPLY))
    with Client(config=config({"p": prov}, {"t": [f"p:{model}"]})) as client:
        resp = _call(client, "t", stream)
    if extras.get("protocol") == "native":
        assert server.last_request.path == NATIVE_PATH
    cost = resp.cost
    assert (cost.input_tokens, cost.cached_tokens, cost.output_tokens) == (PROMPT, CACHED, COMPLETION)
    assert (cost.input_amount, cost.cached_amount, cost.output_amount) == tuple(Decimal(p) for p in parts)
    assert cost.amount == Decimal(total) and isinstance(cost.amount, Decimal)
    assert cost.amount == cost.input_amount + cost.cached_amount + cost.output_amount
    assert cost.currency == currency
    assert cost.estimated is False and cost.priced is True
    assert cost.price_version == TABLE_VERSION
    # One attempt: its share is the whole call.
    (attempt,) = resp.route.attempts
    assert attempt.billed is True and attempt.cost == cost


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_config_override_prices_flat_cached_tokens_at_its_cached_rate(together_server, stream):
    model = "meta-llama/Llama-3.3-70B-Instruct-Turbo"
    pricing = {f"p:{model}": {"input_per_million": 0.88, "output_per_million": 0.88,
                              "cached_input_per_million": 0.44, "currency": "USD"}}
    together_server.push(Reply(**USAGE_REPLY))
    cfg = config({"p": provider("together", together_server)}, {"t": [f"p:{model}"]}, pricing=pricing)
    with Client(config=cfg) as client:
        cost = _call(client, "t", stream).cost
    # 600 x 0.88 + 400 x 0.44 + 5 x 0.88 per million
    assert (cost.input_amount, cost.cached_amount, cost.output_amount) == (
        Decimal("0.000528"), Decimal("0.000176"), Decimal("0.0000044"))
    assert cost.amount == Decimal("0.0007084")
    assert cost.price_version.startswith("config:")


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_stream_response_cost_matches_plain(together_server, stream):
    """`stream.response.cost` is the same object shape as `resp.cost` and equal for the same usage."""
    model = "meta-llama/Llama-3.3-70B-Instruct-Turbo"
    together_server.push(Reply(**USAGE_REPLY), Reply(**USAGE_REPLY))
    with Client(config=config({"p": provider("together", together_server)}, {"t": [f"p:{model}"]})) as client:
        plain = client.chat.completions.create(model="t", messages=MESSAGES)
        with client.chat.completions.create(model="t", messages=MESSAGES, stream=True) as stream_:
            drain(stream_)
        streamed = stream_.response.cost
    assert streamed.to_dict() == plain.cost.to_dict()


def test_failover_bills_only_the_attempt_that_was_billed(together_server, fireworks_server):
    """First attempt: 503 with no usage (cost 0, not billed); second: OK. The call costs the second."""
    together_server.push(Reply(error="overloaded"))
    fireworks_server.push(Reply(**USAGE_REPLY))
    cfg = config(
        {"tg": provider("together", together_server), "fw": provider("fireworks", fireworks_server)},
        {"t": ["tg:meta-llama/Llama-3.3-70B-Instruct-Turbo", "fw:accounts/fireworks/models/llama-v3p1-8b-instruct"]},
    )
    with Client(config=cfg) as client:
        resp = client.chat.completions.create(model="t", messages=MESSAGES)
    first, second = resp.route.attempts
    assert (first.status, first.http_status, first.billed) == ("error", 503, False)
    assert first.cost.amount == Decimal(0) and first.cost.input_tokens == 0 and first.cost.currency == "USD"
    assert (second.status, second.billed) == ("ok", True)
    assert second.cost.amount == Decimal("0.000201")
    assert resp.cost.amount == Decimal("0.000201")
    assert resp.cost.to_dict() == second.cost.to_dict()
    assert json.loads(json.dumps(resp.cost.to_dict()))["amount"] == "0.000201"  # exact, JSON-ready
    assert resp.route.deployment == "fw:accounts/fireworks/models/llama-v3p1-8b-instruct"


def test_failover_across_currencies_sums_in_the_reporting_currency(siliconflow_server, fireworks_server):
    """Both attempts billed, CNY then USD: SiliconFlow sent its role chunk (with cumulative usage: the
    prompt was processed) and then reset before any content, so the call failed over; with a CNY rate
    the call's amount is the exact sum in USD and each attempt keeps its own currency."""
    siliconflow_server.push(Reply(usage={"prompt_tokens": PROMPT}, pieces=PIECES, reset_after_chunks=0))
    fireworks_server.push(Reply(**USAGE_REPLY))
    cfg = config(
        {"sf": provider("siliconflow", siliconflow_server), "fw": provider("fireworks", fireworks_server)},
        {"t": ["sf:Qwen/Qwen2.5-72B-Instruct", "fw:accounts/fireworks/models/llama-v3p1-8b-instruct"]},
        pricing={"reporting_currency": "USD", "exchange_rates": {"CNY": "0.14"}},
    )
    with Client(config=cfg) as client:
        with client.chat.completions.create(model="t", messages=MESSAGES, stream=True) as stream:
            _, text, _ = drain(stream)
    assert text == "".join(PIECES)
    resp = stream.response
    first, second = resp.route.attempts
    assert (first.status, first.billed) == ("error", True)
    # 1000 prompt tokens x 4.13 CNY per million, no output.
    assert (first.cost.amount, first.cost.currency, first.cost.output_tokens) == (Decimal("0.00413"), "CNY", 0)
    assert (second.cost.amount, second.cost.currency) == (Decimal("0.000201"), "USD")
    cost = resp.cost
    # 0.00413 CNY x 0.14 = 0.0005782 USD, plus 0.000201 USD.
    assert cost.amount == Decimal("0.0007792") and cost.currency == "USD"
    assert (cost.input_amount, cost.cached_amount, cost.output_amount) == (
        Decimal("0.0006982"), Decimal("0.00008"), Decimal("0.000001"))
    assert dict(cost.by_currency) == {"CNY": Decimal("0.00413"), "USD": Decimal("0.000201")}
    assert (cost.input_tokens, cost.cached_tokens, cost.output_tokens) == (2 * PROMPT, CACHED, COMPLETION)


def test_failover_across_currencies_without_a_rate_is_mixed_never_invented(siliconflow_server, fireworks_server):
    siliconflow_server.push(Reply(usage={"prompt_tokens": PROMPT}, pieces=PIECES, reset_after_chunks=0))
    fireworks_server.push(Reply(**USAGE_REPLY))
    cfg = config(
        {"sf": provider("siliconflow", siliconflow_server), "fw": provider("fireworks", fireworks_server)},
        {"t": ["sf:Qwen/Qwen2.5-72B-Instruct", "fw:accounts/fireworks/models/llama-v3p1-8b-instruct"]},
    )
    with Client(config=cfg) as client:
        with client.chat.completions.create(model="t", messages=MESSAGES, stream=True) as stream:
            drain(stream)
    cost = stream.response.cost
    assert cost.amount is None and cost.currency == "mixed" and cost.priced is True
    assert dict(cost.by_currency) == {"CNY": Decimal("0.00413"), "USD": Decimal("0.000201")}


def test_interrupted_stream_is_billed_at_estimated_usage(together_server):
    """Content reached the caller, then the connection was reset: StreamInterruptedError, and the
    attempt is billed for what it produced, counted locally (estimated)."""
    model = "meta-llama/Llama-3.3-70B-Instruct-Turbo"
    together_server.push(Reply(pieces=PIECES, reset_after_chunks=2))
    with Client(config=config({"p": provider("together", together_server)}, {"t": [f"p:{model}"]})) as client:
        stream = client.chat.completions.create(model="t", messages=MESSAGES, stream=True)
        with pytest.raises(L.StreamInterruptedError) as info:
            drain(stream)
    err = info.value
    assert err.partial_text == "one two"
    (attempt,) = err.attempts
    assert attempt.status == "interrupted" and attempt.billed is True and attempt.usage_estimated is True
    prompt, completion = count_message_tokens(MESSAGES), count_text_tokens("one two")
    cost = attempt.cost
    assert (cost.input_tokens, cost.output_tokens, cost.cached_tokens) == (prompt, completion, 0)
    assert cost.amount == per_million(prompt + completion, "1.04")
    assert cost.estimated is True


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_missing_usage_gives_an_estimated_cost(fireworks_server, stream):
    model = "accounts/fireworks/models/llama-v3p1-8b-instruct"
    fireworks_server.push(Reply(omit_usage=True, pieces=PIECES))
    with Client(config=config({"p": provider("fireworks", fireworks_server)}, {"t": [f"p:{model}"]})) as client:
        resp = _call(client, "t", stream)
    prompt, completion = count_message_tokens(MESSAGES), count_text_tokens("".join(PIECES))
    assert resp.route.usage_estimated is True
    assert resp.cost.estimated is True
    assert (resp.cost.input_tokens, resp.cost.output_tokens) == (prompt, completion)
    assert resp.cost.amount == per_million(prompt + completion, "0.20")
    assert "estimated" in str(resp.cost)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_unpriced_deployment_with_strict_off_costs_none_never_zero(vllm_server, stream):
    cfg = config({"gpu": provider("vllm", vllm_server)}, {"t": ["gpu:Qwen/Qwen2.5-7B-Instruct"]},
                 pricing={"strict": False})
    vllm_server.push(Reply(pieces=PIECES))
    with Client(config=cfg) as client:
        resp = _call(client, "t", stream)
    assert resp.choices[0].message.content == "".join(PIECES)
    cost = resp.cost
    assert cost.amount is None and cost.priced is False and cost.currency is None
    assert cost.input_amount is None and cost.output_amount is None
    assert cost.output_tokens == COMPLETION  # tokens are still counted
    assert str(cost) == "unpriced"


def test_unpriced_deployment_is_a_config_error_when_strict(vllm_server):
    cfg = config({"gpu": provider("vllm", vllm_server)}, {"t": ["gpu:Qwen/Qwen2.5-7B-Instruct"]})
    with pytest.raises(L.ConfigError) as info:
        Client(config=cfg)
    assert "gpu:Qwen/Qwen2.5-7B-Instruct" in str(info.value) and "tiers.t.deployments[0]" in str(info.value)
    assert vllm_server.requests == []


# -- the real llama.cpp server, priced in the config -------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_llamacpp_config_priced_cost_with_cached_tokens(llama_server, stream):
    from tests.servers.llamacpp import MODEL_ALIAS

    pricing = {f"local:{MODEL_ALIAS}": {"input_per_million": "0.05", "output_per_million": "0.10",
                                        "cached_input_per_million": "0.01", "currency": "USD"}}
    cfg = config({"local": {"kind": "llamacpp", "base_url": llama_server.base_url}},
                 {"small": [f"local:{MODEL_ALIAS}"]}, pricing=pricing)
    long = [{"role": "user", "content": "Repeat after me: " + "the quick brown fox " * 30}]
    with Client(config=cfg) as client:
        client.chat.completions.create(model="small", messages=long, max_tokens=2)  # warms the prompt cache
        out = client.chat.completions.create(model="small", messages=long, max_tokens=3, stream=stream)
        if stream:
            with out:
                drain(out)
            out = out.response
    usage = out.usage
    prompt, cached, completion = (usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens,
                                  usage.completion_tokens)
    assert out.route.usage_estimated is False and cached > 0 and 0 < completion <= 3
    cost = out.cost
    assert (cost.input_tokens, cost.cached_tokens, cost.output_tokens) == (prompt, cached, completion)
    assert cost.input_amount == per_million(prompt - cached, "0.05")
    assert cost.cached_amount == per_million(cached, "0.01")
    assert cost.output_amount == per_million(completion, "0.10")
    assert cost.amount == cost.input_amount + cost.cached_amount + cost.output_amount
    assert cost.currency == "USD" and cost.price_version.startswith("config:") and cost.estimated is False
