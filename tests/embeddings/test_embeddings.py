"""`client.embeddings.create` on every platform kind, over real sockets to the loopback servers.

Each platform's answer comes back OpenAI-shaped (vectors in input order, usage), priced at the
deployment's input rate, written to the ledger once per attempt, and failed over like chat."""

from __future__ import annotations

import asyncio
import base64
import struct
from decimal import Decimal

import pytest

import llmroute as L
from llmroute.accounting.ledger import MemorySink
from tests.embeddings.helpers import (
    INPUT_PRICE, NO_RETRIES, PLATFORMS, SERVER_OF, SERVER_TOKENS, TEXTS, embed_config, expected_vectors,
)
from tests.servers.embeddings import embedding_vector
from tests.servers.fault import status
from tests.servers.script import Reply

NATIVE_PATH = "/api/v1/services/embeddings/text-embedding/text-embedding"


def fault_then_vllm(fault_server, vllm_server) -> dict:
    """An embedding tier: the fault server's deployment first, then vLLM's."""
    return {
        "providers": {"f": {"kind": "openai-compatible", "base_url": fault_server.base_url},
                      "v": {"kind": "vllm", "base_url": vllm_server.base_url}},
        "tiers": {"embed": {"kind": "embedding", "deployments": ["f:fault-embed", "v:BAAI/bge-m3"]}},
        "resilience": dict(NO_RETRIES),
        "pricing": {"f:*": {"input_per_million": 1, "output_per_million": 0},
                    "v:*": {"input_per_million": 2, "output_per_million": 0}},
    }


def _check_answer(platform: str, resp, server, sink) -> None:
    kind, protocol, model, size, reports_usage = PLATFORMS[platform]
    assert [d.index for d in resp.data] == [0, 1]
    assert [d.embedding for d in resp.data] == expected_vectors(platform)
    assert resp.object == "list" and resp.data[0].object == "embedding"
    request = server.last_request
    if protocol == "native":  # DashScope's own body: input.texts, parameters
        assert request.path == NATIVE_PATH and request.json["input"] == {"texts": TEXTS}
    else:
        assert request.path.endswith("/embeddings") and request.json["input"] == TEXTS
    assert request.json["model"] == model
    tokens = resp.usage.prompt_tokens
    if reports_usage:
        assert tokens == SERVER_TOKENS and resp.route.usage_estimated is False
    else:  # Together sends no usage: counted here with tiktoken, and flagged
        from llmroute.accounting.tokens import count_text_tokens

        assert tokens == sum(count_text_tokens(t) for t in TEXTS) and resp.route.usage_estimated is True
    assert resp.usage.total_tokens == tokens
    assert resp.route.deployment == f"p:{model}" and resp.route.tier == "embed"
    assert resp.cost.amount == Decimal(str(INPUT_PRICE)) * tokens / 10**6 and resp.cost.currency == "USD"
    (record,) = sink.records
    assert (record.input_tokens, record.output_tokens, record.status) == (tokens, 0, "ok")
    assert record.cost == resp.cost.amount and record.deployment == f"p:{model}"
    assert record.usage_estimated is (not reports_usage)
    assert "route" not in resp.model_dump() and "cost" not in resp.model_dump()


def test_sync_embeddings_on_every_platform(platform):
    name, server = platform
    sink = MemorySink()
    with L.Client(embed_config(name, server), ledger=sink) as client:
        resp = client.embeddings.create(model="embed", input=TEXTS, feature="rag-index")
    _check_answer(name, resp, server, sink)
    assert sink.records[0].feature == "rag-index"


def test_async_embeddings_on_every_platform(platform):
    name, server = platform
    sink = MemorySink()

    async def main():
        async with L.AsyncClient(embed_config(name, server), ledger=sink) as client:
            return await client.embeddings.create(model="embed", input=TEXTS)

    _check_answer(name, asyncio.run(main()), server, sink)


