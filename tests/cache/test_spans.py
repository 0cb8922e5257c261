"""Spans carry the cache outcome: `llmroute.cache` on the call span of a miss, a hit and a bypass."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from llmroute import Client
from llmroute._runtime.telemetry import Telemetry
from tests.cache.conftest import MESSAGES, cache_config


def test_call_spans_carry_the_cache_outcome(vllm_server):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with Client(config=cache_config(vllm_server)) as client:
        client._engine.recorder.telemetry = Telemetry(tracer_provider=provider)
        for kw in ({}, {}, {"cache": False}):
            client.chat.completions.create(model="t", messages=MESSAGES, temperature=0, **kw)
    calls = [s for s in exporter.get_finished_spans() if s.parent is None]
    assert [s.attributes.get("llmroute.cache") for s in calls] == ["miss", "hit", "bypass"]
    hit = calls[1]
    assert hit.attributes["llmroute.cost"] == 0 and hit.attributes["gen_ai.usage.input_tokens"] == 0
    assert hit.attributes["llmroute.attempts"] == 0
    assert len([s for s in exporter.get_finished_spans() if s.parent is not None]) == 2  # attempts: miss, bypass
