"""llmroute._runtime.telemetry against the OpenTelemetry SDK's in-memory exporter and metric reader.

Each test builds its own TracerProvider / MeterProvider and passes them in, so no global OpenTelemetry
state leaks between tests; the global-provider path is exercised in subprocesses.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import threading
from decimal import Decimal
from pathlib import Path

import pydantic
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics
from opentelemetry.trace import SpanKind, StatusCode

from llmroute import errors
from llmroute._runtime.secrets import register_secret
from llmroute._runtime.telemetry import SCHEMA_URL, Telemetry, TelemetryConfig, error_type, provider_name_for


class Harness:
    def __init__(self, sampler=None, **config):
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider(sampler=sampler) if sampler else TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.telemetry = Telemetry(
            TelemetryConfig(**config), tracer_provider=self.tracer_provider, meter_provider=self.meter_provider
        )

    def spans(self):
        return {span.name: span for span in self.exporter.get_finished_spans()}

    def metrics(self):
        data = self.reader.get_metrics_data()
        found = {}
        if data is None:
            return found
        for resource_metrics in data.resource_metrics:
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    found[metric.name] = metric
        return found


@pytest.fixture
def h():
    harness = Harness()
    yield harness
    harness.tracer_provider.shutdown()
    harness.meter_provider.shutdown()


def one_good_call(tel, *, stream=True, messages=None):
    call = tel.start_call(
        request_model="meta-llama/Llama-3.3-70B-Instruct-Turbo",
        now=10.0,
        stream=stream,
        provider_name="together",
        tier="large",
        feature="summarize",
        pool="shared",
        route_reason="rule:long-input",
        requested_model="large",
        request_params={"max_tokens": 64, "temperature": 0.2, "stop": "###", "n": 1},
        messages=messages,
    )
    attempt = call.start_attempt(
        now=10.01,
        attempt_number=1,
        provider_name="together",
        deployment="together:meta-llama/Llama-3.3-70B-Instruct-Turbo",
        request_model="meta-llama/Llama-3.3-70B-Instruct-Turbo",
        server_address="api.together.xyz",
        server_port=443,
        breaker_state="closed",
    )
    attempt.first_chunk(10.25)
    attempt.end(
        now=11.0,
        response_model="meta-llama/Llama-3.3-70B-Instruct-Turbo-0425",
        input_tokens=120,
        output_tokens=30,
        finish_reasons=["stop"],
        response_id="resp-1",
    )
    call.end(
        now=11.5,
        response_model="meta-llama/Llama-3.3-70B-Instruct-Turbo-0425",
        input_tokens=120,
        output_tokens=30,
        cost=Decimal("0.000132"),
        currency="USD",
        finish_reasons=["stop"],
        response_id="resp-1",
        output_messages=[{"role": "assistant", "content": "A short summary."}],
    )
    return call


# -- config -------------------------------------------------------------------------------------------------


def test_config_defaults_and_unknown_keys():
    config = TelemetryConfig()
    assert (config.enabled, config.capture_content, config.metrics, config.tracer_name) == (
        True,
        False,
        True,
        "llmroute",
    )
    with pytest.raises(pydantic.ValidationError, match="capture_contents"):
        TelemetryConfig(capture_contents=True)


# -- spans --------------------------------------------------------------------------------------------------


def test_call_span_name_kind_parent_and_attributes(h):
    one_good_call(h.telemetry)
    spans = h.spans()
    assert set(spans) == {
        "chat meta-llama/Llama-3.3-70B-Instruct-Turbo",
        "attempt 1 together:meta-llama/Llama-3.3-70B-Instruct-Turbo",
    }
    call = spans["chat meta-llama/Llama-3.3-70B-Instruct-Turbo"]
    attempt = spans["attempt 1 together:meta-llama/Llama-3.3-70B-Instruct-Turbo"]
    assert call.kind is SpanKind.CLIENT
    assert attempt.kind is SpanKind.INTERNAL
    assert call.parent is None
    assert attempt.parent.span_id == call.context.span_id
    assert attempt.context.trace_id == call.context.trace_id
    assert call.instrumentation_scope.name == "llmroute"
    assert call.instrumentation_scope.schema_url == SCHEMA_URL
    assert call.status.status_code is StatusCode.UNSET

    assert dict(call.attributes) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "together",
        "gen_ai.request.model": "meta-llama/Llama-3.3-70B-Instruct-Turbo",
        "gen_ai.request.stream": True,
        "gen_ai.request.max_tokens": 64,
        "gen_ai.request.temperature": 0.2,
        "gen_ai.request.stop_sequences": ("###",),
        "gen_ai.response.model": "meta-llama/Llama-3.3-70B-Instruct-Turbo-0425",
        "gen_ai.response.id": "resp-1",
        "gen_ai.response.finish_reasons": ("stop",),
        "gen_ai.response.time_to_first_chunk": pytest.approx(0.25),
        "gen_ai.usage.input_tokens": 120,
        "gen_ai.usage.output_tokens": 30,
        "server.address": "api.together.xyz",
        "server.port": 443,
        "llmroute.tier": "large",
        "llmroute.feature": "summarize",
        "llmroute.pool": "shared",
        "llmroute.route_reason": "rule:long-input",
        "llmroute.requested_model": "large",
        "llmroute.cost": pytest.approx(0.000132),
        "llmroute.currency": "USD",
        "llmroute.attempts": 1,
    }
    assert dict(attempt.attributes) == {
        "gen_ai.provider.name": "together",
        "gen_ai.request.model": "meta-llama/Llama-3.3-70B-Instruct-Turbo",
        "gen_ai.response.model": "meta-llama/Llama-3.3-70B-Instruct-Turbo-0425",
        "gen_ai.response.id": "resp-1",
        "gen_ai.response.finish_reasons": ("stop",),
        "gen_ai.response.time_to_first_chunk": pytest.approx(0.24),
        "server.address": "api.together.xyz",
        "server.port": 443,
        "llmroute.deployment": "together:meta-llama/Llama-3.3-70B-Instruct-Turbo",
        "llmroute.attempt": 1,
        "llmroute.attempt.kind": "first",
        "llmroute.breaker_state": "closed",
        "llmroute.attempt.input_tokens": 120,
        "llmroute.attempt.output_tokens": 30,
        "llmroute.attempt.duration_s": pytest.approx(0.99),
    }


def test_every_gen_ai_name_we_emit_is_in_the_semconv_registry(h):
    one_good_call(h.telemetry, messages=[{"role": "user", "content": "hi"}])
    with_content = Harness(capture_content=True)
    one_good_call(with_content.telemetry, messages=[{"role": "user", "content": "hi"}])
    registry = {
        getattr(gen_ai_attributes, name)
        for name in dir(gen_ai_attributes)
        if name.startswith("GEN_AI_") and isinstance(getattr(gen_ai_attributes, name), str)
    }
    deprecated = {"gen_ai.system", "gen_ai.prompt", "gen_ai.completion", "gen_ai.usage.prompt_tokens"}
    emitted = set()
    for harness in (h, with_content):
        for span in harness.exporter.get_finished_spans():
            emitted |= {key for key in span.attributes if key.startswith("gen_ai.")}
    assert "gen_ai.input.messages" in emitted
    assert emitted <= registry
    assert not emitted & deprecated
    metric_names = {
        getattr(gen_ai_metrics, name)
        for name in dir(gen_ai_metrics)
        if name.startswith("GEN_AI_") and isinstance(getattr(gen_ai_metrics, name), str)
    }
    ours = {name for name in h.metrics() if name.startswith("gen_ai.")}
    assert ours == {
        "gen_ai.client.operation.duration",
        "gen_ai.client.token.usage",
        "gen_ai.client.operation.time_to_first_chunk",
    }
    assert ours <= metric_names


def test_retry_then_failover_to_another_model(h):
    call = h.telemetry.start_call(request_model="model-a", now=0.0, provider_name="fireworks", tier="small")
    first = call.start_attempt(
        now=0.0,
        attempt_number=1,
        provider_name="fireworks",
        deployment="fw:model-a",
        request_model="model-a",
        server_address="api.fireworks.ai",
        server_port=443,
        breaker_state="closed",
    )
    first.end(
        now=0.2,
        error=errors.RateLimitError("slow down", provider="fw", deployment="fw:model-a", status=429),
    )
    second = call.start_attempt(
        now=0.5,
        attempt_number=2,
        provider_name="siliconflow",
        deployment="sf:model-b",
        request_model="model-b",
        server_address="api.siliconflow.cn",
        server_port=443,
        breaker_state="half_open",
        kind="failover",
    )
    second.end(now=0.9, response_model="model-b", input_tokens=5, output_tokens=7)
    call.end(now=1.0, response_model="model-b", input_tokens=5, output_tokens=7)

    spans = h.spans()
    failed = spans["attempt 1 fw:model-a"]
    assert failed.attributes["error.type"] == "RateLimitError"
    assert failed.attributes["http.response.status_code"] == 429
    assert failed.status.status_code is StatusCode.ERROR
    assert "slow down" in failed.status.description
    assert spans["attempt 2 sf:model-b"].attributes["llmroute.attempt.kind"] == "failover"
    assert spans["attempt 2 sf:model-b"].attributes["llmroute.breaker_state"] == "half_open"
    # The call span names the model that answered, and carries the answering attempt's provider and server.
    assert "chat model-a" not in spans
    top = spans["chat model-b"]
    assert top.kind is SpanKind.CLIENT
    assert top.status.status_code is StatusCode.UNSET
    assert "error.type" not in top.attributes
    assert top.attributes["gen_ai.request.model"] == "model-b"
    assert top.attributes["gen_ai.provider.name"] == "siliconflow"
    assert top.attributes["server.address"] == "api.siliconflow.cn"
    assert top.attributes["llmroute.attempts"] == 2
    assert "gen_ai.request.stream" not in top.attributes
    assert "gen_ai.response.time_to_first_chunk" not in top.attributes
    for child in (failed, spans["attempt 2 sf:model-b"]):
        assert child.parent.span_id == top.context.span_id


def test_failed_call_sets_error_type_and_never_leaks_a_key(h):
    key = "sk-telemetrytestkey0123456789"
    register_secret(key)
    call = h.telemetry.start_call(request_model="m", now=0.0, provider_name="together")
    attempt = call.start_attempt(
        now=0.0, attempt_number=1, provider_name="together", deployment="t:m", request_model="m"
    )
    auth = errors.AuthenticationError(f"Incorrect API key provided: {key}", status=401)
    attempt.end(now=0.1, error=auth)
    failure = errors.AllDeploymentsFailedError(f"all failed; last said {key}", attempts=[])
    call.end(now=0.2, error=failure)

    spans = h.spans()
    top = spans["chat m"]
    assert top.attributes["error.type"] == "AllDeploymentsFailedError"
    assert top.status.status_code is StatusCode.ERROR
    assert spans["attempt 1 t:m"].attributes["error.type"] == "AuthenticationError"
    for span in spans.values():
        text = json.dumps({"attrs": dict(span.attributes), "status": span.status.description}, default=str)
        assert key not in text
    duration = h.metrics()["gen_ai.client.operation.duration"].data.data_points[0]
    assert duration.attributes["error.type"] == "AllDeploymentsFailedError"


def test_error_type_names():
    assert error_type(errors.ContextLengthError("too long")) == "ContextLengthError"
    assert error_type(ValueError("x")) == "ValueError"
    assert error_type(asyncio.CancelledError()) == "asyncio.exceptions.CancelledError"
    assert provider_name_for("together") == "together"
    assert provider_name_for("mistral") == "mistral_ai"


def test_breaker_skip_is_a_zero_length_child(h):
    call = h.telemetry.start_call(request_model="m", now=0.0)
    call.skip(deployment="t:m", reason="breaker_open", provider_name="together", breaker_state="open")
    attempt = call.start_attempt(now=0.0, attempt_number=1, provider_name="vllm", deployment="v:m", request_model="m")
    attempt.end(now=0.1)
    call.end(now=0.1)
    spans = h.spans()
    skip = spans["skip t:m"]
    assert skip.parent.span_id == spans["chat m"].context.span_id
    assert skip.end_time >= skip.start_time
    assert dict(skip.attributes) == {
        "llmroute.deployment": "t:m",
        "llmroute.skipped_reason": "breaker_open",
        "llmroute.breaker_state": "open",
        "gen_ai.provider.name": "together",
    }
    assert spans["chat m"].attributes["gen_ai.provider.name"] == "vllm"


def test_hedge_loser_is_cancelled_and_winner_answers(h):
    call = h.telemetry.start_call(request_model="m", now=0.0, stream=True, provider_name="together")
    primary = call.start_attempt(now=0.0, attempt_number=1, provider_name="together", deployment="t:m", request_model="m")
    hedge = call.start_attempt(
        now=0.3, attempt_number=2, provider_name="fireworks", deployment="f:m", request_model="m", kind="hedge"
    )
    hedge.first_chunk(0.4)
    primary.first_chunk(0.6)
    primary.end(now=0.61, cancelled=True)
    hedge.end(now=1.0, input_tokens=3, output_tokens=4)
    call.end(now=1.0, input_tokens=3, output_tokens=4)

    spans = h.spans()
    loser = spans["attempt 1 t:m"]
    assert loser.attributes["llmroute.attempt.cancelled"] is True
    assert loser.status.status_code is StatusCode.UNSET
    assert spans["attempt 2 f:m"].attributes["llmroute.attempt.kind"] == "hedge"
    top = spans["chat m"]
    assert top.attributes["gen_ai.provider.name"] == "fireworks"
    # The call's first chunk is the earliest of any attempt.
    assert top.attributes["gen_ai.response.time_to_first_chunk"] == pytest.approx(0.4)
    ttfc = h.metrics()["gen_ai.client.operation.time_to_first_chunk"].data.data_points[0]
    assert ttfc.sum == pytest.approx(0.4)


def test_when_two_attempts_succeed_the_first_to_end_answers(h):
    call = h.telemetry.start_call(request_model="m", now=0.0)
    one = call.start_attempt(now=0.0, attempt_number=1, provider_name="together", deployment="t:m", request_model="m")
    two = call.start_attempt(now=0.1, attempt_number=2, provider_name="fireworks", deployment="f:m", request_model="m")
    two.end(now=0.5)
    one.end(now=0.6)
    call.end(now=0.6)
    assert h.spans()["chat m"].attributes["gen_ai.provider.name"] == "fireworks"


# -- content capture ----------------------------------------------------------------------------------------


MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "Weather?"}, {"type": "image_url", "image_url": {"url": "https://x/y.png"}}]},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "rainy"},
]


def test_content_is_not_captured_by_default(h):
    one_good_call(h.telemetry, messages=MESSAGES)
    for span in h.exporter.get_finished_spans():
        assert "gen_ai.input.messages" not in span.attributes
        assert "gen_ai.output.messages" not in span.attributes
        assert "Be brief." not in json.dumps(dict(span.attributes), default=str)


def test_content_is_captured_in_semconv_parts_when_opted_in():
    h = Harness(capture_content=True)
    one_good_call(h.telemetry, messages=MESSAGES)
    top = h.spans()["chat meta-llama/Llama-3.3-70B-Instruct-Turbo"]
    assert json.loads(top.attributes["gen_ai.input.messages"]) == [
        {"role": "system", "parts": [{"type": "text", "content": "Be brief."}]},
        {
            "role": "user",
            "parts": [
                {"type": "text", "content": "Weather?"},
                {"type": "uri", "modality": "image", "uri": "https://x/y.png"},
            ],
        },
        {"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "weather", "arguments": {"city": "Paris"}}]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": "rainy"}]},
    ]
    assert json.loads(top.attributes["gen_ai.output.messages"]) == [
        {"role": "assistant", "parts": [{"type": "text", "content": "A short summary."}], "finish_reason": "stop"}
    ]
    attempt = h.spans()["attempt 1 together:meta-llama/Llama-3.3-70B-Instruct-Turbo"]
    assert "gen_ai.input.messages" not in attempt.attributes


def test_pydantic_messages_and_tool_call_finish_reason():
    class Message(pydantic.BaseModel):
        role: str
        content: str | None = None

    h = Harness(capture_content=True)
    call = h.telemetry.start_call(request_model="m", now=0.0, messages=[Message(role="user", content="hi")])
    call.end(
        now=1.0,
        finish_reasons=["tool_calls"],
        output_messages=[{"role": "assistant", "tool_calls": [{"id": "1", "function": {"name": "f", "arguments": "not json"}}]}],
    )
    top = h.spans()["chat m"]
    assert json.loads(top.attributes["gen_ai.input.messages"]) == [{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]
    assert json.loads(top.attributes["gen_ai.output.messages"]) == [
        {"role": "assistant", "parts": [{"type": "tool_call", "id": "1", "name": "f", "arguments": "not json"}], "finish_reason": "tool_call"}
    ]


# -- metrics ------------------------------------------------------------------------------------------------


def test_metrics_for_a_streamed_call(h):
    one_good_call(h.telemetry)
    metrics = h.metrics()
    duration = metrics["gen_ai.client.operation.duration"]
    assert duration.unit == "s"
    [point] = duration.data.data_points
    assert point.count == 1 and point.sum == pytest.approx(1.5)
    assert dict(point.attributes) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "together",
        "gen_ai.request.model": "meta-llama/Llama-3.3-70B-Instruct-Turbo",
        "gen_ai.response.model": "meta-llama/Llama-3.3-70B-Instruct-Turbo-0425",
        "server.address": "api.together.xyz",
        "server.port": 443,
        "llmroute.tier": "large",
        "llmroute.feature": "summarize",
    }
    assert list(point.explicit_bounds)[:3] == pytest.approx([0.01, 0.02, 0.04])
    assert list(point.explicit_bounds)[-1] == pytest.approx(81.92)

    tokens = metrics["gen_ai.client.token.usage"]
    assert tokens.unit == "{token}"
    by_type = {p.attributes["gen_ai.token.type"]: p.sum for p in tokens.data.data_points}
    assert by_type == {"input": 120, "output": 30}
    assert list(tokens.data.data_points[0].explicit_bounds)[-1] == 67108864

    ttfc = metrics["gen_ai.client.operation.time_to_first_chunk"]
    assert ttfc.unit == "s"
    assert ttfc.data.data_points[0].sum == pytest.approx(0.25)

    cost = metrics["llmroute.cost"]
    [cost_point] = cost.data.data_points
    assert cost_point.value == pytest.approx(0.000132)
    assert cost.unit == "{currency}"
    assert dict(cost_point.attributes) == {**point.attributes, "llmroute.currency": "USD", "llmroute.pool": "shared"}


def test_no_ttfc_when_not_streaming_and_no_tokens_when_unknown(h):
    call = h.telemetry.start_call(request_model="m", now=0.0)
    attempt = call.start_attempt(now=0.0, attempt_number=1, provider_name="vllm", deployment="v:m", request_model="m")
    attempt.first_chunk(0.1)  # a non-streamed call: the shell might still report it; the metric must not
    attempt.end(now=0.2)
    call.end(now=0.2)
    metrics = h.metrics()
    assert "gen_ai.client.operation.duration" in metrics
    assert "gen_ai.client.operation.time_to_first_chunk" not in metrics
    assert "gen_ai.client.token.usage" not in metrics
    assert "llmroute.cost" not in metrics


def test_metrics_can_be_turned_off():
    h = Harness(metrics=False)
    one_good_call(h.telemetry)
    assert h.metrics() == {}
    assert len(h.exporter.get_finished_spans()) == 2


# -- lifecycle ----------------------------------------------------------------------------------------------


def test_end_twice_is_ignored(h):
    call = h.telemetry.start_call(request_model="m", now=0.0)
    attempt = call.start_attempt(now=0.0, attempt_number=1, provider_name="vllm", deployment="v:m", request_model="m")
    attempt.end(now=0.1)
    attempt.end(now=0.2, error=ValueError("late"))
    call.end(now=0.3)
    call.end(now=0.4, error=ValueError("late"))
    spans = h.exporter.get_finished_spans()
    assert len(spans) == 2
    assert all(s.status.status_code is StatusCode.UNSET for s in spans)
    [point] = h.metrics()["gen_ai.client.operation.duration"].data.data_points
    assert point.count == 1 and point.sum == pytest.approx(0.3)


def test_spans_may_end_in_another_thread(h):
    call = h.telemetry.start_call(request_model="m", now=0.0, stream=True)
    attempt = call.start_attempt(now=0.0, attempt_number=1, provider_name="vllm", deployment="v:m", request_model="m")

    def finish():
        attempt.first_chunk(0.1)
        attempt.end(now=0.2)
        call.end(now=0.2)

    worker = threading.Thread(target=finish)
    worker.start()
    worker.join(timeout=10)
    spans = h.spans()
    assert spans["attempt 1 v:m"].parent.span_id == spans["chat m"].context.span_id


def test_spans_may_end_in_another_task(h):
    async def main():
        call = h.telemetry.start_call(request_model="m", now=0.0, stream=True)

        async def run_attempt(number):
            attempt = call.start_attempt(
                now=0.0, attempt_number=number, provider_name="vllm", deployment=f"v{number}:m", request_model="m"
            )
            await asyncio.sleep(0)
            return attempt

        first, second = await asyncio.gather(run_attempt(1), run_attempt(2))

        async def close():
            first.end(now=0.1, cancelled=True)
            second.end(now=0.2)
            call.end(now=0.2)

        await asyncio.wait_for(asyncio.create_task(close()), timeout=10)

    asyncio.run(main())
    spans = h.spans()
    for name in ("attempt 1 v1:m", "attempt 2 v2:m"):
        assert spans[name].parent.span_id == spans["chat m"].context.span_id


def test_sampled_out_call_records_no_span_but_metrics():
    h = Harness(sampler=ALWAYS_OFF)
    call = one_good_call(h.telemetry)
    assert call.is_recording is False
    assert h.exporter.get_finished_spans() == ()
    assert h.metrics()["gen_ai.client.operation.duration"].data.data_points[0].count == 1


def test_disabled_records_nothing():
    h = Harness(enabled=False)
    call = one_good_call(h.telemetry)
    assert call.is_recording is False and call.context is None
    assert h.exporter.get_finished_spans() == ()
    assert h.metrics() == {}


def test_attempt_context_nests_other_spans(h):
    call = h.telemetry.start_call(request_model="m", now=0.0)
    attempt = call.start_attempt(now=0.0, attempt_number=1, provider_name="vllm", deployment="v:m", request_model="m")
    inner = h.tracer_provider.get_tracer("http").start_span("POST", context=attempt.context)
    inner.end()
    attempt.end(now=0.1)
    call.end(now=0.1)
    spans = h.spans()
    assert spans["POST"].parent.span_id == spans["attempt 1 v:m"].context.span_id


# -- the global providers and the no-SDK path (subprocesses: global state is set-once) ------------------------


REPO = Path(__file__).resolve().parent.parent


def _clean_env() -> dict:
    # The subprocess must not inherit an OpenTelemetry set-up from the shell running the tests.
    return {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}


def run_python(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60, cwd=REPO, env=_clean_env()
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_without_opentelemetry_imported_nothing_is_imported():
    out = run_python(
        """
        import sys
        from llmroute._runtime.telemetry import Telemetry
        tel = Telemetry()
        call = tel.start_call(request_model="m", now=0.0, stream=True)
        attempt = call.start_attempt(now=0.0, attempt_number=1, provider_name="vllm", deployment="v:m", request_model="m")
        attempt.first_chunk(0.1); attempt.end(now=0.2); call.end(now=0.2)
        print(type(call).__name__, sorted(m for m in sys.modules if m.startswith("opentelemetry")))
        """
    )
    assert out == "_NoopCallTrace []"


def test_global_providers_set_after_the_client_is_built():
    out = run_python(
        """
        from llmroute._runtime.telemetry import Telemetry
        from opentelemetry import trace, metrics
        tel = Telemetry()
        before = type(tel.start_call(request_model="m", now=0.0)).__name__  # API imported, no SDK: no-op

        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        exporter = InMemorySpanExporter()
        provider = TracerProvider(); provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        reader = InMemoryMetricReader()
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))

        call = tel.start_call(request_model="m", now=0.0)
        call.start_attempt(now=0.0, attempt_number=1, provider_name="vllm", deployment="v:m", request_model="m").end(now=0.1)
        call.end(now=0.1)
        names = sorted(s.name for s in exporter.get_finished_spans())
        metric_names = sorted(m.name for rm in reader.get_metrics_data().resource_metrics for sm in rm.scope_metrics for m in sm.metrics)
        print(before, names, metric_names)
        """
    )
    assert out == "_NoopCallTrace ['attempt 1 v:m', 'chat m'] ['gen_ai.client.operation.duration']"


def test_provider_named_by_environment_variable_is_found_without_importing_the_api_first():
    code = """
        import sys
        from llmroute._runtime.telemetry import Telemetry
        call = Telemetry().start_call(request_model="m", now=0.0)
        print(type(call).__name__, call.is_recording)
        """
    env = _clean_env()
    env["OTEL_PYTHON_TRACER_PROVIDER"] = "sdk_tracer_provider"
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60, cwd=REPO, env=env
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "CallTrace True"