def test_one_string_and_a_deployment_id(siliconflow_server):
    with L.Client(embed_config("siliconflow", siliconflow_server)) as client:
        resp = client.embeddings.create(model="p:BAAI/bge-m3", input="one text")
    assert len(resp.data) == 1 and resp.data[0].embedding == embedding_vector("one text", 1024)
    assert siliconflow_server.last_request.json["input"] == "one text"
    assert resp.route.reason == "deployment: p:BAAI/bge-m3"


def test_dimensions_and_base64_reach_the_platform(siliconflow_server, bailian_server):
    config = embed_config("siliconflow", siliconflow_server)
    config["tiers"]["embed"]["deployments"] = ["p:Qwen/Qwen3-Embedding-8B"]
    with L.Client(config) as client:
        resp = client.embeddings.create(model="embed", input=TEXTS, dimensions=256, encoding_format="base64")
    raw = base64.b64decode(resp.data[0].embedding)
    floats = struct.unpack(f"<{len(raw) // 4}f", raw)
    assert len(floats) == 256 and floats[0] == pytest.approx(embedding_vector(TEXTS[0], 256)[0], abs=1e-6)
    assert siliconflow_server.last_request.json["dimensions"] == 256
    # DashScope native: `dimensions` is sent as parameters.dimension
    with L.Client(embed_config("bailian-native", bailian_server)) as client:
        resp = client.embeddings.create(model="embed", input=TEXTS, dimensions=512)
    assert bailian_server.last_request.json["parameters"] == {"dimension": 512}
    assert len(resp.data[0].embedding) == 512


def test_failover_to_the_next_deployment_records_both_attempts(fault_server, vllm_server):
    config = fault_then_vllm(fault_server, vllm_server)
    fault_server.push(status(503))
    sink = MemorySink()
    with L.Client(config, ledger=sink) as client:
        resp = client.embeddings.create(model="embed", input=TEXTS)
        health = client.health()
    assert resp.route.deployment == "v:BAAI/bge-m3"
    assert [a.status for a in resp.route.attempts] == ["error", "ok"]
    assert resp.route.attempts[0].error_type == "OverloadedError"
    assert [(r.deployment, r.status) for r in sink.records] == [("f:fault-embed", "error"), ("v:BAAI/bge-m3", "ok")]
    assert sink.records[0].cost is None or sink.records[0].input_tokens == 0  # nothing billed for a 503
    assert health["f:fault-embed"].calls_in_window == 1 and health["f:fault-embed"].failure_rate == 1.0


def test_a_short_answer_is_an_error_and_fails_over(fault_server, vllm_server):
    """A platform that returns fewer vectors than inputs must not pass as a result."""
    config = fault_then_vllm(fault_server, vllm_server)
    fault_server.push(Reply(body={"object": "list", "data": [{"index": 0, "embedding": [0.1]}], "model": "x"}))
    with L.Client(config) as client:
        resp = client.embeddings.create(model="embed", input=TEXTS)
    assert resp.route.deployment == "v:BAAI/bge-m3"
    assert "1 embeddings for 2 inputs" in resp.route.attempts[0].error_message


def test_connection_reset_fails_over(fault_server, vllm_server):
    config = fault_then_vllm(fault_server, vllm_server)
    fault_server.push(Reply(reset_before=True))

    async def main():
        async with L.AsyncClient(config) as client:
            return await client.embeddings.create(model="embed", input=TEXTS)

    resp = asyncio.run(main())
    assert resp.route.attempts[0].error_type == "APIConnectionError" and resp.route.deployment == "v:BAAI/bge-m3"


def test_typed_errors_name_the_deployment_and_hide_the_key(together_server):
    together_server.push(Reply(error="auth"))
    with L.Client(embed_config("together", together_server)) as client:
        with pytest.raises(L.AuthenticationError) as info:
            client.embeddings.create(model="embed", input=TEXTS)
    err = info.value
    assert err.deployment == "p:BAAI/bge-large-en-v1.5" and err.status == 401
    assert together_server.api_key not in f"{err} {err!r} {err.provider_message}"
    assert [a.status for a in err.attempts] == ["error"]


