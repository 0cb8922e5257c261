"""Client-side cost of one large batch job: build, store, split, upload, poll, collect, ledger.

Runs a job of N requests (default 10,000) through `client.batches` against the loopback Bailian
batch server on 127.0.0.1 (split into files of at most `--max-lines`), and prints the wall and CPU
time of each phase. The loopback server's own work shares the process, so the CPU figures are an
upper bound for llmroute's share.

    .venv/bin/python benchmarks/batch_scale.py --requests 10000 --max-lines 5000
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from llmroute import Client  # noqa: E402
from llmroute.accounting.ledger import MemorySink  # noqa: E402
from llmroute.batch import platforms as P  # noqa: E402
from tests.servers.batch import BailianBatchServer  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--max-lines", type=int, default=5_000)
    args = ap.parse_args()
    P.LIMITS["bailian"] = P.Limits(max_lines=args.max_lines, max_bytes=500 * 1024 * 1024)
    reqs = [{"custom_id": f"r{i}", "messages": [{"role": "user", "content": f"label item {i} please"}],
             "max_tokens": 16} for i in range(args.requests)]
    with BailianBatchServer() as server, tempfile.TemporaryDirectory() as tmp:
        cfg = {"providers": {"bl": {"kind": "bailian", "base_url": server.base_url, "api_key": server.api_key}},
               "tiers": {"bulk": {"deployments": ["bl:qwen-plus"]}},
               "batch": {"store": f"{tmp}/jobs.sqlite", "poll_interval_s": 0.001, "max_poll_interval_s": 0.001}}
        sink = MemorySink()
        with Client(cfg, ledger=sink) as client:
            phases = []
            t, c = time.perf_counter(), time.process_time()
            job = client.batches.create(reqs, model="bulk")
            phases.append(("create + upload + submit", time.perf_counter() - t, time.process_time() - c))
            t, c = time.perf_counter(), time.process_time()
            view = client.batches.wait(job.id)
            phases.append(("poll + download + collect + ledger", time.perf_counter() - t, time.process_time() - c))
            t, c = time.perf_counter(), time.process_time()
            results = client.batches.results(job.id)
            phases.append(("results() -> ChatCompletions", time.perf_counter() - t, time.process_time() - c))
    assert view.done == args.requests and len(results) == args.requests and len(sink.records) == args.requests
    print(f"{args.requests} requests, {len(view.parts)} platform files of <= {args.max_lines} lines")
    print("| phase | wall s | CPU s | CPU µs/request |")
    print("|---|---:|---:|---:|")
    for name, wall, cpu in phases:
        print(f"| {name} | {wall:.2f} | {cpu:.2f} | {cpu / args.requests * 1e6:.0f} |")


if __name__ == "__main__":
    main()
