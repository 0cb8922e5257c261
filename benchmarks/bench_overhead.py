"""Does `llmroute bench` distort what it measures? Its own overhead, and its accuracy under load.

Three parts, all on 127.0.0.1:

A. loop overhead: the runner driving a request function that does no work (closed loop, several
   concurrencies): the runner's own cost per request and the request rate it can sustain at most.
B. open-loop pacing: Poisson arrivals at several rates into a no-work request function: how late
   each arrival is dispatched (`dispatch_lag`) and the rate achieved against the rate asked.
C. accuracy: a loopback server in *another process* (no shared GIL) streams a scripted answer
   (TTFT, gaps, pieces); the bench measures it through a minimal raw streaming client (the
   generator's own error) and through llmroute's AsyncClient (what users get), at several
   concurrencies, and the same through raw aiohttp and llmroute's aiohttp transport (httpx is
   known to slow down under many concurrent streams). The table shows measured minus scripted.

    python benchmarks/bench_overhead.py [--quick] [--json benchmarks/out/bench_overhead.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llmroute.bench.document import build_report  # noqa: E402
from llmroute.bench.runner import LoadPlan, client_send, poisson_schedule, run_bench  # noqa: E402
from llmroute.bench.stats import RequestRecord, StreamTiming, distribution_ms  # noqa: E402
from llmroute.bench.workload import Prompt  # noqa: E402

PROMPTS = [Prompt(messages=({"role": "user", "content": "Say hello"},), source="overhead")]


async def _no_work(target: str, prompt: Prompt, max_tokens: int) -> RequestRecord:
    start = time.perf_counter()
    await asyncio.sleep(0)
    end = time.perf_counter()
    return RequestRecord(target=target, level=0, phase="", index=0, start_s=start, ok=True, e2e_s=end - start,
                         ttft_s=end - start, output_tokens=1, input_tokens=1, tokens_source="usage")


def part_a(requests: int, levels: list[int]) -> list[dict[str, Any]]:
    rows = []
    for c in levels:
        plan = LoadPlan(targets=["noop"], concurrency=[c], requests=requests, warmup=0, first_request=False)
        t0 = time.process_time()
        run = asyncio.run(run_bench(_no_work, PROMPTS, plan, progress=None))
        cpu = time.process_time() - t0
        lv = run.levels[0]
        window = lv.window_end_s - lv.window_start_s
        rows.append({"concurrency": c, "requests": requests, "requests_per_s": requests / window,
                     "cpu_us_per_request": cpu / requests * 1e6})
    return rows


def part_b(arrivals: int, rates: list[float]) -> list[dict[str, Any]]:
    rows = []
    for rate in rates:
        plan = LoadPlan(targets=["noop"], rates=[rate], requests=arrivals, warmup=0, first_request=False,
                        max_concurrency=1000)
        run = asyncio.run(run_bench(_no_work, PROMPTS, plan, progress=None))
        lv = run.levels[0]
        starts = sorted(r.start_s for r in run.records if r.phase == "measured")
        lag = distribution_ms(lv.dispatch_lag_s)
        # the schedule's own rate: a finite Poisson sample is off the asked rate by ~1/sqrt(n)
        schedule = list(poisson_schedule(rate, seed=f"{plan.seed}:noop:{rate}", limit=arrivals, horizon_s=None))
        rows.append({"rate": rate, "arrivals": arrivals,
                     "scheduled_rate": (len(schedule) - 1) / (schedule[-1] - schedule[0]),
                     "achieved_rate": (len(starts) - 1) / (starts[-1] - starts[0]) if len(starts) > 1 else None,
                     "lag_p50_ms": lag["p50"], "lag_p99_ms": lag["p99"], "lag_max_ms": lag["max"]})
    return rows


def _sse_feed(timing: StreamTiming, buffer: bytes, data: bytes, now: float, usage: dict[str, Any]) -> bytes:
    """Split SSE lines off `buffer + data`, feed content to `timing`; returns the unfinished rest."""
    *lines, rest = (buffer + data).split(b"\n")
    for line in lines:
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        event = json.loads(line[6:])
        if event.get("usage"):
            usage.update(event["usage"])
        for choice in event.get("choices") or ():
            timing.on_chunk(now, (choice.get("delta") or {}).get("content"))
    return rest


def raw_send(base_url: str, client: Any, library: str) -> Any:
    """The least a streaming client can do (httpx or aiohttp): POST, split SSE lines, take delta.content."""

    async def send(target: str, prompt: Prompt, max_tokens: int) -> RequestRecord:
        start = time.perf_counter()
        timing = StreamTiming(start)
        body = {"model": target, "messages": prompt.as_messages(), "max_tokens": max_tokens, "stream": True,
                "stream_options": {"include_usage": True}}
        usage: dict[str, Any] = {}
        buffer = b""
        if library == "httpx":
            async with client.stream("POST", base_url + "/chat/completions", json=body) as response:
                status = response.status_code
                if status == 200:
                    async for data in response.aiter_raw():
                        buffer = _sse_feed(timing, buffer, data, time.perf_counter(), usage)
        else:
            async with client.post(base_url + "/chat/completions", json=body) as response:
                status = response.status
                if status == 200:
                    async for data in response.content.iter_any():
                        buffer = _sse_feed(timing, buffer, data, time.perf_counter(), usage)
        timing.on_end(time.perf_counter())
        if status != 200:
            return RequestRecord(target=target, level=0, phase="", index=0, start_s=start, ok=False,
                                 e2e_s=timing.e2e_s, error_type=f"HTTP {status}")
        return RequestRecord(target=target, level=0, phase="", index=0, start_s=start, ok=True, e2e_s=timing.e2e_s,
                             ttft_s=timing.ttft_s, itl_s=timing.itl_s, output_tokens=usage.get("completion_tokens"),
                             tokens_source="usage")

    return send


CLIENTS = ("raw httpx", "raw aiohttp", "llmroute httpx", "llmroute aiohttp")


async def _measure(kind: str, base_url: str, model: str, c: int, requests: int) -> dict[str, Any]:
    import aiohttp
    import httpx

    from llmroute import AsyncClient

    plan = LoadPlan(targets=[model if kind.startswith("raw") else "small"], concurrency=[c], requests=requests,
                    warmup=c, first_request=False, max_tokens=64)
    if kind == "raw httpx":
        limits = httpx.Limits(max_connections=1000, max_keepalive_connections=1000)
        async with httpx.AsyncClient(limits=limits, timeout=60, trust_env=False) as client:
            run = await run_bench(raw_send(base_url, client, "httpx"), PROMPTS, plan, progress=None)
    elif kind == "raw aiohttp":
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1000)) as session:
            run = await run_bench(raw_send(base_url, session, "aiohttp"), PROMPTS, plan, progress=None)
    else:
        # kind "vllm": OpenAI wire format without a key; the fault server accepts any model
        cfg = {"providers": {"srv": {"kind": "vllm", "base_url": base_url, "max_connections": 1000}},
               "tiers": {"small": {"deployments": [f"srv:{model}"]}},
               "pricing": {"srv:*": {"input_per_million": 0, "output_per_million": 0}}}
        client = AsyncClient(config=cfg, transport=kind.split()[1])
        try:
            run = await run_bench(client_send(client), PROMPTS, plan, progress=None)
        finally:
            await client.aclose()
    (res,) = build_report(run, include_records=False)["results"]
    return res


def part_c(requests: int, levels: list[int], ttft_ms: float, gap_ms: float, pieces: int) -> list[dict[str, Any]]:
    from tests.servers.process import spawn

    rows = []
    script_e2e = ttft_ms + gap_ms * (pieces - 1)
    with spawn("fault", tokens=pieces, ttft_ms=ttft_ms, gap_ms=gap_ms) as base_url:
        for kind in CLIENTS:
            for c in levels:
                res = asyncio.run(_measure(kind, base_url, "model", c, requests))
                rows.append({
                    "client": kind, "concurrency": c, "requests": res["requests"], "success_rate": res["success_rate"],
                    "ttft_p50_err_ms": _err(res["ttft_ms"]["p50"], ttft_ms),
                    "ttft_p95_err_ms": _err(res["ttft_ms"]["p95"], ttft_ms),
                    "itl_p50_err_ms": _err(res["itl_ms"]["p50"], gap_ms),
                    "itl_p95_err_ms": _err(res["itl_ms"]["p95"], gap_ms),
                    "e2e_p50_err_ms": _err(res["e2e_ms"]["p50"], script_e2e),
                    "e2e_p95_err_ms": _err(res["e2e_ms"]["p95"], script_e2e),
                    "requests_per_s": res["requests_per_s"],
                    "mean_concurrency": res["mean_concurrency"],
                })
    return rows


def _err(measured: float | None, scripted: float) -> float | None:
    return None if measured is None else round(measured - scripted, 2)


def _table(rows: list[dict[str, Any]]) -> str:
    head = list(rows[0])
    cells = [[("-" if r[h] is None else f"{r[h]:.2f}" if isinstance(r[h], float) else str(r[h])) for h in head]
             for r in rows]
    widths = [max(len(x) for x in col) for col in zip(head, *cells)]
    lines = ["| " + " | ".join(h.ljust(w) for h, w in zip(head, widths)) + " |",
             "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    lines += ["| " + " | ".join(c.rjust(w) for c, w in zip(row, widths)) + " |" for row in cells]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer requests (a smoke run of the script)")
    p.add_argument("--json", default=str(ROOT / "benchmarks" / "out" / "bench_overhead.json"))
    p.add_argument("--ttft-ms", type=float, default=100.0)
    p.add_argument("--gap-ms", type=float, default=10.0)
    p.add_argument("--pieces", type=int, default=20)
    ns = p.parse_args(argv)
    scale = 10 if ns.quick else 1
    levels = [1, 16, 64]
    a = part_a(20_000 // scale, [1, 16, 256])
    print("A. runner overhead, no-work request function\n" + _table(a) + "\n")
    b = part_b(4000 // scale, [100.0, 500.0, 1000.0])
    print("B. open-loop pacing, Poisson arrivals\n" + _table(b) + "\n")
    c = part_c(max(400 // scale, 64), levels, ns.ttft_ms, ns.gap_ms, ns.pieces)
    print(f"C. measured minus scripted (TTFT {ns.ttft_ms:g} ms, {ns.pieces} pieces {ns.gap_ms:g} ms apart; "
          f"server in another process)\n" + _table(c))
    out = {"python": platform.python_version(), "cpus": os.cpu_count(), "load_average": os.getloadavg(),
           "script": {"ttft_ms": ns.ttft_ms, "gap_ms": ns.gap_ms, "pieces": ns.pieces},
           "runner_overhead": a, "open_loop_pacing": b, "accuracy": c}
    Path(ns.json).parent.mkdir(parents=True, exist_ok=True)
    Path(ns.json).write_text(json.dumps(out, indent=1) + "\n")
    print(f"\nwrote {ns.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
