"""Ledger and report cost: what `write()` costs the request path, how fast batches commit, and how
long `llmroute report` takes over a ledger of N records.

    python benchmarks/ledger_bench.py [--records 100000] [--threads 4] [--out benchmarks/ledger_bench.json]

Prints a table and writes JSON. Numbers depend on the machine and its load; the command and the
figures are kept in benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import threading
import time
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from llmroute.accounting.ledger import LedgerRecord, SQLiteSink  # noqa: E402

from llmroute.accounting.sinks import read_records
from llmroute.accounting.report import percentile, report, to_html  # noqa: E402


def make(i: int) -> LedgerRecord:
    return LedgerRecord(
        ts=1_767_225_600.0 + i * 0.5, request_id=f"r{i}", feature=("chat", "summarize", "search")[i % 3],
        metadata={"tenant": f"t{i % 17}"}, tier=("small", "large")[i % 2], pool="interactive", provider="tg",
        provider_kind="together", deployment="tg:m", model="m", input_tokens=1000 + i % 500, output_tokens=200,
        cached_tokens=100, cost=Decimal("0.001232"), currency="USD", priced=True, price_version="v",
        status="ok" if i % 20 else "error", ttft_ms=100.0 + i % 50, latency_ms=800.0 + i % 300, router_score=0.5,
    )  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--flush-interval", type=float, default=1.0)
    ap.add_argument("--out", default=str(Path(__file__).with_name("ledger_bench.json")))
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "ledger.db"
        sink = SQLiteSink(path, flush_interval_s=args.flush_interval)
        per_thread = args.records // args.threads
        lat: list[list[float]] = [[] for _ in range(args.threads)]

        def work(t: int) -> None:
            out = lat[t]
            for i in range(t * per_thread, (t + 1) * per_thread):
                r = make(i)
                t0 = time.perf_counter_ns()
                sink.write(r)
                out.append((time.perf_counter_ns() - t0) / 1000)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(args.threads)]
        t0 = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        t_write = time.perf_counter() - t0
        t1 = time.perf_counter()
        sink.close()
        t_close = time.perf_counter() - t1
        n = per_thread * args.threads
        all_lat = [x for xs in lat for x in xs]
        size_mb = path.stat().st_size / 1e6

        t2 = time.perf_counter()
        rows = report(path, by=("feature", "tier", "day"))
        t_report = time.perf_counter() - t2
        t3 = time.perf_counter()
        html = to_html(rows, ("feature", "tier", "day"), read_records(path), title="bench", rates=None)
        t_html = time.perf_counter() - t3
        assert sum(r["attempts"] for r in rows) == n

    result = {
        "records": n,
        "threads": args.threads,
        "flush_interval_s": args.flush_interval,
        "write_call_us_p50": round(percentile(all_lat, 50), 2),
        "write_call_us_p99": round(percentile(all_lat, 99), 2),
        "write_call_us_max": round(max(all_lat), 1),
        "accepted_per_s": round(n / t_write),
        "final_flush_s": round(t_close, 3),
        "db_mb": round(size_mb, 1),
        "report_s": round(t_report, 3),
        "report_records_per_s": round(n / t_report),
        "html_s": round(t_html, 3),
        "html_kb": round(len(html) / 1000, 1),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }
    width = max(map(len, result))
    for k, v in result.items():
        print(f"{k.ljust(width)}  {v}")
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
