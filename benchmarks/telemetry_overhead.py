"""What llmroute's telemetry costs per call: ns for one call with one streamed attempt, per OpenTelemetry set-up.

One iteration = start_call + start_attempt + first_chunk + attempt.end + call.end, with the attributes a real
call carries (tier, feature, pool, route reason, tokens, cost). Each configuration runs in a fresh Python
process, because the global OpenTelemetry providers can be set only once per process:

- disabled           [telemetry] enabled = false
- api-not-imported   nothing in the process imported opentelemetry (the default for users without OTel)
- api-only           opentelemetry-api imported, no SDK configured (ProxyTracerProvider / proxy meter)
- sdk-always-off     SDK TracerProvider(sampler=ALWAYS_OFF) and an SDK MeterProvider with no reader
- sdk-no-exporter    SDK TracerProvider with no span processor, SDK MeterProvider with no reader
- sdk-null-exporter  SDK SimpleSpanProcessor into an exporter that drops spans, InMemoryMetricReader

Also measured: the time `import llmroute._runtime.telemetry` adds after pydantic is loaded, and whether it imports
opentelemetry. Usage: python benchmarks/telemetry_overhead.py [--quick]
Prints a table and writes benchmarks/out/telemetry_overhead.json.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

CONFIGS = ["disabled", "api-not-imported", "api-only", "sdk-always-off", "sdk-no-exporter", "sdk-null-exporter"]
REPEATS = 5
ITERATIONS = {"disabled": 200_000, "api-not-imported": 200_000, "api-only": 200_000}
SDK_ITERATIONS = 10_000
# Each configuration runs in this many fresh processes and keeps the best: the machine is shared and noisy.
PROCESSES = 3
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing the package


def _setup(config: str):
    from llmroute._runtime.telemetry import Telemetry, TelemetryConfig

    if config == "disabled":
        return Telemetry(TelemetryConfig(enabled=False))
    if config == "api-not-imported":
        return Telemetry()
    if config == "api-only":
        import opentelemetry.metrics  # noqa: F401
        import opentelemetry.trace  # noqa: F401

        return Telemetry()

    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    if config == "sdk-always-off":
        return Telemetry(tracer_provider=TracerProvider(sampler=ALWAYS_OFF), meter_provider=MeterProvider())
    if config == "sdk-no-exporter":
        return Telemetry(tracer_provider=TracerProvider(), meter_provider=MeterProvider())
    if config == "sdk-null-exporter":

        class NullExporter(SpanExporter):
            def export(self, spans):
                return SpanExportResult.SUCCESS

        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(NullExporter()))
        return Telemetry(tracer_provider=provider, meter_provider=MeterProvider(metric_readers=[InMemoryMetricReader()]))
    raise SystemExit(f"unknown configuration {config!r}")


def _one_call(telemetry, cost: Decimal) -> None:
    call = telemetry.start_call(
        request_model="meta-llama/Llama-3.3-70B-Instruct-Turbo",
        now=1.0,
        stream=True,
        provider_name="together",
        tier="large",
        feature="summarize",
        pool="shared",
        route_reason="rule:long-input",
    )
    attempt = call.start_attempt(
        now=1.0,
        attempt_number=1,
        provider_name="together",
        deployment="together:llama-70b",
        request_model="meta-llama/Llama-3.3-70B-Instruct-Turbo",
        server_address="api.together.xyz",
        server_port=443,
        breaker_state="closed",
    )
    attempt.first_chunk(1.2)
    attempt.end(now=2.0, response_model="llama-70b", input_tokens=120, output_tokens=30, finish_reasons=["stop"])
    call.end(now=2.0, response_model="llama-70b", input_tokens=120, output_tokens=30, cost=cost, currency="USD")


def child(config: str, quick: bool) -> dict:
    telemetry = _setup(config)
    iterations = ITERATIONS.get(config, SDK_ITERATIONS)
    if quick:
        iterations //= 20
    cost = Decimal("0.000132")
    _one_call(telemetry, cost)  # warm-up: lazy imports and instrument creation happen here
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter_ns()
        for _ in range(iterations):
            _one_call(telemetry, cost)
        best = min(best, (time.perf_counter_ns() - start) / iterations)
    otel_loaded = any(name.startswith("opentelemetry") for name in sys.modules)
    return {"config": config, "ns_per_call": round(best, 1), "iterations": iterations, "repeats": REPEATS,
            "opentelemetry_imported": otel_loaded}


def _env() -> dict:
    # Children must not inherit an OpenTelemetry set-up from this shell's environment.
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def import_cost() -> dict:
    """Self time of `import llmroute._runtime.telemetry` (-X importtime, children excluded), bytecode cached as a user's
    install would have it, and whether importing it imported opentelemetry."""
    with tempfile.TemporaryDirectory() as cache:
        env = _env()
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = cache
        code = "import sys, llmroute._runtime.telemetry; print(any(m.startswith('opentelemetry') for m in sys.modules))"
        runs = []
        otel = None
        for _ in range(REPEATS + 1):  # the first run writes the bytecode cache
            out = subprocess.run(
                [sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, check=True, env=env
            )
            otel = out.stdout.strip()
            for line in out.stderr.splitlines():
                fields = [f.strip() for f in line.split("|")]
                if len(fields) == 3 and fields[2] == "llmroute._runtime.telemetry":
                    runs.append(int(fields[0].split()[-1]))
        api_code = "import pydantic, httpx, opentelemetry.trace, opentelemetry.metrics"
        api_runs = []
        for _ in range(REPEATS + 1):
            out = subprocess.run(
                [sys.executable, "-X", "importtime", "-c", api_code], capture_output=True, text=True, check=True, env=env
            )
            api_runs.append(
                sum(
                    int(line.split("|")[1])
                    for line in out.stderr.splitlines()
                    if line.rstrip().endswith(("| opentelemetry.trace", "| opentelemetry.metrics"))
                )
            )
    return {
        "import_llmroute_telemetry_self_ms_min": round(min(runs[1:]) / 1e3, 2),
        "importing_it_imports_opentelemetry": otel == "True",
        "import_opentelemetry_api_ms_min": round(min(api_runs[1:]) / 1e3, 2),
    }


def main() -> None:
    if len(sys.argv) >= 3 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2], "--quick" in sys.argv)))
        return
    quick = "--quick" in sys.argv
    results = []
    for config in CONFIGS:
        args = [sys.executable, __file__, "--child", config] + (["--quick"] if quick else [])
        runs = [
            json.loads(subprocess.run(args, capture_output=True, text=True, check=True, cwd=ROOT, env=_env()).stdout)
            for _ in range(PROCESSES)
        ]
        best = min(runs, key=lambda run: run["ns_per_call"])
        best["processes"] = PROCESSES
        results.append(best)
    imports = import_cost()

    print(f"{'configuration':<20} {'ns per call+attempt':>20} {'otel imported':>14}")
    for row in results:
        print(f"{row['config']:<20} {row['ns_per_call']:>20,.0f} {str(row['opentelemetry_imported']):>14}")
    print(
        f"\nimport llmroute._runtime.telemetry, self time: {imports['import_llmroute_telemetry_self_ms_min']} ms; "
        f"imports opentelemetry: {imports['importing_it_imports_opentelemetry']}\n"
        f"import opentelemetry.trace + .metrics (cumulative, after pydantic and httpx): "
        f"{imports['import_opentelemetry_api_ms_min']} ms (what the lazy import saves)"
    )

    from importlib.metadata import version

    report = {
        "benchmark": "telemetry_overhead",
        "unit": "ns per call (start_call, start_attempt, first_chunk, attempt.end, call.end), best of repeats x processes",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "opentelemetry_api": version("opentelemetry-api"),
        "opentelemetry_sdk": version("opentelemetry-sdk"),
        "quick": quick,
        "results": results,
        "imports": imports,
    }
    out_dir = ROOT / "benchmarks" / "out"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "telemetry_overhead.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {out_dir / 'telemetry_overhead.json'}")


if __name__ == "__main__":
    main()
