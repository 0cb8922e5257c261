"""CPU per stream chunk in the call core alone: `AsyncStream` / `Stream` over one attempt's bytes, no socket.

Each call: `CallRun(...)`, `next_step`, a `StreamState` opened up to its first content (as the client's
`_open` does), then the stream (`AsyncStream` or `Stream`) read to its end by the caller, or, for a plain
call read as a stream, `get_final_completion()` (the client's default for a plain call). The bytes are the
loopback OpenAI server's (`tests/servers/openai.py`): a role chunk, N content pieces, the finish chunk, the
usage chunk and `[DONE]`, delivered either one event per read (a slow server, a client at concurrency 1)
or all in one read (a fast server, a busy client).

Per chunk = (µs per call with 64 pieces - µs per call with 16 pieces) / 48, best of `--rounds` rounds of
`--calls` calls each; "raw" is what a raw client does with the same bytes in-process (split the lines,
`json.loads` each event's data), for scale.

    python benchmarks/stream_chunk_cpu.py [--calls 400] [--rounds 7] [--tree /other/checkout]

Nothing is sent anywhere: the deployment's URL is never dialled.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Dict, Iterator, List

ROOT = Path(__file__).resolve().parent.parent
MESSAGES = [{"role": "user", "content": "say hello"}]


def _events(pieces: int) -> List[bytes]:
    """The loopback OpenAI server's stream for `pieces` pieces of " tok", one SSE event each."""
    base = {"id": "chatcmpl-openai-1", "object": "chat.completion.chunk", "created": 1796436629,
            "model": "gpt-4o-mini", "service_tier": "default", "system_fingerprint": "fp_loopback"}

    def chunk(delta: Dict[str, Any], finish: str | None) -> Dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
                "usage": None}

    bodies = [chunk({"role": "assistant", "content": ""}, None)]
    bodies += [chunk({"content": " tok"}, None) for _ in range(pieces)]
    bodies.append(chunk({}, "stop"))
    bodies.append({**base, "choices": [], "usage": {
        "prompt_tokens": 1, "completion_tokens": pieces, "total_tokens": pieces + 1,
        "prompt_tokens_details": {"cached_tokens": 0}, "completion_tokens_details": {"reasoning_tokens": 0}}})
    out = [b"data: " + json.dumps(b, separators=(",", ":")).encode() + b"\n\n" for b in bodies]
    return out + [b"data: [DONE]\n\n"]


def _reads(pieces: int, whole: bool) -> List[bytes]:
    events = _events(pieces)
    return [b"".join(events)] if whole else events


def raw_call(reads: List[bytes]) -> None:
    """What the raw clients of `client_overhead_ab.py` do with the bytes (their readline left out)."""
    for data in reads:
        for raw_line in data.split(b"\n"):
            line = raw_line.decode().strip()
            if line.startswith("data: ") and line != "data: [DONE]":
                json.loads(line[6:])


