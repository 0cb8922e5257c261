"""Figures measured through the real client against loopback servers with scripted timings and faults.

Tolerances are wide on purpose (a shared, noisy 2-core machine): a scripted 200 ms TTFT must be
measured within +-60 ms at p50, a scripted 50 ms gap within +-25 ms. They are still narrow
enough to catch a client that buffers a stream (every chunk arriving at the end would put TTFT
near E2E, 650 ms) or a bench that times the wrong span.
"""

from __future__ import annotations

import asyncio

import pytest

from llmroute import AsyncClient
from llmroute.bench.document import build_report
from llmroute.bench.runner import LoadPlan, client_send, run_bench
from llmroute.bench.workload import Prompt
from tests.servers.fault import reset_before, status, timed

PROMPTS = [Prompt(messages=({"role": "user", "content": "count"},), source="t")]
NO_RETRIES = {"max_retries": 0, "consecutive_failures": 10_000, "min_calls": 10_000, "open_on_retry_after": False}


def config(server, **resilience):
    return {"providers": {"f": {"kind": "vllm", "base_url": server.base_url}},
            "tiers": {"small": {"deployments": ["f:fault-model"]}},
            "resilience": resilience,
            "pricing": {"f:*": {"input_per_million": 0, "output_per_million": 0}}}


async def bench(cfg, plan):
    client = AsyncClient(config=cfg)
    try:
        return await run_bench(client_send(client), PROMPTS, plan, progress=None)
    finally:
        await client.aclose()


def test_scripted_ttft_and_gaps_are_measured(fault_server):
    ttft_s, gap_s, pieces = 0.2, 0.05, 10
    fault_server.default_reply = timed(ttft_s, [gap_s] * (pieces - 1))
    plan = LoadPlan(targets=["small"], concurrency=[2], requests=8, warmup=1)
    run = asyncio.run(bench(config(fault_server), plan))
    report = build_report(run)
    (res,) = report["results"]
    assert res["requests"] == 8 and res["success_rate"] == 1.0
    assert res["ttft_ms"]["p50"] == pytest.approx(ttft_s * 1000, abs=60)
    assert res["itl_ms"]["p50"] == pytest.approx(gap_s * 1000, abs=25)
    assert res["itl_ms"]["count"] == 8 * (pieces - 1)
    e2e_ms = (ttft_s + gap_s * (pieces - 1)) * 1000
    assert res["e2e_ms"]["p50"] == pytest.approx(e2e_ms, abs=90)
    # the server reports one token per piece, so TPOT is the scripted gap
    assert res["tpot_ms"]["p50"] == pytest.approx(gap_s * 1000, abs=25)
    assert res["mean_output_tokens"] == pieces and res["output_tokens_estimated"] == 0
    first = report["first_requests"][0]
    assert first["ok"] and first["deployment"] == "f:fault-model"


def test_errors_from_a_fault_server_are_counted_by_type(fault_server):
    fault_server.default_reply = timed(0.0, [0.0] * 3)
    fault_server.push(timed(0.0, [0.0] * 3))  # the first request succeeds
    fault_server.push(status(429), status(429), status(503), status(500), reset_before())
    # A 401 takes the deployment out of rotation (a configuration fault), so it comes last.
    fault_server.push(*[timed(0.0, [0.0] * 3)] * 4, status(401))
    plan = LoadPlan(targets=["f:fault-model"], concurrency=[1], requests=10, warmup=0)
    run = asyncio.run(bench(config(fault_server, **NO_RETRIES), plan))
    (res,) = build_report(run)["results"]
    assert res["requests"] == 10 and res["errors"] == 6 and res["successes"] == 4
    kinds = res["error_breakdown"]
    flat = " ".join(f"{k}x{v}" for k, v in kinds.items())
    assert sum(kinds.values()) == 6
    assert "RateLimitError" in flat and "AuthenticationError" in flat and "APIConnectionError" in flat
    assert any("RateLimitError" in k and v == 2 for k, v in kinds.items())
    assert res["success_rate"] == pytest.approx(0.4)
    assert res["ttft_ms"]["count"] == 4
