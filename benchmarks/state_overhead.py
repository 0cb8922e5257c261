"""What shared state costs a call, and how fast the PostgreSQL ledger takes records.

    python benchmarks/state_overhead.py [--calls 300] [--records 20000] [--out benchmarks/state_overhead.json]

Starts, on 127.0.0.1 only: a loopback platform server (a child process), a redis-server and a
PostgreSQL (temporary folders, free ports; installed by scripts/services.sh). Then:
- the same sync Client config (limits rpm + tpm + max_concurrency, one daily budget) with
  `[state] backend = "local"` and `"redis"`, `--calls` sequential calls each, interleaved in rounds:
  latency p50/p99 and CPU per call of this process (Redis's own CPU is not in it), and the Lua
  script calls per call redis-server counted (INFO commandstats): the round trips before sending;
- the step before sending alone (limits + budget): two scripts against the one script doing both,
  `5 x --calls` each;
- `--records` ledger records into PostgresSink and SQLiteSink, one flush: records per second.
Prints a table and writes JSON. Figures depend on the machine and its load; RESULTS.md keeps them.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
import uuid
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import llmroute as L  # noqa: E402
from llmroute.accounting.ledger import LedgerRecord, SQLiteSink  # noqa: E402
from llmroute.accounting.ledger_postgres import PostgresSink  # noqa: E402
from tests.servers.process import spawn  # noqa: E402
from tests.state.servers import PostgresServer, RedisServer  # noqa: E402

MESSAGES = [{"role": "user", "content": "hello there"}]


def config(base_url: str, redis_url: str | None) -> dict:
    cfg = {
        "providers": {"p": {"kind": "vllm", "base_url": base_url}},
        "tiers": {"chat": {"deployments": ["p:m"]}},
        "pricing": {"p:*": {"input_per_million": 1, "output_per_million": 1}},
        "resilience": {"max_retries": 0, "rpm": 1_000_000, "tpm": 1_000_000_000, "max_concurrency": 1000},
        "budgets": [{"name": "daily", "max_cost": "1000000", "currency": "USD"}],
        "ledger": {"sink": "none"},
    }
    if redis_url:
        cfg["state"] = {"backend": "redis", "url": redis_url, "key_prefix": f"b{uuid.uuid4().hex[:6]}:"}
    return cfg


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q / 100 * len(s)) - 1))]


def run_calls(client: L.Client, n: int) -> tuple[list[float], float]:
    lat = []
    cpu0 = time.process_time()
    for _ in range(n):
        t = time.perf_counter()
        client.chat.completions.create(model="chat", messages=MESSAGES, max_tokens=16)
        lat.append(time.perf_counter() - t)
    return lat, time.process_time() - cpu0


def script_calls(redis_url: str) -> int:
    """EVALSHA + EVAL calls redis-server has answered so far (INFO commandstats)."""
    import redis

    with redis.Redis.from_url(redis_url) as r:
        stats = r.info("commandstats")
    return sum(v["calls"] for k, v in stats.items() if k in ("cmdstat_evalsha", "cmdstat_eval"))


def before_sending(redis_url: str, n: int, rounds: int) -> dict:
    """The step before sending alone, on one connection: the limits script then the budget script
    (two round trips, as before) against the one script doing both; interleaved rounds. Per call:
    wall and CPU microseconds."""
    from llmroute.resilience.limits import DeploymentLimits
    from llmroute.resilience.policy import ResiliencePolicy
    from llmroute.state import Fleet, StateConfig

    policy = ResiliencePolicy(rpm=10**9, tpm=10**12, max_concurrency=10**6)
    fleet = Fleet(StateConfig(backend="redis", url=redis_url, key_prefix=f"m{uuid.uuid4().hex[:6]}:"))
    limits = fleet.shared_limits(DeploymentLimits(lambda pool, dep: policy))
    key = fleet.budgets.key("daily", (), (2026, 12, 3))
    items = [(key, 10**18, 1000, "refuse")]

    def two() -> None:
        lease = limits.try_acquire(0.0, "p:m", tokens=100).lease
        fleet.budgets.reserve(items, 86400, reserve=True)
        limits.release(lease)

    def one() -> None:
        req = limits.request("p:m", tokens=100)
        reply = fleet.budgets.reserve(items, 86400, reserve=True, admit=req)[3]
        limits.release(limits.admission(req, reply).lease)

    took = {"two scripts": [0.0, 0.0], "one script": [0.0, 0.0]}
    for fn in (two, one):
        fn()  # scripts loaded
    for _ in range(rounds):
        for name, fn in (("two scripts", two), ("one script", one)):
            w, c = time.perf_counter(), time.process_time()
            for _ in range(n // rounds):
                fn()
            took[name][0] += time.perf_counter() - w
            took[name][1] += time.process_time() - c
    fleet.close()
    per = (n // rounds) * rounds
    return {name: {"wall_us": t[0] / per * 1e6, "cpu_us": t[1] / per * 1e6} for name, t in took.items()}


def make(i: int) -> LedgerRecord:
    return LedgerRecord(ts=time.time(), request_id=uuid.uuid4().hex, feature="chat", metadata={"tenant": f"t{i % 17}"},
                        deployment="p:m", provider="p", model="m", input_tokens=1000, output_tokens=200,
                        cost=Decimal("0.001232"), currency="USD", priced=True, status="ok", latency_ms=800.0)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    redis_server = RedisServer().start()
    pg = PostgresServer().start()
    out: dict = {"machine": platform.platform(), "calls": args.calls, "rounds": args.rounds}
    try:
        with spawn("fault") as base_url:
            clients = {"local": L.Client(config=config(base_url, None)),
                       "redis": L.Client(config=config(base_url, redis_server.url))}
            for c in clients.values():
                run_calls(c, 20)  # warm up: connections, tokenizer, scripts loaded
            lat: dict[str, list[float]] = {k: [] for k in clients}
            cpu: dict[str, float] = {k: 0.0 for k in clients}
            scripts = 0
            for _ in range(args.rounds):
                for name, c in clients.items():
                    before = script_calls(redis_server.url) if name == "redis" else 0
                    got, spent = run_calls(c, args.calls // args.rounds)
                    if name == "redis":
                        scripts += script_calls(redis_server.url) - before
                    lat[name] += got
                    cpu[name] += spent
            for c in clients.values():
                c.close()
        rows = {}
        for name in clients:
            rows[name] = {"p50_ms": pct(lat[name], 50) * 1000, "p99_ms": pct(lat[name], 99) * 1000,
                          "mean_ms": statistics.mean(lat[name]) * 1000, "cpu_us_per_call": cpu[name] / len(lat[name]) * 1e6}
        out["calls_table"] = rows
        print(f"{'state':8} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8} {'CPU us/call':>12}")
        for name, r in rows.items():
            print(f"{name:8} {r['p50_ms']:8.2f} {r['p99_ms']:8.2f} {r['mean_ms']:8.2f} {r['cpu_us_per_call']:12.0f}")
        added = {k: rows["redis"][k] - rows["local"][k] for k in ("p50_ms", "p99_ms", "cpu_us_per_call")}
        out["added_by_redis"] = added
        out["redis_scripts_per_call"] = scripts / len(lat["redis"])
        print(f"redis scripts per call (round trips before sending): {out['redis_scripts_per_call']:.2f}")
        print(f"added by redis: p50 {added['p50_ms']:+.2f} ms, p99 {added['p99_ms']:+.2f} ms, "
              f"CPU {added['cpu_us_per_call']:+.0f} us/call")

        step = before_sending(redis_server.url, args.calls * 5, args.rounds)
        out["before_sending"] = step
        for name, r in step.items():
            print(f"before sending, {name:11}: {r['wall_us']:6.0f} us wall, {r['cpu_us']:6.0f} us CPU per call")

        records = [make(i) for i in range(args.records)]
        tmp = Path(tempfile.mkdtemp(prefix="llmroute-bench-"))
        ledgers = {}
        for name, sink in (("postgres", PostgresSink(pg.url, spool_path=tmp / "spool.db", flush_interval_s=3600)),
                           ("sqlite", SQLiteSink(tmp / "ledger.db", flush_interval_s=3600))):
            sink.write(records[0])
            sink.flush()  # connect, create the schema: not timed
            for r in records[1:]:
                sink.write(r)
            t = time.perf_counter()
            sink.flush()
            took = time.perf_counter() - t
            sink.close()
            ledgers[name] = {"records": len(records) - 1, "seconds": took, "records_per_s": (len(records) - 1) / took}
            print(f"ledger {name:8}: {len(records) - 1} records in {took:.2f}s = {(len(records) - 1) / took:,.0f}/s")
        out["ledger_insert"] = ledgers
    finally:
        pg.stop()
        redis_server.stop()
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
