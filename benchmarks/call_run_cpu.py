"""CPU of the call core alone: one `CallRun` driven by hand, as the shells drive it, with no socket.

Each call: `CallRun(...)` (admission, the failover plan), `next_step` (the attempt and its record),
a `StreamState` fed one 3-piece SSE answer, `eof`, `finish` (usage, price, the ledger row to the memory
sink, the spans' no-op telemetry). The figure is the best of 7 rounds of `--calls` calls, in µs per call.
With `--plain`, each call is a plain call read whole (`plain_via_stream = false`, as `client_overhead_ab.py`'s
plain-body rows: one tier, pricing, `max_tokens`): `prepare_call`, `CallRun(...)`, `next_step`, `parse_answer`
of a JSON body with usage, `succeeded`.

    python benchmarks/call_run_cpu.py                        # this tree
    python benchmarks/call_run_cpu.py --against /tmp/base    # A/B against another checkout, interleaved
    python benchmarks/call_run_cpu.py --plain --against /tmp/base
    python benchmarks/call_run_cpu.py --stages                # the plain call's µs per stage of the core

With `--against`, each round runs this tree's and the other tree's measurement in fresh child
processes, alternately (`--rounds` times), and prints the median of the per-round ratios (this / other).
Nothing is sent anywhere: the deployments' URLs are never dialled.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

ROOT = Path(__file__).resolve().parent.parent
MESSAGES = [{"role": "user", "content": "say hello"}]


def _sse(*pieces: str) -> bytes:
    out = b""
    for piece in pieces:
        body = {"id": "x", "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
        out += b"data: " + json.dumps(body).encode() + b"\n\n"
    end = {"id": "x", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    return out + b"data: " + json.dumps(end).encode() + b"\n\ndata: [DONE]\n\n"


def _plain_parts(tree: Path) -> Dict[str, Any]:
    """What a plain call read whole needs, as `client_overhead_ab.py`'s `plain_via_stream = false` rows
    make it: the config, the engine, the answer's body and headers, and the call core's functions."""
    sys.path.insert(0, str(tree))
    from llmroute._call.call import CallRun, prepare_call
    from llmroute._call.engine import Engine
    from llmroute._http.bounded import DEFAULT_READ_LIMITS
    from llmroute.config import Config

    url = "http://127.0.0.1:9/v1"  # never dialled
    model = "gpt-4o-mini"
    cfg = Config.from_dict({
        "providers": {"bench": {"kind": "openai-compatible", "base_url": url, "api_key": "sk-test",
                                "max_connections": 4, "connect_timeout_s": 60, "ttft_timeout_s": 100,
                                "timeout_s": 110}},
        "tiers": {"small": {"deployments": [{"id": f"bench:{model}", "plain_via_stream": False}]}},
        "pricing": {f"bench:{model}": {"input_per_million": 0.15, "output_per_million": 0.6, "currency": "USD"}},
        "ledger": {"sink": "memory"},
    })
    body = json.dumps({"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": model,
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello there! " * 8},
                                    "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 9, "completion_tokens": 32, "total_tokens": 41}}).encode()
    return {"cfg": cfg, "engine": Engine(cfg), "body": body, "headers": {"content-type": "application/json"},
            "CallRun": CallRun, "prepare_call": prepare_call, "limits": DEFAULT_READ_LIMITS}


def _plain(tree: Path) -> Callable[[float], None]:
    """One plain call read whole (`_plain_parts`)."""
    p = _plain_parts(tree)
    cfg, engine, body, headers, limits = p["cfg"], p["engine"], p["body"], p["headers"], p["limits"]
    CallRun, prepare_call = p["CallRun"], p["prepare_call"]

    def one(now: float) -> None:
        run = CallRun(engine, prepare_call(cfg, {"model": "small", "messages": MESSAGES, "max_tokens": 64}), now,
                      wall=time.time)
        ctx: Any = run.next_step(now)
        completion, reported = run.parse_answer(ctx, headers, body, limits)
        run.succeeded(ctx, completion, reported, now + 0.01, None)

    return one


STAGES = ("prepare_call", "CallRun(...)", "next_step", "parse_answer", "succeeded")


def plain_stages(tree: Path, calls: int) -> Dict[str, float]:
    """µs per call in each stage of `_plain`'s call (`perf_counter` around each; the mean of `calls`
    calls after 500 warm-up calls)."""
    p = _plain_parts(tree)
    cfg, engine, body, headers, limits = p["cfg"], p["engine"], p["body"], p["headers"], p["limits"]
    CallRun, prepare_call = p["CallRun"], p["prepare_call"]
    spent = [0.0] * len(STAGES)
    clock = time.perf_counter
    now = 1000.0
    for n in range(500 + calls):
        now += 1.0
        t0 = clock()
        prepared = prepare_call(cfg, {"model": "small", "messages": MESSAGES, "max_tokens": 64})
        t1 = clock()
        run = CallRun(engine, prepared, now, wall=time.time)
        t2 = clock()
        ctx: Any = run.next_step(now)
        t3 = clock()
        completion, reported = run.parse_answer(ctx, headers, body, limits)
        t4 = clock()
        run.succeeded(ctx, completion, reported, now + 0.01, None)
        t5 = clock()
        if n >= 500:
            for i, (a, b) in enumerate(((t0, t1), (t1, t2), (t2, t3), (t3, t4), (t4, t5))):
                spent[i] += b - a
    return {name: total / calls * 1e6 for name, total in zip(STAGES, spent)}


def measure(tree: Path, calls: int, plain: bool = False) -> float:
    """Best µs per call over 7 rounds, with `tree`'s llmroute."""
    one = _plain(tree) if plain else _streamed(tree)
    now = 1000.0
    for _ in range(300):  # warm-up
        now += 1.0
        one(now)
    best = float("inf")
    for _ in range(7):
        started = time.perf_counter()
        for _ in range(calls):
            now += 1.0  # a second apart: no breaker window or limit carries over between calls
            one(now)
        best = min(best, (time.perf_counter() - started) / calls)
    return best * 1e6