@pytest.mark.parametrize("platform_name", ["bailian", "bailian-native"])
def test_dashscope_takes_ten_texts_a_request_so_longer_inputs_are_split(bailian_server, platform_name):
    texts = [f"text number {i}" for i in range(23)]
    sink = MemorySink()

    async def async_call():
        async with L.AsyncClient(embed_config(platform_name, bailian_server)) as client:
            return await client.embeddings.create(model="embed", input=texts)

    with L.Client(embed_config(platform_name, bailian_server), ledger=sink) as client:
        resp = client.embeddings.create(model="embed", input=texts)
    sent = [r.json for r in bailian_server.requests]
    sizes = [len(b["input"]["texts"]) if platform_name == "bailian-native" else len(b["input"]) for b in sent]
    assert sizes == [10, 10, 3]  # the loopback server refuses 11 or more, as DashScope does
    assert [d.index for d in resp.data] == list(range(23))
    assert [d.embedding for d in resp.data] == [embedding_vector(t, 1024) for t in texts]
    assert resp.usage.prompt_tokens == 3 * 23 and resp.route.usage_estimated is False
    (record,) = sink.records  # one attempt, one record, all three requests' tokens
    assert record.input_tokens == 69 and len(resp.route.attempts) == 1
    assert [d.embedding for d in asyncio.run(async_call()).data] == [d.embedding for d in resp.data]


def test_a_split_attempt_that_fails_midway_records_what_was_billed_and_fails_over(bailian_server, vllm_server):
    config = {
        "providers": {"b": {"kind": "bailian", "base_url": bailian_server.base_url, "api_key": bailian_server.api_key},
                      "v": {"kind": "vllm", "base_url": vllm_server.base_url}},
        "tiers": {"embed": {"kind": "embedding", "deployments": ["b:text-embedding-v4", "v:BAAI/bge-m3"]}},
        "resilience": dict(NO_RETRIES),
        "pricing": {"b:*": {"input_per_million": 1, "output_per_million": 0},
                    "v:*": {"input_per_million": 1, "output_per_million": 0}},
    }
    texts = [f"text number {i}" for i in range(15)]
    bailian_server.push(Reply(), Reply(error="overloaded"))
    sink = MemorySink()
    with L.Client(config, ledger=sink) as client:
        resp = client.embeddings.create(model="embed", input=texts)
    assert resp.route.deployment == "v:BAAI/bge-m3" and len(resp.data) == 15
    failed, ok = sink.records
    assert (failed.deployment, failed.status, failed.input_tokens) == ("b:text-embedding-v4", "error", 30)
    assert failed.cost > 0  # the first ten texts were embedded and billed before the 503
    assert (ok.status, ok.input_tokens) == ("ok", 45)


def test_native_dashscope_refuses_token_ids_before_sending(bailian_server):
    with L.Client(embed_config("bailian-native", bailian_server)) as client:
        with pytest.raises(L.BadRequestError, match="text, not token ids"):
            client.embeddings.create(model="embed", input=[1, 2, 3])
    assert bailian_server.requests == []


def test_token_ids_are_sent_as_given_and_counted(vllm_server):
    with L.Client(embed_config("vllm", vllm_server)) as client:
        resp = client.embeddings.create(model="embed", input=[[1, 2, 3], [4, 5]])
    assert vllm_server.last_request.json["input"] == [[1, 2, 3], [4, 5]]
    assert resp.usage.prompt_tokens == 5 and len(resp.data) == 2


