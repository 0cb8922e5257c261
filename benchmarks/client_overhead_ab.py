"""Client CPU per call as a ratio to the raw library, measured in interleaved rounds: every CPU target of
issue 21 ("the call core at the transport's cost") in one run, plus the import cost.

`client_overhead.py` runs each row once, one after the other: on a machine shared with other work,
load that comes and goes between the raw row and the llmroute row moves their ratio by ±30 %. Here
each scenario alternates the raw client and llmroute in short rounds (`--rounds` of `--calls` calls
each, in one process, against the same loopback server) and reports the median of the per-round
ratios (client-process CPU time), with their range, so a burst of load lands on both sides of most rounds.

Scenarios (the raw side always reads what llmroute reads off the wire):
* sync `Client` vs raw httpx: a default plain call (sent and read as a stream, `plain_via_stream` default)
  against raw httpx reading the same stream; a plain call with `plain_via_stream = false` against a raw
  plain call; a 64-chunk stream;
* `AsyncClient` on aiohttp vs raw aiohttp: a default plain call against raw aiohttp reading the same
  stream, and `plain_via_stream = false` against a raw plain call (concurrency 1 and 32); a 64-chunk
  stream at concurrency 1, 32 and 256;
* with `--only paced` (not a target of issue 21, and not in the default run): a 64-chunk stream from a server
  that sends one chunk every `--gap-ms` (what a real server does: one token a read), `AsyncClient` against raw
  aiohttp at concurrency 1 and 32, `--paced-calls` calls per side per round;
* cold import (fresh interpreters, bytecode cached, median of `--import-runs`): `import llmroute`, and
  `from llmroute import Client` + `Client(config)` with the benchmark's config, wall time and RSS added
  over a bare interpreter.

The llmroute side runs the full call path (routing target, failover plan, breaker, pricing, an in-memory
ledger record, telemetry hooks with no SDK), as in `client_overhead.py`. `--ledger none` or `--ledger sqlite`
(the default sink, in a temporary folder, written by its own thread in this process) swaps the ledger.

    python benchmarks/client_overhead_ab.py [--rounds 8] [--calls 60] [--only sync,async,import]
    python benchmarks/client_overhead_ab.py --only paced [--gap-ms 1] [--paced-calls 15]
    python benchmarks/client_overhead_ab.py --only async --ledger sqlite

Bounded: rounds x calls per side per scenario (at concurrency 256, rounds x 256). Only 127.0.0.1 is
contacted: the audit hook of `client_overhead.py` refuses any other connect or name look-up, and the
run prints how many it refused.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Awaitable, Callable, Dict, List

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.client_overhead import (GUARD_SRC, MODEL, PEAK_RSS_KB, _bytecode_env,  # noqa: E402
                                        _full_config, _GUARD, allmroute_call, chat_request, llmroute_call,
                                        raw_aiohttp_call, raw_httpx_call, start_server, write_json)

STREAM_CHUNKS = 64
PLAIN_PIECES = 16  # content pieces of a plain answer (sent as that many chunks when read as a stream)


LEDGER: Dict[str, Any] = {"sink": "memory"}  # `--ledger`


def _config(url: str, max_connections: int, plain_body: bool) -> Dict[str, Any]:
    config = _full_config(url, max_connections, ledger=LEDGER)
    if plain_body:
        config["tiers"] = {"small": {"deployments": [{"id": f"bench:{MODEL}", "plain_via_stream": False}]}}
    return config


def _summary(raw: List[float], ours: List[float]) -> Dict[str, Any]:
    ratios = [o / w for o, w in zip(ours, raw)]
    return {"raw_us": statistics.median(raw), "llmroute_us": statistics.median(ours),
            "ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
            "ratios": [round(r, 3) for r in ratios]}


def sync_scenario(url: str, kind: str, rounds: int, calls: int) -> Dict[str, Any]:
    """kind: "plain" (default config: read as a stream; raw reads the same stream), "plain body"
    (`plain_via_stream = false`; raw reads one JSON body) or "stream"."""
    import httpx

    import llmroute

    raw_stream = kind != "plain body"
    body, headers = chat_request(raw_stream)
    with httpx.Client() as h, llmroute.Client(config=_config(url, 4, plain_body=kind == "plain body")) as c:
        sides = {"raw": functools.partial(raw_httpx_call, h, url, body, headers, raw_stream),
                 "llmroute": functools.partial(llmroute_call, c, kind == "stream")}
        for _ in range(20):  # warm: connections, lazy imports
            for fn in sides.values():
                fn()
        per_side: Dict[str, List[float]] = {name: [] for name in sides}
        names = list(sides)
        for r in range(rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                fn = sides[name]
                start = time.process_time()
                for _ in range(calls):
                    fn()
                per_side[name].append((time.process_time() - start) / calls * 1e6)
    return _summary(per_side["raw"], per_side["llmroute"])


def start_paced_server(pieces: int, gap_ms: float) -> tuple[Any, str]:
    """The loopback OpenAI server sending each of `pieces` chunks `gap_ms` after the last."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.servers.run", "--platform", "openai", "--port", "0", "--tokens", str(pieces),
         "--gap-ms", str(gap_ms)], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    if not url.startswith("http"):
        raise SystemExit("loopback server did not start")
    return proc, url


