"""Spans and metrics of real client calls (loopback Together and Fireworks servers), through the global
OpenTelemetry providers the Engine uses by default.

Global providers can be set once per process, so the calls run in a child process that installs an SDK
TracerProvider (in-memory exporter) and MeterProvider (in-memory reader), makes four calls (plain,
streamed, failed over, failed) and prints what was recorded as JSON; the tests read that.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from decimal import Decimal
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TG_MODEL = "meta-llama/Llama-3.3-70B-Instruct-Turbo"
FW_MODEL = "accounts/fireworks/models/llama-v3p1-8b-instruct"

CHILD = textwrap.dedent(
    """
    import json, sys
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(tracer_provider)
    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))

    import llmroute as L
    from tests.accounting._client import MESSAGES, config, provider
    from tests.servers.registry import SERVERS
    from tests.servers.script import Reply

    TG, FW = sys.argv[1], sys.argv[2]
    tg, fw = SERVERS["together"]().start(), SERVERS["fireworks"]().start()
    out = {"calls": {}}
    try:
        cfg = config({"tg": provider("together", tg), "fw": provider("fireworks", fw)},
                     {"large": [f"tg:{TG}", f"fw:{FW}"], "small": [f"fw:{FW}"]})
        with L.Client(config=cfg) as client:
            tg.push(Reply(usage={"prompt_tokens": 1000}, cached_tokens=400, pieces=["a", "b"]))
            r = client.chat.completions.create(model="large", messages=MESSAGES, feature="summarize", max_tokens=10)
            out["calls"]["plain"] = {"cost": str(r.cost.amount), "request_id": r.route.request_id}
            tg.push(Reply(pieces=["a", "b", "c"]))
            with client.chat.completions.create(model="large", messages=MESSAGES, feature="chat", stream=True) as s:
                list(s)
            out["calls"]["stream"] = {"cost": str(s.response.cost.amount)}
            tg.push(Reply(error="overloaded"))
            fw.push(Reply(usage={"prompt_tokens": 1000}, pieces=["a", "b"]))
            r = client.chat.completions.create(model="large", messages=MESSAGES, feature="chat")
            out["calls"]["failover"] = {"cost": str(r.cost.amount)}
            fw.push(Reply(error="bad_request"))
            try:
                client.chat.completions.create(model="small", messages=MESSAGES, feature="chat")
            except L.BadRequestError as e:
                out["calls"]["failed"] = {"error": type(e).__name__}
    finally:
        tg.stop(); fw.stop()

    def value(v):
        return list(v) if isinstance(v, tuple) else v

    out["spans"] = [
        {"name": s.name, "kind": s.kind.name, "id": s.context.span_id, "trace": s.context.trace_id,
         "parent": s.parent.span_id if s.parent else None, "status": s.status.status_code.name,
         "attributes": {k: value(v) for k, v in s.attributes.items()}}
        for s in exporter.get_finished_spans()
    ]
    points = {}
    for rm in reader.get_metrics_data().resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                for p in m.data.data_points:
                    points.setdefault(m.name, []).append({
                        "attributes": dict(p.attributes), "unit": m.unit,
                        "value": getattr(p, "value", None), "sum": getattr(p, "sum", None),
                        "count": getattr(p, "count", None)})
    out["metrics"] = points
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def recorded():
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = str(REPO)
    result = subprocess.run([sys.executable, "-c", CHILD, TG_MODEL, FW_MODEL], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def _calls(recorded):
    """The CLIENT spans in call order, each with its attempt children."""
    spans = recorded["spans"]
    calls = sorted((s for s in spans if s["kind"] == "CLIENT"), key=lambda s: spans.index(s))
    return [(c, [s for s in spans if s["parent"] == c["id"]]) for c in calls]


def test_one_client_span_per_call_with_attempt_children(recorded):
    calls = _calls(recorded)
    assert len(calls) == 4
    assert [c["name"] for c, _ in calls] == [f"chat {TG_MODEL}", f"chat {TG_MODEL}", f"chat {FW_MODEL}",
                                             f"chat {FW_MODEL}"]
    assert [len(children) for _, children in calls] == [1, 1, 2, 1]
    for call, children in calls:
        assert call["parent"] is None
        assert all(ch["trace"] == call["trace"] and ch["kind"] == "INTERNAL" for ch in children)
    # Every span is a call or an attempt of one: nothing stray.
    assert len(recorded["spans"]) == 4 + 5


def test_call_span_attributes(recorded):
    (plain, (attempt,)), (stream, _), _, _ = _calls(recorded)
    a = plain["attributes"]
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.provider.name"] == "together"
    assert a["gen_ai.request.model"] == TG_MODEL and a["gen_ai.response.model"] == TG_MODEL
    assert a["gen_ai.request.max_tokens"] == 10
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (1000, 2)
    assert a["gen_ai.usage.cache_read.input_tokens"] == 400
    assert a["gen_ai.response.finish_reasons"] == ["stop"]
    assert a["server.address"] == "127.0.0.1" and isinstance(a["server.port"], int)
    assert (a["llmroute.tier"], a["llmroute.feature"], a["llmroute.pool"]) == ("large", "summarize", "interactive")
    assert a["llmroute.requested_model"] == "large" and a["llmroute.route_reason"] == "tier: large"
    assert a["llmroute.currency"] == "USD" and a["llmroute.cost.estimated"] is False
    assert Decimal(repr(a["llmroute.cost"])) == Decimal(recorded["calls"]["plain"]["cost"])
    assert a["llmroute.attempts"] == 1 and "error.type" not in a
    assert plain["status"] == "UNSET"
    at = attempt["attributes"]
    assert attempt["name"] == f"attempt 1 tg:{TG_MODEL}"
    assert (at["llmroute.attempt"], at["llmroute.attempt.kind"], at["llmroute.deployment"]) == (
        1, "first", f"tg:{TG_MODEL}")
    assert (at["llmroute.attempt.input_tokens"], at["llmroute.attempt.output_tokens"]) == (1000, 2)
    assert "gen_ai.usage.input_tokens" not in at  # usage is counted once, on the call span
    s = stream["attributes"]
    assert s["gen_ai.request.stream"] is True and s["gen_ai.response.time_to_first_chunk"] >= 0
    assert s["llmroute.feature"] == "chat"


def test_failover_has_two_attempts_and_the_call_names_the_answering_model(recorded):
    _, _, (call, (first, second)), _ = _calls(recorded)
    assert first["name"] == f"attempt 1 tg:{TG_MODEL}" and second["name"] == f"attempt 2 fw:{FW_MODEL}"
    assert first["status"] == "ERROR" and first["attributes"]["error.type"] == "OverloadedError"
    assert first["attributes"]["http.response.status_code"] == 503
    assert second["status"] == "UNSET" and second["attributes"]["llmroute.attempt.kind"] == "failover"
    a = call["attributes"]
    assert call["status"] == "UNSET" and "error.type" not in a
    assert a["gen_ai.provider.name"] == "fireworks" and a["llmroute.attempts"] == 2
    assert Decimal(repr(a["llmroute.cost"])) == Decimal(recorded["calls"]["failover"]["cost"])


def test_failed_call_has_error_type(recorded):
    assert recorded["calls"]["failed"] == {"error": "BadRequestError"}
    _, _, _, (call, (attempt,)) = _calls(recorded)
    assert call["status"] == "ERROR" and call["attributes"]["error.type"] == "BadRequestError"
    assert attempt["attributes"]["http.response.status_code"] == 400
    assert "llmroute.cost" not in call["attributes"]  # nothing billed: no cost is invented


def test_content_is_not_captured_by_default(recorded):
    for span in recorded["spans"]:
        assert "gen_ai.input.messages" not in span["attributes"]
        assert "gen_ai.output.messages" not in span["attributes"]


def test_metrics_are_recorded_per_call(recorded):
    m = recorded["metrics"]
    durations = m["gen_ai.client.operation.duration"]
    assert sum(p["count"] for p in durations) == 4 and {p["unit"] for p in durations} == {"s"}
    errored = [p for p in durations if p["attributes"].get("error.type")]
    assert [(p["attributes"]["error.type"], p["count"]) for p in errored] == [("BadRequestError", 1)]
    assert {p["attributes"]["llmroute.tier"] for p in durations} == {"large", "small"}
    tokens = m["gen_ai.client.token.usage"]
    by_type = {}
    for p in tokens:
        by_type[p["attributes"]["gen_ai.token.type"]] = by_type.get(p["attributes"]["gen_ai.token.type"], 0) + p["sum"]
    assert by_type["input"] >= 2000  # the plain and failover calls reported 1000 each
    ttfc = m["gen_ai.client.operation.time_to_first_chunk"]
    assert sum(p["count"] for p in ttfc) == 1  # only the streamed call
    cost = m["llmroute.cost"]
    assert {p["attributes"]["llmroute.currency"] for p in cost} == {"USD"}
    total = sum(Decimal(c["cost"]) for k, c in recorded["calls"].items() if "cost" in c)
    assert sum(p["value"] for p in cost) == pytest.approx(float(total), rel=1e-9)
    assert {p["attributes"]["llmroute.feature"] for p in cost} == {"summarize", "chat"}


def test_each_deployments_load_is_an_observable_gauge(recorded):
    m = recorded["metrics"]
    in_flight = {p["attributes"]["llmroute.deployment"]: p["value"] for p in m["llmroute.deployment.in_flight"]}
    assert in_flight == {f"tg:{TG_MODEL}": 0, f"fw:{FW_MODEL}": 0}  # every call ended
    latency = {p["attributes"]["llmroute.deployment"]: p for p in m["llmroute.deployment.latency"]}
    assert latency[f"tg:{TG_MODEL}"]["value"] > 0 and latency[f"tg:{TG_MODEL}"]["unit"] == "s"
    assert "llmroute.deployment.queue.waiting" not in m  # no gauges read from these platforms
    # No tier here is balanced by load: no slow-start window is reported (tests/resilience/test_slow_start.py).
    assert "llmroute.deployment.slow_start.window" not in m
