"""Response cache overhead per call, per backend: what a miss adds, what a hit costs.

    PYTHONPATH=. .venv/bin/python benchmarks/cache_overhead.py [--calls 300]

The vLLM loopback server runs in a child process (no GIL shared with the client; 16-token answers,
no artificial latency). A real redis-server runs on a free loopback port. Four sync `Client`s (no
cache; memory, SQLite and Redis backends) make sequential calls, the rows interleaved call by call
so that the machine's load drifts over all rows alike:

* `off`: the cache not in play (no [cache] section, no `cache=`): the baseline.
* `<backend> miss`: every call a new key (a different `seed`): a lookup, the platform call, a store.
* `<backend> hit`: the same request again, served from the cache (no platform call).
* `<backend> hit, stream`: the same with `stream=True`, chunks iterated to the end.

Per row: median and p90 wall time per call (µs), and median CPU time of the calling thread per call
(µs, `time.thread_time`, steadier than wall time on a loaded machine); `miss - off` is the median CPU
a miss adds. Ledger in memory, telemetry off, so the differences are the cache's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from llmroute import Client  # noqa: E402
from tests.servers.process import spawn  # noqa: E402
from tests.servers.redis_server import RedisServer  # noqa: E402

MODEL = "Qwen/Qwen2.5-7B-Instruct"
MESSAGES = [{"role": "user", "content": "please say hello there"}]


def config(base_url, cache):
    dep = f"v:{MODEL}"
    cfg = {"providers": {"v": {"kind": "vllm", "base_url": base_url}}, "tiers": {"t": {"deployments": [dep]}},
           "pricing": {dep: {"input_per_million": 1, "output_per_million": 2, "currency": "USD"}},
           "ledger": {"sink": "memory"}, "telemetry": {"enabled": False}}
    if cache is not None:
        cfg["cache"] = {"enabled": True, **cache}
    return cfg


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=300)
    args = ap.parse_args()
    with spawn("vllm", tokens=16) as base_url, RedisServer() as redis, tempfile.TemporaryDirectory() as tmp:
        sections = {"memory": {"backend": "memory"}, "sqlite": {"backend": "sqlite", "path": f"{tmp}/c.db"},
                    "redis": {"backend": "redis", "url": redis.url}}
        clients = {"off": Client(config=config(base_url, None))}
        clients.update({name: Client(config=config(base_url, s)) for name, s in sections.items()})
        rows = {"off (no cache)": lambda c, i: c.chat.completions.create(model="t", messages=MESSAGES, temperature=0)}

        def miss(c, i):
            c.chat.completions.create(model="t", messages=MESSAGES, seed=i)

        def hit(c, i):
            c.chat.completions.create(model="t", messages=MESSAGES, temperature=0)

        def hit_stream(c, i):
            for _ in c.chat.completions.create(model="t", messages=MESSAGES, temperature=0, stream=True, max_tokens=9):
                pass

        plan = [("off (no cache)", "off", rows["off (no cache)"])]
        for name in sections:
            plan += [(f"{name} miss", name, miss), (f"{name} hit", name, hit), (f"{name} hit, stream", name, hit_stream)]
        wall = {label: [] for label, _, _ in plan}
        cpu = {label: [] for label, _, _ in plan}
        try:
            for i in range(-30, args.calls):  # 30 warm-up rounds, not counted
                for label, client, fn in plan:
                    w0, c0 = time.perf_counter(), time.thread_time()
                    fn(clients[client], i + 10_000_000 * (label.endswith("miss")) + (1 << 20) * (i < 0))
                    if i >= 0:
                        cpu[label].append((time.thread_time() - c0) * 1e6)
                        wall[label].append((time.perf_counter() - w0) * 1e6)
            errors = {name: clients[name].cache.stats().get("errors", 0) for name in sections}
        finally:
            for c in clients.values():
                c.close()
    assert not any(errors.values()), errors
    off_cpu = statistics.median(cpu["off (no cache)"])
    print(f"{args.calls} calls per row, rows interleaved (sync Client, vLLM loopback server in a child process)")
    print("row | median wall us | p90 wall us | median CPU us | miss - off, CPU us")
    for label, _, _ in plan:
        w = sorted(wall[label])
        c = statistics.median(cpu[label])
        extra = f"{c - off_cpu:+.0f}" if label.endswith("miss") else ""
        print(f"{label} | {statistics.median(w):.0f} | {w[int(len(w) * 0.9)]:.0f} | {c:.0f} | {extra}")


if __name__ == "__main__":
    main()