@pytest.mark.parametrize("kwargs, field", [
    ({"input": TEXTS}, "model"),
    ({"model": "embed"}, "input"),
    ({"model": "embed", "input": ""}, "input"),
    ({"model": "embed", "input": ["a", ""]}, "input[1]"),
    ({"model": "embed", "input": ["a", 1]}, "input"),
    ({"model": "embed", "input": TEXTS, "dimensions": 0}, "dimensions"),
    ({"model": "embed", "input": TEXTS, "encoding_format": "int8"}, "encoding_format"),
    ({"model": "embed", "input": TEXTS, "pool": "nope"}, "pool"),
    ({"model": "embed", "input": TEXTS, "metadata": {"a": 1}}, "metadata.a"),
    ({"model": "auto", "input": TEXTS}, "model"),
    # llmroute's own arguments, checked as create()'s: a finite timeout (inf and 1e12 ended in a bare
    # OverflowError from the clock, nan in a 0 s timeout after sending), the ledger's caps, headers
    ({"model": "embed", "input": TEXTS, "timeout": float("nan")}, "timeout"),
    ({"model": "embed", "input": TEXTS, "timeout": float("inf")}, "timeout"),
    ({"model": "embed", "input": TEXTS, "timeout": 1e12}, "timeout"),
    ({"model": "embed", "input": TEXTS, "timeout": True}, "timeout"),
    ({"model": "embed", "input": TEXTS, "feature": "f" * 100_000}, "feature"),
    ({"model": "embed", "input": TEXTS, "feature": "a\nb"}, "feature"),
    ({"model": "embed", "input": TEXTS, "metadata": {"k": "v" * 100_000}}, "metadata.k"),
    ({"model": "embed", "input": TEXTS, "metadata": {f"k{i}": "v" for i in range(100)}}, "metadata"),
    ({"model": "embed", "input": TEXTS, "extra_headers": {"X-A": "a\r\nInjected: 1"}}, "extra_headers"),
])
def test_bad_arguments_are_refused_before_any_io(siliconflow_server, kwargs, field):
    with L.Client(embed_config("siliconflow", siliconflow_server)) as client:
        with pytest.raises(L.InvalidRequestError) as info:
            client.embeddings.create(**kwargs)
    assert info.value.field == field
    assert siliconflow_server.requests == []


def test_chat_and_embedding_tiers_do_not_mix(vllm_server):
    config = embed_config("vllm", vllm_server)
    config["tiers"]["chat"] = {"deployments": ["p:Qwen/Qwen2.5-7B-Instruct"]}
    with L.Client(config) as client:
        with pytest.raises(L.RoutingError, match="serves chat"):
            client.embeddings.create(model="chat", input=TEXTS)
        with pytest.raises(L.RoutingError, match="serves embeddings"):
            client.chat.completions.create(model="embed", messages=[{"role": "user", "content": "hi"}])
    assert vllm_server.requests == []


def test_config_refuses_mixed_fallback_and_routing_to_an_embedding_tier(vllm_server):
    config = embed_config("vllm", vllm_server)
    config["tiers"]["chat"] = {"deployments": ["p:Qwen/Qwen2.5-7B-Instruct"], "fallback_tier": "embed"}
    with pytest.raises(L.ConfigError, match="cannot fall back") as info:
        L.Client(config)
    assert info.value.key == "tiers.chat.fallback_tier"
    config["tiers"]["chat"].pop("fallback_tier")
    config["routing"] = {"default": "embed"}
    with pytest.raises(L.ConfigError) as info:
        L.Client(config)
    assert info.value.key.startswith("routing")
    del config["routing"]
    config["budgets"] = [{"name": "cap", "max_tokens": 10, "action": "downgrade", "downgrade_tier": "embed"}]
    with pytest.raises(L.ConfigError) as info:
        L.Client(config)
    assert info.value.key.startswith("budgets")


def test_shipped_price_prices_dashscope_embeddings(bailian_server):
    config = embed_config("bailian", bailian_server)
    del config["pricing"]["p:*"]  # the shipped table's text-embedding-v4 price (cn-beijing, CNY)
    config["providers"]["p"]["region"] = "cn-beijing"
    sink = MemorySink()
    with L.Client(config, ledger=sink) as client:
        resp = client.embeddings.create(model="embed", input=TEXTS)
    assert resp.cost.currency == "CNY" and resp.cost.amount > 0
    assert sink.records[0].priced is True and sink.records[0].cost == resp.cost.amount


