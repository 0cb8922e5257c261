"""Client CPU per call as a ratio to the raw library, measured in interleaved rounds.

`client_overhead.py` runs each row once, one after the other: on a machine shared with other work,
load that comes and goes between the raw row and the llmroute row moves their ratio by ±30 %. Here
each scenario alternates the raw client and llmroute in short rounds (`--rounds` of `--calls` calls
each, in one process, against the same loopback server) and reports the median of the per-round
ratios, so a burst of load lands on both sides of most rounds.

Scenarios: sync `Client` vs raw httpx (a plain body, `plain_via_stream = false`; a 64-chunk stream),
`AsyncClient` on aiohttp vs raw aiohttp (a plain body at concurrency 1 and 32; a 64-chunk stream at
concurrency 32). The llmroute side runs the full call path (routing target, failover plan, breaker,
pricing, an in-memory ledger record, telemetry hooks with no SDK), as in `client_overhead.py`.

    python benchmarks/client_overhead_ab.py [--rounds 12] [--calls 60]

Bounded: rounds x calls per side per scenario. Only 127.0.0.1 is contacted: the audit hook of
`client_overhead.py` refuses any other connect or name look-up, and the run prints how many it refused.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Awaitable, Callable, Dict, List

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.client_overhead import (GUARD_SRC, MODEL, _full_config, _GUARD, allmroute_call,  # noqa: E402
                                        chat_request, llmroute_call, raw_aiohttp_call, raw_httpx_call, start_server)


def _config(url: str, max_connections: int, plain_body: bool) -> Dict[str, Any]:
    config = _full_config(url, max_connections)
    if plain_body:
        config["tiers"] = {"small": {"deployments": [{"id": f"bench:{MODEL}", "plain_via_stream": False}]}}
    return config


def _rounds(sides: Dict[str, Callable[[], float]], rounds: int) -> Dict[str, Any]:
    """Each side's CPU per call, round by round, alternating which side goes first."""
    per_side: Dict[str, List[float]] = {name: [] for name in sides}
    names = list(sides)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            per_side[name].append(sides[name]())
    raw, ours = names
    ratios = [o / w for o, w in zip(per_side[ours], per_side[raw])]
    return {"raw_us": statistics.median(per_side[raw]), "llmroute_us": statistics.median(per_side[ours]),
            "ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios)}


def sync_scenario(url: str, stream: bool, rounds: int, calls: int) -> Dict[str, Any]:
    import httpx

    import llmroute

    body, headers = chat_request(stream)
    with httpx.Client() as h, llmroute.Client(config=_config(url, 4, plain_body=not stream)) as c:
        raw = functools.partial(raw_httpx_call, h, url, body, headers, stream)
        ours = functools.partial(llmroute_call, c, stream)

        def timed(fn: Callable[[], None]) -> Callable[[], float]:
            def run() -> float:
                start = time.process_time()
                for _ in range(calls):
                    fn()
                return (time.process_time() - start) / calls * 1e6
            return run
        for _ in range(20):  # warm: connections, lazy imports
            raw()
            ours()
        return _rounds({"httpx (raw)": timed(raw), "llmroute Client": timed(ours)}, rounds)


def async_scenario(url: str, stream: bool, concurrency: int, rounds: int, calls: int) -> Dict[str, Any]:
    import aiohttp

    import llmroute

    body, headers = chat_request(stream)

    async def main() -> Dict[str, Any]:
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency))
        client = llmroute.AsyncClient(config=_config(url, concurrency, plain_body=not stream), transport="aiohttp")

        raw = functools.partial(raw_aiohttp_call, session, url, body, headers, stream)
        ours = functools.partial(allmroute_call, client, stream)

        async def batch(fn: Callable[[], Awaitable[None]], count: int) -> None:
            async def worker(share: int) -> None:
                for _ in range(share):
                    await fn()
            await asyncio.gather(*[worker(count // concurrency + (i < count % concurrency)) for i in range(concurrency)])

        per_side: Dict[str, List[float]] = {"aiohttp (raw)": [], "llmroute AsyncClient (aiohttp)": []}
        sides = {"aiohttp (raw)": raw, "llmroute AsyncClient (aiohttp)": ours}
        for fn in sides.values():
            await batch(fn, max(20, 2 * concurrency))  # warm: a full pool of connections
        names = list(sides)
        for r in range(rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                start = time.process_time()
                await batch(sides[name], calls)
                per_side[name].append((time.process_time() - start) / calls * 1e6)
        await session.close()
        await client.aclose()
        ratios = [o / w for o, w in zip(per_side[names[1]], per_side[names[0]])]
        return {"raw_us": statistics.median(per_side[names[0]]), "llmroute_us": statistics.median(per_side[names[1]]),
                "ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios)}

    return asyncio.run(main())


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=12, help="rounds per scenario (default 12)")
    parser.add_argument("--calls", type=int, default=60, help="calls per side per round (default 60)")
    parser.add_argument("--json", default=str(ROOT / "benchmarks" / "out" / "client_overhead_ab.json"))
    args = parser.parse_args(argv)
    if not _GUARD:
        exec(GUARD_SRC, _GUARD)
    results: Dict[str, Any] = {}
    for stream, pieces in ((False, 16), (True, 64)):
        proc, url = start_server(pieces)
        try:
            kind = "stream (64 chunks)" if stream else "plain body"
            results[f"sync, {kind}"] = sync_scenario(url, stream, args.rounds, args.calls)
            for concurrency in ((32,) if stream else (1, 32)):
                results[f"async, {kind}, concurrency {concurrency}"] = async_scenario(
                    url, stream, concurrency, args.rounds, args.calls)
        finally:
            proc.stdin.close()
            proc.wait(10)
    print(f"Client CPU per call, {args.rounds} interleaved rounds of {args.calls} calls per side")
    print(f"{'scenario':<42}{'raw us':>9}{'llmroute us':>13}{'ratio (median)':>16}{'min-max':>14}")
    for name, got in results.items():
        if not isinstance(got, dict):
            continue
        print(f"{name:<42}{got['raw_us']:>9.0f}{got['llmroute_us']:>13.0f}{got['ratio_median']:>15.2f}x"
              f"{got['ratio_min']:>7.2f}-{got['ratio_max']:.2f}")
    print(f"network: refused non-loopback attempts: {len(_GUARD['_blocked'])}")
    results["refused_non_loopback"] = list(_GUARD["_blocked"])
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