def _streamed(tree: Path) -> Callable[[float], None]:
    """One call read as a 3-piece stream."""
    sys.path.insert(0, str(tree))
    from llmroute._call.call import CallRun, StreamState, prepare_call
    from llmroute._call.engine import Engine
    from llmroute.config import Config

    url = "http://127.0.0.1:9/v1"  # never dialled
    cfg = Config.from_dict({
        "providers": {"a": {"kind": "vllm", "base_url": url}, "b": {"kind": "vllm", "base_url": url}},
        "tiers": {"t": {"deployments": ["a:m", "b:m"]}},
        "pricing": {f"{p}:*": {"input_per_million": 0, "output_per_million": 0} for p in "ab"},
        "ledger": {"sink": "memory"},
    })
    engine = Engine(cfg)
    body = _sse("Hello", " there", "!")

    def one(now: float) -> None:
        run = CallRun(engine, prepare_call(cfg, {"model": "t", "messages": MESSAGES}), now, wall=time.time)
        ctx: Any = run.next_step(now)
        state = StreamState(run, ctx)
        state.feed(body, now + 0.01)
        state.eof(now + 0.01)
        state.finish(now + 0.02)

    return one


def _child(tree: Path, calls: int, plain: bool) -> float:
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--tree", str(tree), "--calls", str(calls)]
                         + (["--plain"] if plain else []), capture_output=True, text=True, check=True, timeout=600)
    return float(out.stdout.strip().splitlines()[-1])


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", default=str(ROOT), help="the checkout whose llmroute is measured")
    parser.add_argument("--against", help="another checkout: interleaved A/B rounds, the median ratio printed")
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--plain", action="store_true", help="a plain call read whole (plain_via_stream = false)")
    parser.add_argument("--stages", action="store_true", help="the plain call's µs per stage of the call core")
    args = parser.parse_args(argv)
    if args.stages:
        stages = plain_stages(Path(args.tree), args.calls)
        for name, us in stages.items():
            print(f"{name:14} {us:6.1f} µs")
        print(f"{'total':14} {sum(stages.values()):6.1f} µs")
        return 0
    if not args.against:
        print(f"{measure(Path(args.tree), args.calls, args.plain):.1f}")
        return 0
    other = Path(args.against)
    if not (other / "llmroute" / "__init__.py").is_file():
        parser.error(f"--against {other}: no llmroute/ package there")
    ratios = []
    for i in range(args.rounds):
        pair = (_child(ROOT, args.calls, args.plain), _child(other, args.calls, args.plain)) if i % 2 == 0 else \
            tuple(reversed((_child(other, args.calls, args.plain), _child(ROOT, args.calls, args.plain))))
        ours, theirs = pair
        ratios.append(ours / theirs)
        print(f"round {i + 1}: this {ours:.1f} µs, other {theirs:.1f} µs, ratio {ours / theirs:.3f}")
    print(f"median ratio (this / other): {statistics.median(ratios):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
