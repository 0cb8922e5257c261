"""What `client.embeddings.create` costs on top of the wire: client CPU per request, against raw httpx.

One loopback OpenAI-shaped server in another process (so it does not share this process's GIL)
answers `POST /v1/embeddings` with 8 vectors of 1536 floats. In the same run, rows alternate
(raw httpx POST + json.loads, then llmroute's `Client.embeddings.create` and `AsyncClient`'s, with
a memory ledger) so the machine's noise cancels out of the ratio. The CPU window closes once the
process has gone quiet.

    python benchmarks/embeddings_overhead.py [--requests 400] [--rounds 3]

Bounded: `--requests` per row per round. Only 127.0.0.1 is contacted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TEXTS = [f"chunk {i} of a document about retrieval and routing" for i in range(8)]
MODEL = "text-embedding-3-small"


def start_server() -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "tests.servers.run", "--platform", "openai", "--port", "0"],
                            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    url = proc.stdout.readline().strip()  # type: ignore[union-attr]
    if not url.startswith("http://127.0.0.1"):
        raise SystemExit("loopback server did not start")
    return proc, url


def settle() -> float:
    """Wait (bounded) until background work has finished; the CPU clock then."""
    deadline = time.monotonic() + 5.0
    before = time.process_time()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = time.process_time()
        if now - before < 0.001:
            return now
        before = now
    return time.process_time()


def raw_httpx(url: str, n: int) -> float:
    import httpx

    with httpx.Client(headers={"Authorization": "Bearer sk-test-openai"}) as client:
        client.post(url + "/embeddings", json={"model": MODEL, "input": TEXTS})  # connect outside the window
        start = time.process_time()
        for _ in range(n):
            data = json.loads(client.post(url + "/embeddings", json={"model": MODEL, "input": TEXTS}).content)
            assert len(data["data"]) == len(TEXTS)
        return (settle() - start) / n


def _config(url: str) -> dict:
    return {"providers": {"o": {"kind": "openai-compatible", "base_url": url, "api_key": "sk-test-openai"}},
            "tiers": {"embed": {"kind": "embedding", "deployments": [f"o:{MODEL}"]}},
            "pricing": {"o:*": {"input_per_million": 0.02, "output_per_million": 0}},
            "ledger": {"sink": "memory"}}


def llmroute_sync(url: str, n: int) -> float:
    import llmroute as L

    with L.Client(_config(url)) as client:
        client.embeddings.create(model="embed", input=TEXTS)
        start = time.process_time()
        for _ in range(n):
            assert len(client.embeddings.create(model="embed", input=TEXTS).data) == len(TEXTS)
        return (settle() - start) / n


def llmroute_async(url: str, n: int) -> float:
    import llmroute as L

    async def main() -> float:
        async with L.AsyncClient(_config(url), transport="httpx") as client:
            await client.embeddings.create(model="embed", input=TEXTS)
            start = time.process_time()
            for _ in range(n):
                assert len((await client.embeddings.create(model="embed", input=TEXTS)).data) == len(TEXTS)
            return (settle() - start) / n

    return asyncio.run(main())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    proc, url = start_server()
    rows = {"raw httpx (sync)": raw_httpx, "llmroute Client.embeddings": llmroute_sync,
            "llmroute AsyncClient.embeddings (httpx)": llmroute_async}
    results: dict[str, list[float]] = {name: [] for name in rows}
    try:
        for _ in range(args.rounds):
            for name, fn in rows.items():
                results[name].append(fn(url, args.requests))
    finally:
        proc.terminate()
        proc.wait(10)
    base = statistics.median(results["raw httpx (sync)"])
    print(f"{'row':42} {'CPU us/request (median of rounds)':>34} {'vs raw httpx':>13}")
    for name, values in results.items():
        cpu = statistics.median(values)
        print(f"{name:42} {cpu * 1e6:34.0f} {cpu / base:12.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