def test_embedding_spans_say_embeddings_and_carry_tokens_and_cost(vllm_server):
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from llmroute._runtime.telemetry import Telemetry, TelemetryConfig

    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    with L.Client(embed_config("vllm", vllm_server)) as client:
        # The engine's telemetry on SDK providers of this test's own (the globals are process-wide).
        client._engine.recorder.telemetry = Telemetry(TelemetryConfig(), tracer_provider=tracer_provider,
                                             meter_provider=meter_provider)
        resp = client.embeddings.create(model="embed", input=TEXTS)
    spans = exporter.get_finished_spans()
    tracer_provider.shutdown()
    meter_provider.shutdown()
    call = next(s for s in spans if s.parent is None)
    assert call.name == "embeddings BAAI/bge-m3" and call.attributes["gen_ai.operation.name"] == "embeddings"
    assert [s.parent.span_id for s in spans if s.parent is not None] == [call.context.span_id]  # one attempt
    assert call.attributes["gen_ai.usage.input_tokens"] == SERVER_TOKENS
    assert call.attributes["llmroute.cost"] == pytest.approx(float(resp.cost.amount))


def test_budgets_count_embeddings_refuse_them_and_never_downgrade_them_to_chat(vllm_server):
    config = embed_config("vllm", vllm_server)
    config["tiers"]["chat"] = {"deployments": ["p:Qwen/Qwen2.5-7B-Instruct"]}
    config["budgets"] = [
        {"name": "rag-down", "when": {"feature": "rag"}, "max_tokens": 12, "action": "downgrade",
         "downgrade_tier": "chat"},
        {"name": "bulk-cap", "when": {"feature": "bulk"}, "max_tokens": 12, "action": "refuse"},
    ]
    with L.Client(config) as client:
        for _ in range(2):  # the second call is over the 12-token budget: downgrade has no embedding tier
            resp = client.embeddings.create(model="embed", input=TEXTS, feature="rag")
            assert resp.route.deployment == "p:BAAI/bge-m3" and resp.route.tier == "embed"
        client.embeddings.create(model="embed", input=TEXTS, feature="bulk")
        with pytest.raises(L.BudgetExceededError) as info:
            client.embeddings.create(model="embed", input=TEXTS, feature="bulk")
    assert info.value.budget == "bulk-cap"
    assert all(r.path == "/v1/embeddings" for r in vllm_server.requests) and len(vllm_server.requests) == 3


@pytest.mark.parametrize("kind, error", [("overloaded", L.OverloadedError), ("bad_request", L.BadRequestError)])
def test_each_platform_error_shape_maps_to_its_typed_error(platform, kind, error):
    """Every platform's own error envelope (OpenAI's, SiliconFlow's code/message, DashScope's flat
    native one, TGI's string) -> the same typed error, naming the deployment, for embeddings and lists."""
    name, server = platform
    model = PLATFORMS[name][2]
    server.push(Reply(error=kind))
    with L.Client(embed_config(name, server)) as client:
        with pytest.raises(error) as info:
            client.embeddings.create(model="embed", input=TEXTS)
        # TGI's bad request is a 422: the UnprocessableEntityError kind of BadRequestError (openai's name).
        expected = L.UnprocessableEntityError if name == "tgi" and kind == "bad_request" else error
        assert type(info.value) is expected and info.value.deployment == f"p:{model}"
        server.push(Reply(error=kind))
        with pytest.raises(error):
            client.models.list(provider="p")
        health = client.health()[f"p:{model}"]
    # The platform's fault counts against its breaker; the caller's (a 400) does not.
    assert (health.calls_in_window, health.failures_in_window) == ((1, 1) if kind == "overloaded" else (0, 0))


@pytest.mark.parametrize("name", sorted(p for p in PLATFORMS if p != "tgi"))  # TEI checks no model name
def test_an_unknown_embedding_model_is_not_found(name, loopback_servers):
    server = loopback_servers.get(SERVER_OF.get(name, name))
    server.reset()
    config = embed_config(name, server)
    config["tiers"]["embed"]["deployments"] = ["p:no-such-embedding-model"]
    with L.Client(config) as client:
        with pytest.raises(L.NotFoundError):
            client.embeddings.create(model="embed", input=TEXTS)
