"""Load-aware balancing against capacity-bound servers (issue 25): p99 and throughput per strategy.

Three vLLM-like loopback servers in a child process (tests/servers/capacity.py): two with 8 slots at
100 ms per request and one with 1 slot at 400 ms, a FIFO queue beyond the slots. One tier lists the
three with `weight = 1`. 480 requests at concurrency 24 (AsyncClient, 24 tasks), per strategy:

* round-robin: each call goes to the next deployment in turn;
* weighted (old): `balance = "weighted"`, the behaviour weights had before (random by weight);
* load (default): `balance = "load"`, the default for a weighted tier (resilience/balance.py);
* peak-EWMA x in-flight: Finagle's/Linkerd's cost (the balancer's peak-EWMA latency times in-flight + 1);
* SED (knows capacity): shortest expected delay with each server's true slots and service time.

Every strategy runs through the same client and transport: the others replace `LoadBalancer.rank`
(and have no slow start: `holds` never holds a call for them).
Then "slowdown": the default strategy, 1200 requests at concurrency 24, and one fast server
slowing 8x after 2 s; the share of new requests it gets, per 0.5 s, against its fair share (its
capacity after the slowdown over the total). Then the CPU cost of the strategy per call at
concurrency 256 (rank + started + finished + the route's text), in-process.

    python benchmarks/load_balance.py [--requests 480] [--concurrency 24] [--json out.json]

Bounded: at most 480 + 1200 requests per strategy run, only 127.0.0.1 is contacted.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Sequence

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import llmroute as L  # noqa: E402
from llmroute.resilience.balance import LoadBalancer  # noqa: E402

SPECS = [(8, 0.1), (8, 0.1), (1, 0.4)]
WARM_SPEC = "8:0.001"  # a fourth server, outside the tier: each fleet process warms up on it first
MESSAGES = [{"role": "user", "content": "hi"}]


class Reference(LoadBalancer):
    """A reference strategy: its own `rank`, and no slow start (the plan never holds a call for it)."""

    def holds(self, deployment_id: str, pool: Sequence[str], key: str, ticket: int | None, now: float) -> bool:
        return False


class RoundRobin(Reference):
    def __init__(self) -> None:
        super().__init__()
        self._turn = itertools.count()

    def rank(self, candidates: Sequence[Any], ids: Sequence[str], now: float, *, rng: random.Random,
             sticky: int | None = None) -> Any:
        k = next(self._turn) % len(candidates)
        return list(candidates[k:]) + list(candidates[:k]), None


class PeakEwmaInFlight(Reference):
    def rank(self, candidates: Sequence[Any], ids: Sequence[str], now: float, *, rng: random.Random,
             sticky: int | None = None) -> Any:
        with self._lock:
            loads = [self._load(d) for d in ids]
            cost = [((load.latency_s or 0.0) * (load.in_flight + 1), rng.random(), i) for i, load in enumerate(loads)]
        return [candidates[c[2]] for c in sorted(cost)], None


class KnowsCapacity(Reference):
    def __init__(self, truth: Dict[str, tuple[int, float]]) -> None:
        super().__init__()
        self.truth = truth

    def rank(self, candidates: Sequence[Any], ids: Sequence[str], now: float, *, rng: random.Random,
             sticky: int | None = None) -> Any:
        with self._lock:
            cost = []
            for i, d in enumerate(ids):
                slots, service = self.truth[d]
                n = self._load(d).in_flight
                cost.append((service * max(1.0, (n + 1) / slots), (n + 1) / slots, rng.random(), i))
        return [candidates[c[3]] for c in sorted(cost)], None


def config(urls: List[str], balance: str | None, weights: Sequence[float] = (1, 1, 1),
           redis_url: str | None = None, slow_start: bool = True) -> Dict[str, Any]:
    names = ["a", "b", "c"]
    tier: Dict[str, Any] = {"deployments": [{"id": f"{n}:m", "weight": w} for n, w in zip(names, weights)]}
    if balance:
        tier["balance"] = balance
    state = {"backend": "redis", "url": redis_url, "key_prefix": "bench:"} if redis_url else {}
    return {
        "state": state,
        "providers": {n: {"kind": "vllm", "base_url": u} for n, u in zip(names, urls)},
        "tiers": {"t": tier},
        "pricing": {f"{n}:*": {"input_per_million": 0, "output_per_million": 0} for n in names},
        "resilience": {"max_retries": 0, "deadline_s": 120, **({} if slow_start else {"slow_start_wait_s": 0})},
        "ledger": {"sink": "memory"},
    }


async def run(cfg: Dict[str, Any], balancer: LoadBalancer | None, n: int, concurrency: int,
              on_start: Any = None) -> Dict[str, Any]:
    client = L.AsyncClient(config=cfg)
    if balancer is not None:
        client._engine.balancer = balancer
    latencies: List[float] = []
    latencies_in_order: List[float] = []
    starts: List[tuple[float, str]] = []
    queued: List[float] = []
    todo = itertools.count()
    t0 = time.perf_counter()

    async def worker() -> None:
        while next(todo) < n:
            t = time.perf_counter()
            r = await client.chat.completions.create(model="t", messages=MESSAGES, max_tokens=4)
            latencies.append(time.perf_counter() - t)
            latencies_in_order.append(latencies[-1])
            starts.append((t - t0, r.route.deployment or ""))
            queued.append(r.route.queued_s)

    async with client:
        tasks = [asyncio.create_task(worker()) for _ in range(concurrency)]
        if on_start is not None:
            await on_start(t0)
        await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - t0
    latencies.sort()
    split = {d: sum(1 for _, dep in starts if dep == d) for d in ("a:m", "b:m", "c:m")}
    warm = sorted(lat for lat, (s, _) in zip(latencies_in_order, starts) if s >= 1.0)
    return {"p50_s": latencies[len(latencies) // 2], "p99_s": latencies[int(len(latencies) * 0.99) - 1],
            "p99_after_1s": warm[int(len(warm) * 0.99) - 1] if warm else None,
            "throughput": n / elapsed, "split": split, "starts": starts, "elapsed": elapsed,
            "all_latencies": latencies,
            "slowest": sorted(((lat, s, d, q) for lat, (s, d), q in zip(latencies_in_order, starts, queued)),
                              reverse=True)[:8]}


def fleet(urls: List[str], processes: int, n: int, concurrency: int, weights: Sequence[float],
          redis_url: str | None, warm_url: str | None = None, slow_start: bool = True) -> Dict[str, Any]:
    """`processes` worker processes at once, each `n / processes` requests at `concurrency / processes`:
    each warms up first (on `warm_url`, a server outside the tier), then all start together."""
    args = ["--worker", ",".join(urls), "--requests", str(n // processes),
            "--concurrency", str(concurrency // processes), "--weights", ",".join(str(w) for w in weights)]
    if redis_url:
        args += ["--redis", redis_url]
    if warm_url:
        args += ["--warm", warm_url]
    if not slow_start:
        args.append("--no-slow-start")
    workers = [subprocess.Popen([sys.executable, __file__, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True) for _ in range(processes)]
    for w in workers:
        assert w.stdout is not None and w.stdout.readline().strip() == "ready"
    t0 = time.perf_counter()
    for w in workers:
        assert w.stdin is not None
        w.stdin.write("go\n")
        w.stdin.flush()
    results = [json.loads(w.communicate(timeout=300)[0].strip().splitlines()[-1]) for w in workers]
    elapsed = time.perf_counter() - t0
    slowest = sorted(((x[0], k, *x[1:]) for k, r in enumerate(results) for x in r["slowest"]), reverse=True)[:8]
    latencies = sorted(x for r in results for x in r["latencies"])
    split = {d: sum(r["split"][d] for r in results) for d in ("a:m", "b:m", "c:m")}
    return {"p50_s": latencies[len(latencies) // 2], "p99_s": latencies[int(len(latencies) * 0.99) - 1],
            "throughput": len(latencies) / max(r["elapsed"] for r in results), "wall_s": elapsed, "split": split,
            "slowest": slowest}


def worker(args: argparse.Namespace) -> None:
    """One process of the fleet: warms up on its own (imports, the call path's lazy modules) with a
    separate client against the warm-up server, says "ready", waits for "go" on stdin, then runs its
    share of the load with a fresh client (its balancer knows nothing yet)."""
    weights = [float(w) for w in args.weights.split(",")]
    urls = args.worker.split(",")
    if args.warm:
        asyncio.run(run(config([args.warm] * 3, None), None, 12, 3))
    print("ready", flush=True)
    sys.stdin.readline()
    cfg = config(urls, None, weights, args.redis, slow_start=not args.no_slow_start)
    res = asyncio.run(run(cfg, None, args.requests, args.concurrency))
    res["latencies"] = res.pop("all_latencies")
    res.pop("starts")
    print(json.dumps(res))


def cpu_per_call(concurrency: int = 256, calls: int = 50_000) -> float:
    """CPU seconds per call of the default strategy with `concurrency` calls in flight over three deployments."""
    from llmroute.resilience.failover import Candidate

    b = LoadBalancer()
    cands = [Candidate(f"{n}:m", "t", 1.0) for n in "abc"]
    ids = [c.deployment_id for c in cands]
    rng = random.Random(1)
    now = 0.0
    inflight: List[tuple[str, int, float]] = []
    for _ in range(concurrency):
        order, _ = b.rank(cands, ids, now, rng=rng)
        dep = order[0].deployment_id
        inflight.append((dep, b.started(dep, now), now))
    t = time.process_time()
    for i in range(calls):
        now += 0.001
        dep, met, started = inflight[i % concurrency]
        b.finished(dep, now, latency_s=0.1 + (i % 7) * 0.01, met=met, ok=True)
        order, choice = b.rank(cands, ids, now, rng=rng)
        new = order[0].deployment_id
        assert choice is not None
        _ = choice.text
        inflight[i % concurrency] = (new, b.started(new, now), now)
    return (time.process_time() - t) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=480)
    parser.add_argument("--concurrency", type=int, default=24)
    parser.add_argument("--slowdown-requests", type=int, default=1200)
    parser.add_argument("--json", default=None)
    parser.add_argument("--fleet", type=int, default=4, help="processes sharing Redis in the fleet run (0: skip)")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--weights", default="1,1,1", help=argparse.SUPPRESS)
    parser.add_argument("--redis", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--warm", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--no-slow-start", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    child = subprocess.Popen([sys.executable, "-m", "tests.servers.capacity", *(f"{s}:{t}" for s, t in SPECS),
                              WARM_SPEC], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdin is not None and child.stdout is not None
    urls = [child.stdout.readline().strip() for _ in SPECS]
    warm_url = child.stdout.readline().strip()  # the fleet's processes warm up here (not in the tier)
    out: Dict[str, Any] = {}
    try:
        truth = {f"{n}:m": spec for n, spec in zip("abc", SPECS)}
        strategies = [
            ("round-robin", None, RoundRobin),
            ("weighted (old)", "weighted", None),
            ("load (default)", None, None),
            ("load, slow start off", None, None),
            ("load, weights 8/8/1", None, None),
            ("peak-EWMA x in-flight", None, PeakEwmaInFlight),
            ("SED (knows capacity)", None, lambda: KnowsCapacity(truth)),
        ]
        print(f"{'strategy':24} {'p50':>7} {'p99':>7} {'req/s':>7}  split a/b/c")
        for name, balance, factory in strategies:
            weights = (8, 8, 1) if "8/8/1" in name else (1, 1, 1)
            cfg = config(urls, balance, weights, slow_start="slow start off" not in name)
            res = asyncio.run(run(cfg, factory() if factory else None, args.requests, args.concurrency))
            split = "/".join(str(v) for v in res.pop("split").values())
            res.pop("starts")
            res.pop("all_latencies")
            out[name] = res
            print(f"{name:24} {res['p50_s']:7.3f} {res['p99_s']:7.3f} {res['throughput']:7.1f}  {split}"
                  f"   (p99 of calls started after 1 s: {res['p99_after_1s']:.3f})")
        ref = out["SED (knows capacity)"]
        for name in ("load (default)", "load, slow start off", "load, weights 8/8/1"):
            mine = out[name]
            print(f"{name} vs SED: p99 {mine['p99_s'] / ref['p99_s']:.2f}x, "
                  f"throughput {mine['throughput'] / ref['throughput']:.2f}x")

        async def slow_a(t0: float) -> None:
            await asyncio.sleep(2.0)
            child.stdin.write("slow 0 8\n")  # type: ignore[union-attr]
            child.stdin.flush()  # type: ignore[union-attr]
            child.stdout.readline()  # type: ignore[union-attr]
            out["slowed_at_s"] = time.perf_counter() - t0

        res = asyncio.run(run(config(urls, None), None, args.slowdown_requests, args.concurrency, on_start=slow_a))
        child.stdin.write("slow 0 1\n")
        child.stdin.flush()
        child.stdout.readline()
        at = out["slowed_at_s"]
        fair = (8 / 0.8) / (8 / 0.8 + 8 / 0.1 + 1 / 0.4)
        print(f"slowdown: a:m slowed 8x at {at:.2f}s; its fair share after: {fair:.1%}; its share of new requests:")
        windows = []
        for k in range(int(max(s for s, _ in res["starts"]) / 0.5) + 1):
            w = [d for s, d in res["starts"] if k * 0.5 <= s < (k + 1) * 0.5]
            if w:
                share = w.count("a:m") / len(w)
                windows.append((k * 0.5, len(w), share))
                print(f"  {k * 0.5:4.1f}-{k * 0.5 + 0.5:4.1f}s  {len(w):4d} started  a:m {share:6.1%}")
        after = [d for s, d in res["starts"] if s >= at + 2.0]
        share_after = after.count("a:m") / len(after) if after else 0.0
        print(f"  from 2 s after the slowdown on: a:m got {share_after:.1%} of {len(after)} (fair share {fair:.1%})")
        out["slowdown"] = {"fair_share": fair, "share_after_2s": share_after, "windows": windows,
                           "p99_s": res["p99_s"], "throughput": res["throughput"]}
        if args.fleet:
            sys.path.insert(0, str(ROOT))
            from tests.state.servers import RedisServer

            redis = RedisServer().start()
            try:
                runs = [(label, weights, shared, True) for label, weights in (("1/1/1", (1, 1, 1)), ("8/8/1", (8, 8, 1)))
                        for shared in (False, True)] + [("1/1/1", (1, 1, 1), True, False)]
                for label, weights, shared, slow_start in runs:
                    res = fleet(urls, args.fleet, args.requests, args.concurrency, weights,
                                redis.url if shared else None, warm_url, slow_start)
                    key = (f"{args.fleet} processes, weights {label}, {'shared Redis' if shared else 'local state'}"
                           + ("" if slow_start else ", slow start off"))
                    out[key] = res
                    split = "/".join(str(v) for v in res.pop("split").values())
                    print(f"{key:64} p50 {res['p50_s']:.3f} p99 {res['p99_s']:.3f} "
                          f"{res['throughput']:6.1f} req/s  {split}")
                    ref_p99, ref_rps = out["SED (knows capacity)"]["p99_s"], out["SED (knows capacity)"]["throughput"]
                    print(f"{'':64} vs SED: p99 {res['p99_s'] / ref_p99:.2f}x, "
                          f"throughput {res['throughput'] / ref_rps:.2f}x; slowest (latency, process, start, "
                          f"deployment, queued): {[tuple(round(x, 3) if isinstance(x, float) else x for x in r) for r in res['slowest'][:6]]}")
            finally:
                redis.stop()
        cpu = cpu_per_call()
        out["cpu_per_call_us"] = cpu * 1e6
        print(f"strategy CPU per call at concurrency 256: {cpu * 1e6:.1f} us")
    finally:
        child.stdin.close()
        child.wait(timeout=10)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
