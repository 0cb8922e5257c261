"""Peak memory per delivered character of a long streamed answer, and where a runaway is cut.

    PYTHONPATH=. .venv/bin/python benchmarks/answer_memory.py [--chars 1000000 2000000]

Each measurement runs in a fresh child process (its peak RSS is its own): a sync `Client` makes one
plain call (read as a stream) to the hostile loopback server in `long_sse:<chars>` mode, which sends
`<chars>` characters in 4-character pieces (one piece a chunk, the shape of a token-by-token stream)
and usage in its last chunk. The byte caps are raised out of the way; the tokenizer is loaded before
the baseline. Printed: characters delivered, peak RSS growth over the call (MiB), bytes a character.
A last row runs the `runaway_sse` mode (a stream without end) with `max_tokens=256`: how far it is
read before the answer cap cuts it. JSON to benchmarks/out/answer_memory.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import gc, json, resource, sys, time
sys.path.insert(0, sys.argv[1])
from tests.servers.hostile import HostileServer
import llmroute as L
from llmroute.accounting.tokens import count_text_tokens
count_text_tokens("load the tokenizer before the baseline")
mode, max_tokens = sys.argv[2], int(sys.argv[3])
with HostileServer() as server:
    server.mode = mode
    config = {"providers": {"h": {"kind": "openai-compatible", "base_url": server.base_url}},
              "tiers": {"t": {"deployments": [{"id": "h:m", "ttft_timeout_s": 120}]}},
              "pricing": {"h:*": {"input_per_million": 1, "output_per_million": 2}}, "ledger": {"sink": "memory"}}
    limits = L.ReadLimits(max_response_bytes=1 << 31, max_decoded_bytes=1 << 31)
    with L.Client(config=config, read_limits=limits) as client:
        gc.collect()
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        started = time.monotonic()
        kwargs = {"max_tokens": max_tokens} if max_tokens else {}
        try:
            out = client.chat.completions.create(model="t", messages=[{"role": "user", "content": "hi"}],
                                                 timeout=300, **kwargs)
            chars, error = len(out.choices[0].message.content), None
        except L.LLMRouteError as exc:
            chars, error = None, f"{type(exc).__name__} ({getattr(exc, 'limit', '')})"
        seconds = time.monotonic() - started
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        record = client._engine.ledger.records[-1]
print(json.dumps({"mode": mode, "chars": chars, "error": error, "rss_mib": (peak - base) / 1024,
                  "seconds": seconds, "output_tokens": record.output_tokens, "estimated": record.estimated}))
"""


def measure(mode: str, max_tokens: int = 0) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, str(ROOT), mode, str(max_tokens)], capture_output=True,
                          text=True, timeout=600, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chars", type=int, nargs="+", default=[1_000_000, 2_000_000])
    args = parser.parse_args()
    rows = [measure(f"long_sse:{n}") for n in args.chars] + [measure("runaway_sse", 256)]
    print(f"{'mode':<22} {'chars':>10} {'peak RSS MiB':>13} {'bytes/char':>11} {'s':>6}  outcome")
    for row in rows:
        per_char = row["rss_mib"] * (1 << 20) / row["chars"] if row["chars"] else float("nan")
        outcome = row["error"] or "ok"
        print(f"{row['mode']:<22} {row['chars'] or '-':>10} {row['rss_mib']:>13.1f} {per_char:>11.2f} "
              f"{row['seconds']:>6.2f}  {outcome}; ledger {row['output_tokens']} output tokens"
              f"{' (estimated)' if row['estimated'] else ''}")
    out = ROOT / "benchmarks" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "answer_memory.json").write_text(json.dumps(rows, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