def async_scenario(url: str, kind: str, concurrency: int, rounds: int, calls: int) -> Dict[str, Any]:
    """As sync_scenario, on AsyncClient (aiohttp) against raw aiohttp, `concurrency` calls in flight."""
    import aiohttp

    import llmroute

    raw_stream = kind != "plain body"
    body, headers = chat_request(raw_stream)
    calls = max(calls, concurrency)

    async def main() -> Dict[str, Any]:
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency))
        client = llmroute.AsyncClient(config=_config(url, concurrency, plain_body=kind == "plain body"),
                                      transport="aiohttp")
        sides = {"raw": functools.partial(raw_aiohttp_call, session, url, body, headers, raw_stream),
                 "llmroute": functools.partial(allmroute_call, client, kind in ("stream", "paced"))}

        async def batch(fn: Callable[[], Awaitable[None]], count: int) -> None:
            async def worker(share: int) -> None:
                for _ in range(share):
                    await fn()
            await asyncio.gather(*[worker(count // concurrency + (i < count % concurrency)) for i in range(concurrency)])

        per_side: Dict[str, List[float]] = {name: [] for name in sides}
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
        return _summary(per_side["raw"], per_side["llmroute"])

    return asyncio.run(main())


IMPORTS = {
    "import llmroute": "import llmroute",
    "from llmroute import Client; Client(config)":
        "from llmroute import Client; Client(config={config!r}).close()",
}


def cold_imports(runs: int) -> Dict[str, Dict[str, float]]:
    """Wall time and peak RSS added over a bare interpreter, fresh interpreters with bytecode cached (the
    first run of each writes the cache and is not counted). The config names a loopback URL; nothing is sent."""
    config = _full_config("http://127.0.0.1:9/v1", 4)
    bare = [int(subprocess.run([sys.executable, "-c", GUARD_SRC + "print(" + PEAK_RSS_KB + ")"], capture_output=True,
                               text=True, cwd=ROOT, env=_bytecode_env()).stdout) for _ in range(runs + 1)]
    base_kb = statistics.median(bare[1:])  # the first run fills the bytecode cache (a cold compile peaks higher)
    out: Dict[str, Dict[str, float]] = {}
    for label, statement in IMPORTS.items():
        code = GUARD_SRC + ("import time; t = time.perf_counter(); " + statement.format(config=config) +
                            "; print(time.perf_counter() - t, " + PEAK_RSS_KB + ", len(_blocked))")
        walls, kbs = [], []
        for run in range(runs + 1):
            got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                                 env=_bytecode_env(), timeout=120)
            if got.returncode != 0:
                raise SystemExit(f"{label} failed: {got.stderr.strip()[-400:]}")
            wall, kb, refused = got.stdout.split()[-3:]
            if int(refused):
                _GUARD["_blocked"].append(f"{label}: {refused} refused")
            if run:
                walls.append(float(wall) * 1000)
                kbs.append(int(kb))
        out[label] = {"wall_ms": statistics.median(walls), "wall_ms_min": min(walls), "wall_ms_max": max(walls),
                      "rss_added_mib": (statistics.median(kbs) - base_kb) / 1024}
    return out


TARGETS = {"sync, plain (read as a stream)": 1.2, "sync, plain body": 1.2, "sync, stream (64 chunks)": 1.2,
           "async, plain (read as a stream)": 1.3, "async, plain body": 1.5, "async, stream (64 chunks)": 1.2}


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8, help="rounds per scenario (default 8)")
    parser.add_argument("--calls", type=int, default=60, help="calls per side per round (default 60; at least the concurrency)")
    parser.add_argument("--import-runs", type=int, default=7, help="fresh interpreters per import row (default 7)")
    parser.add_argument("--only", default="sync,async,import", help="comma list of sync, async, import, paced")
    parser.add_argument("--gap-ms", type=float, default=1.0, help="paced: ms between a stream's chunks (default 1)")
    parser.add_argument("--paced-calls", type=int, default=15, help="paced: calls per side per round (default 15)")
    parser.add_argument("--ledger", choices=("memory", "none", "sqlite"), default="memory",
                        help="the llmroute side's ledger sink (default memory)")
    parser.add_argument("--json", default=str(ROOT / "benchmarks" / "out" / "client_overhead_ab.json"))
    args = parser.parse_args(argv)
    only = set(args.only.split(","))
    scratch = tempfile.TemporaryDirectory(prefix="llmroute-ab-")  # the sqlite ledger's folder, removed at the end
    LEDGER.update(sink=args.ledger)
    if args.ledger == "sqlite":
        LEDGER["path"] = str(Path(scratch.name) / "ledger.db")
    if not _GUARD:
        exec(GUARD_SRC, _GUARD)
    results: Dict[str, Any] = {"rounds": args.rounds, "calls": args.calls, "ledger": args.ledger,
                               "loadavg_start": list(os.getloadavg())}
    plan: List[tuple[str, str, int]] = []  # (kind, side, concurrency)
    for kind in ("plain", "plain body"):
        if "sync" in only:
            plan.append((kind, "sync", 1))
        if "async" in only:
            plan += [(kind, "async", c) for c in (1, 32)]
    if "sync" in only:
        plan.append(("stream", "sync", 1))
    if "async" in only:
        plan += [("stream", "async", c) for c in (1, 32, 256)]
    if "paced" in only:
        plan += [("paced", "async", c) for c in (1, 32)]
    servers: Dict[tuple[int, float], tuple[Any, str]] = {}
    try:
        for kind, side, concurrency in plan:
            pieces = STREAM_CHUNKS if kind in ("stream", "paced") else PLAIN_PIECES
            gap = args.gap_ms if kind == "paced" else 0.0
            if (pieces, gap) not in servers:
                servers[pieces, gap] = start_paced_server(pieces, gap) if gap else start_server(pieces)
            url = servers[pieces, gap][1]
            label = {"plain": "plain (read as a stream)", "plain body": "plain body",
                     "stream": f"stream ({STREAM_CHUNKS} chunks)",
                     "paced": f"paced ({STREAM_CHUNKS} chunks, {gap:g} ms apart)"}[kind]
            if side == "sync":
                results[f"sync, {label}"] = sync_scenario(url, kind, args.rounds, args.calls)
            else:
                results[f"async, {label}, concurrency {concurrency}"] = async_scenario(
                    url, kind, concurrency, args.rounds, args.paced_calls if kind == "paced" else args.calls)
    finally:
        for proc, _ in servers.values():
            proc.stdin.close()
            proc.wait(10)
        scratch.cleanup()
    results["loadavg_end"] = list(os.getloadavg())
    print(f"Client CPU per call, {args.rounds} interleaved rounds of {args.calls} calls per side "
          f"(load average {results['loadavg_start'][0]:.1f} at start, {results['loadavg_end'][0]:.1f} at end)")
    print(f"{'scenario':<52}{'raw us':>8}{'llmroute us':>13}{'ratio':>8}{'min-max':>12}{'target':>8}")
    for name, got in results.items():
        if not isinstance(got, dict):
            continue
        target = next((t for k, t in TARGETS.items() if name.startswith(k)), None)
        print(f"{name:<52}{got['raw_us']:>8.0f}{got['llmroute_us']:>13.0f}{got['ratio_median']:>7.2f}x"
              f"{got['ratio_min']:>6.2f}-{got['ratio_max']:<5.2f}" + (f"{target:>7.1f}x" if target else f"{'-':>8}"))
    if "import" in only:
        results["import"] = cold_imports(args.import_runs)
        print(f"\nCold import, {args.import_runs} fresh interpreters (bytecode cached): median (min-max) ms, RSS added MiB")
        for label, got in results["import"].items():
            print(f"{label:<52}{got['wall_ms']:>7.0f} ({got['wall_ms_min']:.0f}-{got['wall_ms_max']:.0f}) ms"
                  f"{got['rss_added_mib']:>8.1f} MiB")
    print(f"network: refused non-loopback attempts: {len(_GUARD['_blocked'])}")
    results["refused_non_loopback"] = list(_GUARD["_blocked"])
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
