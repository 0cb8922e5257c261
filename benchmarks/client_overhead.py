"""What llmroute costs on top of the wire: cold import time and memory, and client CPU per request.

Everything is measured in one run, side by side, as ratios against raw httpx (and raw aiohttp, and
the OpenAI SDK when it is installed), so the shared machine's noise cancels out of the ratios:

* cold `import` wall time and peak RSS in a fresh interpreter (median of N runs);
* client-process CPU time per request and per stream (20 chunks) against a fast loopback server
  running in *another* process, sync and async (concurrency 16), for: raw httpx, raw aiohttp,
  the OpenAI SDK, llmroute's Client, AsyncClient on httpx's transport and on aiohttp's.

    python benchmarks/client_overhead.py [--requests 2000] [--json benchmarks/out/client_overhead.json]

Bounded: a fixed number of requests per row; only 127.0.0.1 is contacted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MODEL = "gpt-4o-mini"
KEY = "sk-test-openai"
MESSAGES = [{"role": "user", "content": "Say hello"}]
CONCURRENCY = 16


def cold_import(module: str, runs: int) -> Dict[str, float]:
    code = (
        "import time, resource; t = time.perf_counter(); import {m}; "
        "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
    ).format(m=module)
    walls, rss = [], []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
        if out.returncode != 0:
            return {}
        wall, kb = out.stdout.split()
        walls.append(float(wall))
        rss.append(int(kb) / 1024)
    base = subprocess.run([sys.executable, "-c", "import resource; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"],
                          capture_output=True, text=True)
    return {"wall_ms": statistics.median(walls) * 1000, "rss_mib": statistics.median(rss),
            "rss_added_mib": statistics.median(rss) - int(base.stdout) / 1024}


def start_server(pieces: int) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.servers.run", "--platform", "openai", "--port", "0", "--tokens", str(pieces)],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    url = proc.stdout.readline().strip()
    if not url.startswith("http"):
        raise SystemExit("loopback server did not start")
    return proc, url


def cpu_per_call(fn: Callable[[], Any], n: int) -> float:
    fn()  # warm: connections, caches, lazy imports
    start = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - start) / n * 1e6  # microseconds of client CPU per call


def run_async_cpu(make: Callable[[], Any], n: int) -> float:
    async def main() -> float:
        call, close = await make()
        await call()
        sem = asyncio.Semaphore(CONCURRENCY)

        async def one() -> None:
            async with sem:
                await call()

        start = time.process_time()
        await asyncio.gather(*[one() for _ in range(n)])
        used = time.process_time() - start
        await close()
        return used / n * 1e6

    return asyncio.run(main())


def sync_rows(url: str, n: int, stream: bool) -> Dict[str, float]:
    import httpx

    import llmroute

    rows: Dict[str, float] = {}
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 64}
    if stream:
        body.update(stream=True, stream_options={"include_usage": True})
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client() as h:
        def raw() -> None:
            if stream:
                with h.stream("POST", url + "/chat/completions", json=body, headers=headers) as r:
                    for line in r.iter_lines():
                        if line.startswith("data: ") and line != "data: [DONE]":
                            json.loads(line[6:])
            else:
                h.post(url + "/chat/completions", json=body, headers=headers).json()
        rows["httpx (raw)"] = cpu_per_call(raw, n)
    try:
        import openai

        oc = openai.OpenAI(base_url=url, api_key=KEY, max_retries=0)

        def via_openai() -> None:
            if stream:
                for _ in oc.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=64, stream=True,
                                                     stream_options={"include_usage": True}):
                    pass
            else:
                oc.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=64)
        rows["openai SDK"] = cpu_per_call(via_openai, n)
        oc.close()
    except ImportError:
        pass
    config = {"providers": {"bench": {"kind": "openai-compatible", "base_url": url, "api_key": KEY}},
              "tiers": {"small": {"deployments": [f"bench:{MODEL}"]}}}
    config.update(_extra_config())
    with llmroute.Client(config=config) as c:
        def via_llmroute() -> None:
            if stream:
                with c.chat.completions.create(model="small", messages=MESSAGES, max_tokens=64, stream=True) as s:
                    for _ in s:
                        pass
            else:
                c.chat.completions.create(model="small", messages=MESSAGES, max_tokens=64)
        rows["llmroute Client"] = cpu_per_call(via_llmroute, n)
    return rows


def _extra_config() -> Dict[str, Any]:
    """Sections a full deployment would have: pricing for the bench model, an in-memory ledger."""
    return {
        "pricing": {f"bench:{MODEL}": {"input_per_million": 0.15, "output_per_million": 0.6, "currency": "USD"}},
        "ledger": {"sink": "memory"},
    }


def async_rows(url: str, n: int, stream: bool) -> Dict[str, float]:
    import httpx

    import llmroute

    rows: Dict[str, float] = {}
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 64}
    if stream:
        body.update(stream=True, stream_options={"include_usage": True})
    headers = {"Authorization": f"Bearer {KEY}"}

    async def make_httpx():
        h = httpx.AsyncClient(limits=httpx.Limits(max_connections=CONCURRENCY))

        async def call() -> None:
            if stream:
                async with h.stream("POST", url + "/chat/completions", json=body, headers=headers) as r:
                    async for line in r.aiter_lines():
                        if line.startswith("data: ") and line != "data: [DONE]":
                            json.loads(line[6:])
            else:
                (await h.post(url + "/chat/completions", json=body, headers=headers)).json()
        return call, h.aclose
    rows["httpx async (raw)"] = run_async_cpu(make_httpx, n)

    try:
        import aiohttp

        async def make_aiohttp():
            session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CONCURRENCY))

            async def call() -> None:
                async with session.post(url + "/chat/completions", json=body, headers=headers) as r:
                    if stream:
                        async for raw_line in r.content:
                            line = raw_line.decode().strip()
                            if line.startswith("data: ") and line != "data: [DONE]":
                                json.loads(line[6:])
                    else:
                        await r.json()
            return call, session.close
        rows["aiohttp (raw)"] = run_async_cpu(make_aiohttp, n)
    except ImportError:
        pass

    try:
        import openai

        async def make_openai():
            oc = openai.AsyncOpenAI(base_url=url, api_key=KEY, max_retries=0)

            async def call() -> None:
                if stream:
                    s = await oc.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=64, stream=True,
                                                         stream_options={"include_usage": True})
                    async for _ in s:
                        pass
                else:
                    await oc.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=64)
            return call, oc.close
        rows["openai SDK async"] = run_async_cpu(make_openai, n)
    except ImportError:
        pass

    config = {"providers": {"bench": {"kind": "openai-compatible", "base_url": url, "api_key": KEY}},
              "tiers": {"small": {"deployments": [f"bench:{MODEL}"]}}}
    config.update(_extra_config())
    for transport in ("httpx", "aiohttp"):
        async def make_llmroute(transport=transport):
            c = llmroute.AsyncClient(config=config, transport=transport)

            async def call() -> None:
                if stream:
                    s = await c.chat.completions.create(model="small", messages=MESSAGES, max_tokens=64, stream=True)
                    async with s:
                        async for _ in s:
                            pass
                else:
                    await c.chat.completions.create(model="small", messages=MESSAGES, max_tokens=64)
            return call, c.aclose
        rows[f"llmroute AsyncClient ({transport})"] = run_async_cpu(make_llmroute, n)
    return rows


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000, help="calls per row (default 2000)")
    parser.add_argument("--import-runs", type=int, default=7)
    parser.add_argument("--json", default=str(ROOT / "benchmarks" / "out" / "client_overhead.json"))
    parser.add_argument("--only", choices=["import", "cpu"], default=None)
    args = parser.parse_args(argv)
    result: Dict[str, Any] = {"requests": args.requests, "concurrency": CONCURRENCY, "python": sys.version.split()[0]}

    if args.only in (None, "import"):
        imports = {}
        for module in ("httpx", "aiohttp", "openai", "llmroute"):
            got = cold_import(module, args.import_runs)
            if got:
                imports[module] = got
        result["import"] = imports
        print(f"\nCold import (median of {args.import_runs} fresh interpreters)")
        print(f"{'module':<12}{'wall ms':>10}{'peak RSS MiB':>14}{'vs httpx':>10}")
        for module, got in imports.items():
            ratio = got["wall_ms"] / imports["httpx"]["wall_ms"]
            print(f"{module:<12}{got['wall_ms']:>10.1f}{got['rss_mib']:>14.1f}{ratio:>9.2f}x")

    if args.only in (None, "cpu"):
        cpu: Dict[str, Any] = {}
        for stream, pieces in ((False, 16), (True, 20)):
            proc, url = start_server(pieces)
            try:
                label = "stream (20 chunks)" if stream else "non-streamed"
                rows = {**sync_rows(url, args.requests, stream), **async_rows(url, args.requests, stream)}
            finally:
                proc.stdin.close()
                proc.wait(10)
            cpu[label] = rows
            print(f"\nClient CPU per call, {label}, {args.requests} calls per row (async: concurrency {CONCURRENCY})")
            print(f"{'client':<34}{'CPU us/call':>12}{'vs raw httpx':>14}")
            for name, us in rows.items():
                is_async = any(w in name for w in ("async", "aiohttp", "AsyncClient"))
                base = rows["httpx async (raw)"] if is_async else rows["httpx (raw)"]
                print(f"{name:<34}{us:>12.0f}{us / base:>13.2f}x")
        result["cpu_us_per_call"] = cpu

    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
