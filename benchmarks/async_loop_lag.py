"""How long `AsyncClient` holds its event loop when shared state and the cache are on a slow Redis.

    python benchmarks/async_loop_lag.py [--calls 256] [--delay-ms 2] [--out benchmarks/async_loop_lag.json]

Starts, on 127.0.0.1 only: a loopback platform server (a child process, 20 ms to the first token), a
redis-server and a TCP proxy in front of it adding `--delay-ms` to every Redis round trip (a Redis
across a network). One AsyncClient config: shared limits and a budget (`[state] backend = "redis"`,
one script before sending) and the response cache on that Redis (a lookup before, a store after,
distinct prompts: all misses). `--calls` calls run at once, twice: with the blocking steps run
inline on the loop (as before llmroute/_call/offload.py; `client._offload.inline = True`) and in the
client's worker threads (the default). A heartbeat task on the same loop wakes every 5 ms and
records how late it is: its worst and p99 lateness, and the wall time of the whole batch, per mode.
Figures depend on the machine and its load; RESULTS.md keeps them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import contextlib
import os
import platform
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import llmroute as L  # noqa: E402
from tests.servers.process import spawn  # noqa: E402
from tests.state.servers import RedisServer  # noqa: E402


@contextlib.contextmanager
def slow_proxy(port: int, delay_ms: float):
    """tests/servers/slow_proxy.py in a child process: the redis:// URL through it."""
    repo = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(repo))
    child = subprocess.Popen([sys.executable, "-m", "tests.servers.slow_proxy", str(port), str(delay_ms)],
                             cwd=repo, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        yield f"redis://127.0.0.1:{int(child.stdout.readline())}/0"
    finally:
        child.kill()
        child.wait(10)


def local_config(base_url: str) -> dict:
    """The same calls with nothing shared and the cache in memory: the loop's own CPU, no Redis."""
    cfg = config(base_url, "redis://unused")
    del cfg["state"]
    cfg["cache"] = {"enabled": True, "backend": "memory", "reproducible_only": False}
    return cfg


def config(base_url: str, redis_url: str) -> dict:
    return {
        "providers": {"p": {"kind": "vllm", "base_url": base_url, "max_connections": 1000}},
        "tiers": {"chat": {"deployments": ["p:m"]}},
        "pricing": {"p:*": {"input_per_million": 1, "output_per_million": 1}},
        "resilience": {"max_retries": 0, "rpm": 1_000_000, "max_concurrency": 10_000},
        "budgets": [{"name": "daily", "max_cost": "1000000", "currency": "USD"}],
        "ledger": {"sink": "none"},
        "state": {"backend": "redis", "url": redis_url, "key_prefix": f"b{uuid.uuid4().hex[:6]}:",
                  "timeout_ms": 5000},
        "cache": {"enabled": True, "backend": "redis", "url": redis_url, "timeout_s": 5.0, "reproducible_only": False},
    }


async def batch(cfg: dict, calls: int, *, inline: bool, tag: str) -> dict:
    client = L.AsyncClient(config=cfg)
    client._offload.inline = inline
    await client.chat.completions.create(model="chat", messages=[{"role": "user", "content": f"warm {tag}"}])
    lags: list[float] = []
    stop = asyncio.Event()

    async def heartbeat() -> None:
        while not stop.is_set():
            due = time.monotonic() + 0.005
            await asyncio.sleep(0.005)
            lags.append(time.monotonic() - due)

    beat = asyncio.create_task(heartbeat())
    started = time.monotonic()
    answers = await asyncio.gather(*(
        client.chat.completions.create(model="chat", messages=[{"role": "user", "content": f"{tag} {i}"}])
        for i in range(calls)))
    wall = time.monotonic() - started
    stop.set()
    await beat
    await client.aclose()
    assert all(a.choices[0].message.content for a in answers)
    lags.sort()
    return {"worst_lag_ms": round(lags[-1] * 1000, 1), "p99_lag_ms": round(lags[int(0.99 * (len(lags) - 1))] * 1000, 1),
            "wall_s": round(wall, 3), "calls_per_s": round(calls / wall, 1)}


MODES = ("no Redis (local, memory)", "Redis, inline (before)", "Redis, worker threads")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=256)
    ap.add_argument("--delay-ms", type=float, default=2.0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    out: dict = {"machine": platform.platform(), "calls": args.calls, "delay_ms": args.delay_ms}
    redis_server = RedisServer().start()
    try:
        with spawn("fault", ttft_ms=20) as base_url, slow_proxy(redis_server.port, args.delay_ms) as redis_url:
            out[MODES[0]] = asyncio.run(batch(local_config(base_url), args.calls, inline=True, tag=MODES[0]))
            for mode, inline in ((MODES[1], True), (MODES[2], False)):
                out[mode] = asyncio.run(batch(config(base_url, redis_url), args.calls, inline=inline, tag=mode))
    finally:
        redis_server.stop()
    print(f"{args.calls} concurrent calls, Redis round trip +{args.delay_ms:g} ms (proxy)")
    print(f"{'mode':<26}{'worst lag ms':>14}{'p99 lag ms':>12}{'wall s':>9}{'calls/s':>9}")
    for mode in MODES:
        r = out[mode]
        print(f"{mode:<26}{r['worst_lag_ms']:>14}{r['p99_lag_ms']:>12}{r['wall_s']:>9}{r['calls_per_s']:>9}")
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