def measure(tree: Path, calls: int, rounds: int, only: str = "") -> Dict[str, float]:
    """Best µs per call of each case, with `tree`'s llmroute."""
    sys.path.insert(0, str(tree))
    from llmroute._call.call import CallRun, StreamState, prepare_call
    from llmroute._call.engine import Engine
    from llmroute.config import Config
    from llmroute.streams import AsyncStream, Stream, _Opened

    url = "http://127.0.0.1:9/v1"  # never dialled
    cfg = Config.from_dict({
        "providers": {"a": {"kind": "openai-compatible", "base_url": url}},
        "tiers": {"t": {"deployments": ["a:gpt-4o-mini"]}},
        "pricing": {"a:*": {"input_per_million": 0, "output_per_million": 0}},
        "ledger": {"sink": "memory"},
    })
    engine = Engine(cfg)
    now = time.monotonic  # the streams read this clock themselves

    class Response:
        headers: Dict[str, str] = {}

        async def aclose(self) -> None:
            return None

        def close(self) -> None:
            return None

    def opened(stream: bool, reads: List[bytes], chunks: Any) -> Any:
        run = CallRun(engine, prepare_call(cfg, {"model": "t", "messages": MESSAGES, "max_tokens": 64,
                                                 "stream": stream}), now(), wall=time.time)
        ctx: Any = run.next_step(now())
        state = StreamState(run, ctx)
        op = _Opened(ctx, state, response=Response(), run=run)
        return run, op, state, chunks

    async def aread(reads: List[bytes]) -> AsyncIterator[bytes]:
        for data in reads:
            yield data

    def sread(reads: List[bytes]) -> Iterator[bytes]:
        yield from reads

    def opening(op: Any, state: Any, data: bytes) -> bool:
        """The client's `_open` for one read: its chunks up to the first content; True once content started."""
        op.rest = state.feed_each(data, now())
        for chunk in op.rest:
            op.ready.append(chunk)
            if state.content_started:
                return True
        return False

    async def async_call(stream: bool, reads: List[bytes]) -> None:
        run, op, state, chunks = opened(stream, reads, aread(reads))
        op.chunks = chunks
        async for data in chunks:  # read up to the first content
            if opening(op, state, data):
                break

        async def reopen(_: Any) -> Any:
            raise AssertionError("no second attempt here")

        s = AsyncStream(run, op, reopen)
        if stream:
            async with s:
                async for _ in s:
                    pass
        else:
            async with s:
                await s.get_final_completion()

    def sync_call(stream: bool, reads: List[bytes]) -> None:
        run, op, state, chunks = opened(stream, reads, sread(reads))
        op.chunks = chunks
        for data in chunks:
            if opening(op, state, data):
                break

        def reopen(_: Any) -> Any:
            raise AssertionError("no second attempt here")

        with Stream(run, op, reopen) as s:
            if stream:
                for _ in s:
                    pass
            else:
                s.get_final_completion()

    def best(one: Callable[[], None]) -> float:
        n = max(1, calls // per_loop) if one.__name__ == "one_batch" else calls
        for _ in range(max(2, n // 10)):  # warm-up
            one()
        out = float("inf")
        for _ in range(rounds):
            started = time.process_time()
            for _ in range(n):
                one()
            out = min(out, (time.process_time() - started) / n)
        return out * 1e6

    loop = asyncio.new_event_loop()

    per_loop = 10  # calls per `run_until_complete`

    def on_loop(stream: bool, reads: List[bytes]) -> Callable[[], None]:
        async def batch() -> None:
            for _ in range(per_loop):
                await async_call(stream, reads)

        def one_batch() -> None:
            loop.run_until_complete(batch())
        return one_batch

    results: Dict[str, float] = {}
    for whole in (False, True):
        how = "one read" if whole else "a read per event"
        for pieces in (16, 64):
            reads = _reads(pieces, whole)
            cases: Dict[str, Callable[[], float]] = {
                "raw": lambda: best(lambda: raw_call(reads)),
                "sync stream": lambda: best(lambda: sync_call(True, reads)),
                "sync plain": lambda: best(lambda: sync_call(False, reads)),
                # async: `per_loop` calls per run_until_complete
                "async stream": lambda: best(on_loop(True, reads)) / per_loop,
                "async plain": lambda: best(on_loop(False, reads)) / per_loop,
            }
            for case, run_case in cases.items():
                name = f"{case}, {pieces} pieces, {how}"
                if only in name:
                    results[name] = run_case()
    loop.close()
    return results


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", default=str(ROOT), help="the checkout whose llmroute is measured")
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", help="write the figures here too")
    parser.add_argument("--only", default="", help="only the cases whose name contains this")
    args = parser.parse_args(argv)
    calls = args.calls
    results = measure(Path(args.tree), calls, args.rounds, args.only)
    print(f"{'case':<48} {'µs/call':>9}")
    for name, us in results.items():
        print(f"{name:<48} {us:9.1f}")
    print(f"\n{'per chunk ((64 pieces - 16 pieces) / 48)':<48} {'µs':>9}")
    per_chunk = {}
    for name in results:
        if "64 pieces" in name and name.replace("64 pieces", "16 pieces") in results:
            short = name.replace("64 pieces", "16 pieces")
            label = name.replace(", 64 pieces", "")
            per_chunk[label] = (results[name] - results[short]) / 48
            print(f"{label:<48} {per_chunk[label]:9.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"per_call_us": results, "per_chunk_us": per_chunk}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
