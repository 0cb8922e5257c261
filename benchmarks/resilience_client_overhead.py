"""What the resilience layer costs per request through the public client when nothing fails.

Client-process CPU time per request (and per 20-chunk stream) against a fast loopback fault server
in *another* process (`tests/servers/process.py` spawn), for configs that switch on more of the
resilience layer, each against the same baseline: one deployment with `max_retries = 0`. Breakers
and the plan run in every config (there is no off switch); what changes is how much they have to do:

* `baseline`: one deployment, `max_retries = 0`;
* `failover tier`: two deployments (the backup never used), default policy (retries, budget, breaker window);
* `weights + sticky`: the same tier with weights 90/10 and a sticky key sent on every call;
* `limits`: the tier with a bulkhead, rpm and tpm on each deployment (set high enough never to bind);
* `fallback tier`: the failover tier plus a fallback tier of one more deployment.

Two figures per row. Whole-request client CPU (`time.process_time`), measured in interleaved rounds (every config once per round, the order rotated each round)
and the median round is kept, so the shared machine's drift hits every row alike; the difference to
the baseline is the cost, but it is of the order of the machine's noise. So a second,
instrumented pass times the resilience layer itself inside those same real calls (the failover
plan's construction, `next_step`, `record`, and the engine's copy of skips into the route).

    python benchmarks/resilience_client_overhead.py [--requests 200] [--rounds 15] \
        [--json benchmarks/out/resilience_client_overhead.json]

Bounded: requests x rounds per row; only 127.0.0.1 is contacted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MODEL = "m"
MESSAGES = [{"role": "user", "content": "Say hello"}]
CONCURRENCY = 16
PIECES = 20
INSIDE_ROUNDS = 3  # instrumented rounds (time inside the resilience layer), after the plain ones
FREE = {"input_per_million": 0, "output_per_million": 0}
HIGH_LIMITS = {"max_concurrency": 10_000, "rpm": 1e9, "tpm": 1e12}


def configs(url: str) -> Dict[str, Dict[str, Any]]:
    def base(deployments: List[Any], *, providers=("a", "b"), resilience=None, **tier: Any) -> Dict[str, Any]:
        return {
            "providers": {p: {"kind": "openai-compatible", "base_url": url} for p in providers},
            "tiers": {"t": {"deployments": deployments, **tier}},
            "resilience": dict(resilience or {}),
            "pricing": {f"{p}:*": FREE for p in providers},
            "ledger": {"sink": "memory"},
        }

    a, b, c = f"a:{MODEL}", f"b:{MODEL}", f"c:{MODEL}"
    fallback = base([a, b], providers=("a", "b", "c"), fallback_tier="s")
    fallback["tiers"]["s"] = {"deployments": [c]}
    return {
        "baseline (1 deployment, max_retries=0)": base([a], providers=("a",), resilience={"max_retries": 0}),
        "failover tier (2 deployments, defaults)": base([a, b]),
        "weights 90/10 + sticky key": base([{"id": a, "weight": 90}, {"id": b, "weight": 10}], sticky_key="user"),
        "limits (bulkhead + rpm + tpm)": base([{"id": a, "resilience": HIGH_LIMITS}, {"id": b, "resilience": HIGH_LIMITS}]),
        "fallback tier": fallback,
    }


def sync_call(client: Any, stream: bool) -> Callable[[], None]:
    kwargs = {"model": "t", "messages": MESSAGES, "max_tokens": 64, "metadata": {"user": "u-1"}}
    if stream:
        def call() -> None:
            with client.chat.completions.create(stream=True, **kwargs) as s:
                for _ in s:
                    pass
    else:
        def call() -> None:
            client.chat.completions.create(**kwargs)
    return call


def async_call(client: Any, stream: bool) -> Callable[[], Any]:
    kwargs = {"model": "t", "messages": MESSAGES, "max_tokens": 64, "metadata": {"user": "u-1"}}
    if stream:
        async def call() -> None:
            s = await client.chat.completions.create(stream=True, **kwargs)
            async for _ in s:
                pass
    else:
        async def call() -> None:
            await client.chat.completions.create(**kwargs)
    return call


def rotated(calls: Dict[str, Any], rounds: int):
    """(name, call) for every config, `rounds` times, starting one config later each round
    (so no config always runs first, right after another's garbage or warm caches)."""
    names = list(calls)
    for r in range(rounds):
        for i in range(len(names)):
            name = names[(r + i) % len(names)]
            yield name, calls[name]


class InsideResilience:
    """Time spent inside the resilience layer during real client calls: the failover plan's
    construction, `next_step` and `record` (breaker, retry budget, limits inside them) and the
    call's telling the recorder of the skips (the plan writes the route's lines itself). Wraps
    those methods while active; perf_counter, since none of them awaits or blocks."""

    def __init__(self) -> None:
        from llmroute._call.call import CallRun
        from llmroute.resilience.failover import FailoverPlan

        self.targets = [(FailoverPlan, "__init__"), (FailoverPlan, "next_step"), (FailoverPlan, "record"),
                        (CallRun, "_announce_skips")]
        self.seconds = 0.0
        self._saved: List[Any] = []

    def __enter__(self) -> "InsideResilience":
        for owner, name in self.targets:
            original = getattr(owner, name)
            self._saved.append((owner, name, original))
            setattr(owner, name, self._timed(original))
        return self

    def _timed(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        clock = time.perf_counter

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += clock() - t0

        return wrapper

    def __exit__(self, *exc: Any) -> None:
        for owner, name, original in reversed(self._saved):
            setattr(owner, name, original)
        self._saved.clear()


def sync_cpu_us(call: Callable[[], None], n: int) -> float:
    start = time.process_time()
    for _ in range(n):
        call()
    return (time.process_time() - start) / n * 1e6


async def async_cpu_us(call: Callable[[], Any], n: int) -> float:
    sem = asyncio.Semaphore(CONCURRENCY)

    async def one() -> None:
        async with sem:
            await call()

    start = time.process_time()
    await asyncio.gather(*[one() for _ in range(n)])
    return (time.process_time() - start) / n * 1e6


def measure_sync(cfgs: Dict[str, Any], n: int, rounds: int, stream: bool) -> Any:
    import llmroute

    clients = {name: llmroute.Client(config=cfg) for name, cfg in cfgs.items()}
    calls = {name: sync_call(c, stream) for name, c in clients.items()}
    try:
        for call in calls.values():
            for _ in range(20):  # warm: connections, lazy imports, tiktoken
                call()
        samples: Dict[str, List[float]] = {name: [] for name in cfgs}
        inside: Dict[str, List[float]] = {name: [] for name in cfgs}
        for name, call in rotated(calls, rounds):
            samples[name].append(sync_cpu_us(call, n))
        for name, call in rotated(calls, INSIDE_ROUNDS):
            with InsideResilience() as probe:
                for _ in range(n):
                    call()
            inside[name].append(probe.seconds / n * 1e6)
        return samples, inside
    finally:
        for c in clients.values():
            c.close()


def measure_async(cfgs: Dict[str, Any], n: int, rounds: int, stream: bool) -> Any:
    import llmroute

    async def main() -> Any:
        clients = {name: llmroute.AsyncClient(config=cfg) for name, cfg in cfgs.items()}
        calls = {name: async_call(c, stream) for name, c in clients.items()}
        try:
            for call in calls.values():
                await asyncio.gather(*[call() for _ in range(CONCURRENCY)])
            samples: Dict[str, List[float]] = {name: [] for name in cfgs}
            inside: Dict[str, List[float]] = {name: [] for name in cfgs}
            for name, call in rotated(calls, rounds):
                samples[name].append(await async_cpu_us(call, n))
            for name, call in rotated(calls, INSIDE_ROUNDS):
                with InsideResilience() as probe:
                    await async_cpu_us(call, n)
                inside[name].append(probe.seconds / n * 1e6)
            return samples, inside
        finally:
            for c in clients.values():
                await c.aclose()

    return asyncio.run(main())


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200, help="requests per row per round")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--json", default=str(ROOT / "benchmarks" / "out" / "resilience_client_overhead.json"))
    args = parser.parse_args(argv)

    from tests.servers.process import spawn

    results: List[Dict[str, Any]] = []
    with spawn("fault", tokens=PIECES) as url:
        cfgs = configs(url)
        for mode, measure in (("sync", measure_sync), ("async x16", measure_async)):
            for stream in (False, True):
                samples, inside = measure(cfgs, args.requests, args.rounds, stream)
                base = statistics.median(samples[next(iter(cfgs))])
                for name, values in samples.items():
                    med = statistics.median(values)
                    in_res = statistics.median(inside[name])
                    results.append({
                        "mode": mode, "stream": stream, "config": name, "cpu_us_per_request": round(med, 1),
                        "added_us": round(med - base, 1), "added_pct": round((med - base) / base * 100, 1),
                        "inside_resilience_us": round(in_res, 1),
                        "inside_share_pct": round(in_res / med * 100, 2),
                        "rounds_us": [round(v, 1) for v in values],
                    })

    print(f"{'mode':10} {'kind':7} {'config':42} {'CPU µs/req':>11} {'vs base µs':>10} {'in resil. µs':>12} {'share':>6}")
    for r in results:
        kind = "stream" if r["stream"] else "plain"
        print(f"{r['mode']:10} {kind:7} {r['config']:42} {r['cpu_us_per_request']:11.1f} "
              f"{r['added_us']:10.1f} {r['inside_resilience_us']:12.1f} {r['inside_share_pct']:5.1f}%")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "python": sys.version.split()[0], "requests_per_round": args.requests, "rounds": args.rounds,
        "concurrency_async": CONCURRENCY, "stream_pieces": PIECES, "rows": results,
    }, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
