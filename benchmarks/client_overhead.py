"""What llmroute costs on top of the wire: cold import time and memory, and client CPU per request.

Everything is measured in one run, side by side, as ratios against raw httpx (and raw aiohttp, and
the OpenAI SDK when it is installed), so the shared machine's noise cancels out of the ratios:

* cold `import` wall time and peak RSS in a fresh interpreter (median of N runs);
* client-process CPU time per request and per stream (20 chunks) against a fast loopback server
  running in *another* process, sync and async (concurrency 16), for: raw httpx, raw aiohttp,
  the OpenAI SDK, LiteLLM (`litellm.completion`/`acompletion`, model "openai/..."), Portkey's SDK
  (pointed straight at the loopback server, so its gateway is not in the path), llmroute's Client,
  AsyncClient on httpx's transport and on aiohttp's. The CPU window ends once the process has gone
  quiet, so work a client leaves to background threads or tasks (LiteLLM's logging worker) counts;
* after a burst (`--only burst`): CPU per call at concurrency 1 before and after 256 calls in flight
  at once, on one client (AsyncClient on aiohttp and raw aiohttp, each with a 256-connection pool);
  the ratio after/before says whether a burst leaves the client slower (pools, queues, caches);
* memory over many calls (`--only rss`): the process's RSS after 1,000, 5,000 and 10,000 calls
  (`--rss-calls`) through one AsyncClient and one Client, with a SQLite ledger in a temporary folder
  (the in-memory sink keeps every record by design, so it is not used here).

    python benchmarks/client_overhead.py [--requests 2000] [--json benchmarks/out/client_overhead.json]

The peers are optional and never dependencies of llmroute; a row whose package is absent is skipped
with a note. To measure them: `pip install openai litellm portkey-ai`.

Bounded: a fixed number of requests per row. Only 127.0.0.1 is contacted: LiteLLM is made to read its
bundled model cost map (`LITELLM_LOCAL_MODEL_COST_MAP=True`, set here before any import of it), and an
audit hook in this process and in every cold-import interpreter refuses any socket connect or name
look-up that is not loopback; the run prints how many it refused (it should be 0).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MODEL = "gpt-4o-mini"
KEY = "sk-test-openai"
MESSAGES = [{"role": "user", "content": "Say hello"}]
CONCURRENCY = 16  # async rows: calls in flight (and every client's connection limit); --concurrency
TRANSPORTS = ("httpx", "aiohttp")  # AsyncClient rows; --transports

# LiteLLM fetches its model cost map from the internet at import unless told to use the bundled copy.
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

# Loopback guard, as source so a cold-import interpreter can run it before its timer starts (importing
# this module there would preload stdlib modules the measured import needs). Refused attempts are
# counted in _blocked; loopback connects in _connects.
GUARD_SRC = """
import sys
_blocked, _connects = [], [0]
def _loopback(h):
    h = h.decode() if isinstance(h, bytes) else h
    return h is None or h in ("localhost", "::1") or str(h).startswith("127.")
def _guard(event, args):
    if event == "socket.connect" or event == "socket.sendto":
        addr = args[1]
        if not isinstance(addr, tuple):
            return
        if _loopback(addr[0]):
            _connects[0] += 1
            return
        host = addr[0]
    elif event == "socket.getaddrinfo" or event == "socket.gethostbyname":
        if _loopback(args[0]):
            return
        host = args[0]
    else:
        return
    _blocked.append(str(host))
    raise ConnectionRefusedError("client_overhead: only 127.0.0.1 may be contacted, refused " + str(host))
sys.addaudithook(_guard)
"""
_GUARD: Dict[str, Any] = {}


def note_skip(row: str, package: str) -> None:
    print(f"  (skipped {row}: `{package}` is not installed)")


# Peak RSS of the interpreter since it started (VmHWM). Not ru_maxrss: on Linux a child's ru_maxrss
# counts the memory of the parent it was forked from, so it never reads below this benchmark's own RSS.
PEAK_RSS_KB = "int(next(l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1])"

_PYCACHE = tempfile.mkdtemp(prefix="client_overhead_pycache_")


def _bytecode_env() -> Dict[str, str]:
    """Bytecode written and read (in a cache of this run's own), whatever PYTHONDONTWRITEBYTECODE says:
    a package installed with pip is compiled, so compiling the source is no part of its import."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = _PYCACHE
    return env


def cold_import(module: str, runs: int) -> Dict[str, float]:
    code = GUARD_SRC + (
        "import time, resource; t = time.perf_counter(); import {m}; "
        "print(time.perf_counter() - t, " + PEAK_RSS_KB + ", len(_blocked))"
    ).format(m=module)
    walls, rss, blocked = [], [], 0
    for run in range(runs + 1):  # the first run writes the bytecode cache, as a user's install has it
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=_bytecode_env())
        if out.returncode != 0:
            if "ModuleNotFoundError" in out.stderr:
                note_skip(f"import {module}", module)
            else:
                print(f"  (skipped import {module}: it failed: {out.stderr.strip().splitlines()[-1:]})")
            return {}
        wall, kb, refused = out.stdout.split()[-3:]
        if run == 0:
            continue
        walls.append(float(wall))
        rss.append(int(kb) / 1024)
        blocked += int(refused)
    base = subprocess.run([sys.executable, "-c", "print(" + PEAK_RSS_KB + ")"],
                          capture_output=True, text=True, env=_bytecode_env())
    return {"wall_ms": statistics.median(walls) * 1000, "best_wall_ms": min(walls) * 1000, "rss_mib": statistics.median(rss),
            "rss_added_mib": statistics.median(rss) - int(base.stdout) / 1024, "refused_non_loopback": blocked}


def start_server(pieces: int) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.servers.run", "--platform", "openai", "--port", "0", "--tokens", str(pieces)],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    url = proc.stdout.readline().strip()
    if not url.startswith("http"):
        raise SystemExit("loopback server did not start")
    return proc, url


QUIET_STEP_S = 0.05   # the process is quiet when a step this long idle costs under QUIET_CPU_S of CPU
QUIET_CPU_S = 0.001
QUIET_MAX_S = 5.0


def write_json(path: str, result: Any) -> None:
    """The run's figures as JSON at `path` (its folder made if missing)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))


def settle() -> float:
    """Wait (bounded) until background threads have finished the calls' leftover work; CPU clock then."""
    deadline = time.monotonic() + QUIET_MAX_S
    before = time.process_time()
    while time.monotonic() < deadline:
        time.sleep(QUIET_STEP_S)
        now = time.process_time()
        if now - before < QUIET_CPU_S:
            return now
        before = now
    return time.process_time()


async def asettle() -> float:
    """As settle(), yielding to the event loop so pending tasks (callbacks, loggers) run too."""
    deadline = time.monotonic() + QUIET_MAX_S
    before = time.process_time()
    while time.monotonic() < deadline:
        await asyncio.sleep(QUIET_STEP_S)
        now = time.process_time()
        if now - before < QUIET_CPU_S:
            return now
        before = now
    return time.process_time()


# New loopback connections each measured row opened, in the order the rows ran (the guard counts them).
ROW_CONNECTS: List[int] = []


def cpu_per_call(fn: Callable[[], Any], n: int) -> float:
    fn()  # warm: connections, caches, lazy imports
    start, conns = settle(), _GUARD["_connects"][0]
    for _ in range(n):
        fn()
    used = settle() - start
    ROW_CONNECTS.append(_GUARD["_connects"][0] - conns)
    return used / n * 1e6  # microseconds of client CPU per call


def run_async_cpu(make: Callable[[], Any], n: int) -> float:
    async def main() -> float:
        call, close = await make()
        await call()
        sem = asyncio.Semaphore(CONCURRENCY)
        await asyncio.gather(*[call() for _ in range(CONCURRENCY)])  # warm: a full pool of connections

        async def one() -> None:
            async with sem:
                await call()

        start, conns = await asettle(), _GUARD["_connects"][0]
        await asyncio.gather(*[one() for _ in range(n)])
        used = await asettle() - start
        ROW_CONNECTS.append(_GUARD["_connects"][0] - conns)
        await close()
        return used / n * 1e6

    return asyncio.run(main())


def chat_request(stream: bool) -> tuple[Dict[str, Any], Dict[str, str]]:
    """The raw rows' request body and headers (the same call the llmroute rows make)."""
    body: Dict[str, Any] = {"model": MODEL, "messages": MESSAGES, "max_tokens": 64}
    if stream:
        body.update(stream=True, stream_options={"include_usage": True})
    return body, {"Authorization": f"Bearer {KEY}"}


def raw_httpx_call(h: Any, url: str, body: Dict[str, Any], headers: Dict[str, str], stream: bool) -> None:
    """One raw httpx call: the JSON body, or every SSE event's JSON."""
    if stream:
        with h.stream("POST", url + "/chat/completions", json=body, headers=headers) as r:
            for line in r.iter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    json.loads(line[6:])
    else:
        h.post(url + "/chat/completions", json=body, headers=headers).json()


async def raw_aiohttp_call(session: Any, url: str, body: Dict[str, Any], headers: Dict[str, str], stream: bool) -> None:
    """One raw aiohttp call: the JSON body, or every SSE event's JSON."""
    async with session.post(url + "/chat/completions", json=body, headers=headers) as r:
        if stream:
            async for raw_line in r.content:
                line = raw_line.decode().strip()
                if line.startswith("data: ") and line != "data: [DONE]":
                    json.loads(line[6:])
        else:
            await r.json()


def llmroute_call(c: Any, stream: bool) -> None:
    """One call through a llmroute `Client`, read to the end."""
    if stream:
        with c.chat.completions.create(model="small", messages=MESSAGES, max_tokens=64, stream=True) as s:
            for _ in s:
                pass
    else:
        c.chat.completions.create(model="small", messages=MESSAGES, max_tokens=64)


async def allmroute_call(c: Any, stream: bool) -> None:
    """One call through a llmroute `AsyncClient`, read to the end."""
    if stream:
        s = await c.chat.completions.create(model="small", messages=MESSAGES, max_tokens=64, stream=True)
        async with s:
            async for _ in s:
                pass
    else:
        await c.chat.completions.create(model="small", messages=MESSAGES, max_tokens=64)


def sync_rows(url: str, n: int, stream: bool) -> Dict[str, float]:
    import httpx

    import llmroute

    rows: Dict[str, float] = {}
    body, headers = chat_request(stream)
    with httpx.Client() as h:
        rows["httpx (raw)"] = cpu_per_call(functools.partial(raw_httpx_call, h, url, body, headers, stream), n)
    try:
        import openai

        oc = openai.OpenAI(base_url=url, api_key=KEY, max_retries=0)

        rows["openai SDK"] = cpu_per_call(sdk_call(oc.chat.completions.create, MODEL, stream), n)
        oc.close()
    except ImportError:
        note_skip("openai SDK", "openai")
    try:
        litellm = _litellm()
        via_litellm = sdk_call(litellm.completion, f"openai/{MODEL}", stream, api_base=url, api_key=KEY)
        rows["litellm.completion"] = cpu_per_call(via_litellm, n)
    except ImportError:
        note_skip("litellm.completion", "litellm")
    try:
        from portkey_ai import Portkey

        pk = Portkey(**_portkey_options(url))
        rows["portkey SDK"] = cpu_per_call(sdk_call(pk.chat.completions.create, MODEL, stream), n)
        pk.openai_client.close()
        pk.close()
    except ImportError:
        note_skip("portkey SDK", "portkey-ai")
    config = {"providers": {"bench": {"kind": "openai-compatible", "base_url": url, "api_key": KEY}},
              "tiers": {"small": {"deployments": [f"bench:{MODEL}"]}}}
    config.update(_extra_config())
    for label, cfg in _llmroute_variants(config, stream):
        with llmroute.Client(config=cfg) as c:
            rows[f"llmroute Client{label}"] = cpu_per_call(functools.partial(llmroute_call, c, stream), n)
    return rows


def _llmroute_variants(config: Dict[str, Any], stream: bool) -> List[tuple]:
    """The llmroute config as shipped; for plain calls also with `plain_via_stream = false`: by default a
    plain call is sent as a stream (so the first-token and stall limits apply) and read chunk by chunk,
    while the raw rows read one JSON body. The second row shows what the call path costs on the same wire."""
    variants = [("", config)]
    if not stream:
        tiers = {"small": {"deployments": [{"id": f"bench:{MODEL}", "plain_via_stream": False}]}}
        variants.append((", plain body", {**config, "tiers": tiers}))
    return variants


def _sdk_kwargs(model: str, stream: bool, extra: Dict[str, Any]) -> Dict[str, Any]:
    kwargs = {"model": model, "messages": MESSAGES, "max_tokens": 64, **extra}
    if stream:
        kwargs.update(stream=True, stream_options={"include_usage": True})
    return kwargs


def sdk_call(create: Callable[..., Any], model: str, stream: bool, **extra: Any) -> Callable[[], None]:
    """One OpenAI-shaped call (OpenAI SDK, Portkey, litellm.completion), a stream read to its end."""
    kwargs = _sdk_kwargs(model, stream, extra)

    def call() -> None:
        if stream:
            for _ in create(**kwargs):
                pass
        else:
            create(**kwargs)
    return call


def async_sdk_call(create: Callable[..., Any], model: str, stream: bool, **extra: Any) -> Callable[[], Any]:
    """As sdk_call, for the async clients and litellm.acompletion."""
    kwargs = _sdk_kwargs(model, stream, extra)

    async def call() -> None:
        if stream:
            async for _ in await create(**kwargs):
                pass
        else:
            await create(**kwargs)
    return call


def _litellm() -> Any:
    """LiteLLM as a user gets it, minus anything that could leave the machine (no callbacks are set)."""
    import litellm

    litellm.suppress_debug_info = True
    litellm.success_callback, litellm.failure_callback, litellm.callbacks = [], [], []
    return litellm


def _portkey_options(url: str) -> Dict[str, Any]:
    """Portkey's SDK aimed at the loopback server itself (no Portkey key, so no gateway): the provider
    key goes in Authorization, as it would through a self-hosted gateway."""
    return {"base_url": url, "api_key": None, "provider": "openai", "Authorization": f"Bearer {KEY}"}


def _extra_config() -> Dict[str, Any]:
    """Sections a full deployment would have: pricing for the bench model, an in-memory ledger."""
    return {
        "pricing": {f"bench:{MODEL}": {"input_per_million": 0.15, "output_per_million": 0.6, "currency": "USD"}},
        "ledger": {"sink": "memory"},
    }


def async_rows(url: str, n: int, stream: bool) -> Dict[str, float]:
    import httpx

    import llmroute

    rows: Dict[str, float] = {}
    body, headers = chat_request(stream)

    async def make_httpx():
        h = httpx.AsyncClient(limits=httpx.Limits(max_connections=CONCURRENCY))

        async def call() -> None:
            if stream:
                async with h.stream("POST", url + "/chat/completions", json=body, headers=headers) as r:
                    async for line in r.aiter_lines():
                        if line.startswith("data: ") and line != "data: [DONE]":
                            json.loads(line[6:])
            else:
                (await h.post(url + "/chat/completions", json=body, headers=headers)).json()
        return call, h.aclose
    rows["httpx async (raw)"] = run_async_cpu(make_httpx, n)

    try:
        import aiohttp

        async def make_aiohttp():
            session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CONCURRENCY))

            return functools.partial(raw_aiohttp_call, session, url, body, headers, stream), session.close
        rows["aiohttp (raw)"] = run_async_cpu(make_aiohttp, n)
    except ImportError:
        note_skip("aiohttp (raw)", "aiohttp")

    try:
        import openai

        async def make_openai():
            oc = openai.AsyncOpenAI(base_url=url, api_key=KEY, max_retries=0)
            return async_sdk_call(oc.chat.completions.create, MODEL, stream), oc.close
        rows["openai SDK async"] = run_async_cpu(make_openai, n)
    except ImportError:
        note_skip("openai SDK async", "openai")

    try:
        litellm = _litellm()

        async def make_litellm():
            async def close() -> None:
                pass  # LiteLLM keeps its cached clients for the process
            return async_sdk_call(litellm.acompletion, f"openai/{MODEL}", stream, api_base=url, api_key=KEY), close
        rows["litellm.acompletion"] = run_async_cpu(make_litellm, n)
    except ImportError:
        note_skip("litellm.acompletion", "litellm")

    try:
        from portkey_ai import AsyncPortkey

        async def make_portkey():
            pk = AsyncPortkey(**_portkey_options(url))

            async def close() -> None:
                await pk.openai_client.close()
                await pk.close()
            return async_sdk_call(pk.chat.completions.create, MODEL, stream), close
        rows["portkey SDK async"] = run_async_cpu(make_portkey, n)
    except ImportError:
        note_skip("portkey SDK async", "portkey-ai")

    config = _full_config(url, CONCURRENCY)
    for (label, cfg), transport in [(v, t) for t in TRANSPORTS for v in _llmroute_variants(config, stream)]:
        async def make_llmroute(transport=transport, cfg=cfg):
            c = llmroute.AsyncClient(config=cfg, transport=transport)
            return functools.partial(allmroute_call, c, stream), c.aclose
        rows[f"llmroute AsyncClient ({transport}{label})"] = run_async_cpu(make_llmroute, n)
    return rows


def _full_config(url: str, max_connections: int, ledger: Dict[str, Any] | None = None) -> Dict[str, Any]:
    """The llmroute config of the async rows: one tier, pricing, a ledger, generous limits (CPU is
    measured here, not latency: no limit may fire on a busy machine)."""
    config: Dict[str, Any] = {
        "providers": {"bench": {"kind": "openai-compatible", "base_url": url, "api_key": KEY,
                                "max_connections": max_connections,
                                "connect_timeout_s": 60, "ttft_timeout_s": 100, "timeout_s": 110}},
        "tiers": {"small": {"deployments": [f"bench:{MODEL}"]}}}
    config.update(_extra_config())
    if ledger is not None:
        config["ledger"] = ledger
    return config


BURST = 256  # calls in flight at once in the burst


def burst_rows(url: str, n: int) -> Dict[str, Dict[str, float]]:
    """CPU per call at concurrency 1, before and after one burst of BURST concurrent calls, on one
    client and one connection pool of BURST connections (the pool keeps them afterwards)."""
    import aiohttp

    import llmroute

    body, headers = chat_request(False)

    async def measure(make: Callable[[], Any]) -> Dict[str, float]:
        call, close = await make()
        for _ in range(20):  # warm
            await call()

        async def sequential() -> float:
            start = await asettle()
            for _ in range(n):
                await call()
            return (await asettle() - start) / n * 1e6

        before = await sequential()
        await asyncio.gather(*[call() for _ in range(BURST)])
        after = await sequential()
        await close()
        return {"before_us": before, "after_us": after, "ratio": after / before}

    async def make_aiohttp() -> Any:
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=BURST))

        async def call() -> None:
            async with session.post(url + "/chat/completions", json=body, headers=headers) as r:
                await r.json()
        return call, session.close

    async def make_llmroute() -> Any:
        c = llmroute.AsyncClient(config=_full_config(url, BURST), transport="aiohttp")

        async def call() -> None:
            await c.chat.completions.create(model="small", messages=MESSAGES, max_tokens=64)
        return call, c.aclose

    return {"aiohttp (raw)": asyncio.run(measure(make_aiohttp)),
            "llmroute AsyncClient (aiohttp)": asyncio.run(measure(make_llmroute))}


RSS_CONCURRENCY = 16  # the async memory row's calls in flight
RSS_WARM = 200  # calls before the first reading ("start")


def _rss_mib() -> float:
    """The process's resident memory now (VmRSS), after a full garbage collection."""
    import gc

    gc.collect()
    with open("/proc/self/status") as f:
        return int(next(line for line in f if line.startswith("VmRSS")).split()[1]) / 1024


def rss_rows(url: str, calls: int) -> Dict[str, Dict[str, float]]:
    """RSS after 1,000, 5,000 and `calls` calls through one AsyncClient (RSS_CONCURRENCY in flight)
    and one Client, each with a SQLite ledger in a temporary folder; "start" is read after RSS_WARM
    calls."""
    import llmroute

    marks = sorted({m for m in (1000, 5000, calls) if m <= calls})
    rows: Dict[str, Dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="client_overhead_ledger_") as folder:
        async def run_async() -> Dict[str, float]:
            cfg = _full_config(url, RSS_CONCURRENCY, {"sink": "sqlite", "path": str(Path(folder) / "async.db")})
            out: Dict[str, float] = {}
            async with llmroute.AsyncClient(config=cfg, transport="aiohttp") as c:
                async def calls(count: int) -> None:
                    """`count` calls by RSS_CONCURRENCY workers (not `count` tasks at once: their frames
                    would raise the RSS this measures)."""
                    async def worker(share: int) -> None:
                        for _ in range(share):
                            await c.chat.completions.create(model="small", messages=MESSAGES, max_tokens=64)
                    shares = [count // RSS_CONCURRENCY + (i < count % RSS_CONCURRENCY) for i in range(RSS_CONCURRENCY)]
                    await asyncio.gather(*[worker(share) for share in shares])
                await calls(RSS_WARM)  # lazy imports, pools, caches
                await asettle()
                done = 0
                out["start"] = _rss_mib()
                for mark in marks:
                    await calls(mark - done)
                    done = mark
                    await asettle()
                    out[str(mark)] = _rss_mib()
            return out
        rows["llmroute AsyncClient (aiohttp)"] = asyncio.run(run_async())

        cfg = _full_config(url, 4, {"sink": "sqlite", "path": str(Path(folder) / "sync.db")})
        out: Dict[str, float] = {}
        with llmroute.Client(config=cfg) as c:
            for _ in range(RSS_WARM):
                c.chat.completions.create(model="small", messages=MESSAGES, max_tokens=64)
            settle()
            done = 0
            out["start"] = _rss_mib()
            for mark in marks:
                for _ in range(mark - done):
                    c.chat.completions.create(model="small", messages=MESSAGES, max_tokens=64)
                done = mark
                settle()
                out[str(mark)] = _rss_mib()
        rows["llmroute Client"] = out
    return rows


def _print_rows(rows: Dict[str, float], base: float, connects: Dict[str, int], against: str) -> None:
    print(f"{'client':<46}{'CPU us/call':>12}{against:>16}{'new conns':>11}")
    for name, us in rows.items():
        print(f"{name:<46}{us:>12.0f}{us / base:>15.2f}x{connects.get(name, 0):>11}")


def main(argv: List[str] | None = None) -> int:
    global CONCURRENCY, TRANSPORTS
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000, help="calls per row (default 2000)")
    parser.add_argument("--import-runs", type=int, default=7)
    parser.add_argument("--json", default=str(ROOT / "benchmarks" / "out" / "client_overhead.json"))
    parser.add_argument("--only", choices=["import", "cpu", "burst", "rss"], default=None)
    parser.add_argument("--burst-calls", type=int, default=300,
                        help="calls at concurrency 1 before and after the burst (default 300)")
    parser.add_argument("--rss-calls", type=int, default=10000, help="calls of the memory rows (default 10000)")
    parser.add_argument("--concurrency", default=str(CONCURRENCY),
                        help="async rows: calls in flight, a comma list runs each (default 16)")
    parser.add_argument("--chunks", type=int, default=20, help="content chunks per stream (default 20)")
    parser.add_argument("--no-sync", action="store_true", help="async rows only")
    parser.add_argument("--transports", default=",".join(TRANSPORTS), help="AsyncClient rows (default httpx,aiohttp)")
    args = parser.parse_args(argv)
    TRANSPORTS = tuple(args.transports.split(","))
    if not _GUARD:
        exec(GUARD_SRC, _GUARD)
    result: Dict[str, Any] = {"requests": args.requests, "concurrency": args.concurrency, "chunks": args.chunks, "python": sys.version.split()[0],
                              "loadavg_1_5_15": list(os.getloadavg())}
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")

    if args.only in (None, "import"):
        imports = {}
        for module in ("httpx", "aiohttp", "openai", "litellm", "portkey_ai", "llmroute"):
            got = cold_import(module, args.import_runs)
            if got:
                imports[module] = got
        result["import"] = imports
        print(f"\nCold import (median and best of {args.import_runs} fresh interpreters, bytecode cached)")
        print(f"{'module':<12}{'wall ms':>10}{'best ms':>10}{'peak RSS MiB':>14}{'added MiB':>11}{'vs httpx':>10}")
        for module, got in imports.items():
            ratio = got["wall_ms"] / imports["httpx"]["wall_ms"]
            print(f"{module:<12}{got['wall_ms']:>10.1f}{got['best_wall_ms']:>10.1f}{got['rss_mib']:>14.1f}"
                  f"{got['rss_added_mib']:>11.1f}{ratio:>9.2f}x")

    if args.only in (None, "cpu"):
        cpu: Dict[str, Any] = {}
        connects: Dict[str, Dict[str, int]] = {}
        for stream, pieces in ((False, 16), (True, args.chunks)):
            proc, url = start_server(pieces)
            try:
                label = f"stream ({pieces} chunks)" if stream else "non-streamed"
                ROW_CONNECTS.clear()
                sync = {} if args.no_sync else sync_rows(url, args.requests, stream)
                connects[label] = dict(zip(sync, ROW_CONNECTS))
                cpu[label] = dict(sync)
                if sync:
                    print(f"\nClient CPU per call, {label}, {args.requests} calls per row (sync)")
                    _print_rows(sync, sync["httpx (raw)"], connects[label], "vs raw httpx")
                for concurrency in [int(c) for c in args.concurrency.split(",")]:
                    CONCURRENCY = concurrency
                    ROW_CONNECTS.clear()
                    asynch = async_rows(url, args.requests, stream)
                    key = f"{label}, concurrency {concurrency}"
                    cpu[key] = asynch
                    connects[key] = dict(zip(asynch, ROW_CONNECTS))
                    print(f"\nClient CPU per call, {label}, {args.requests} calls per row, async concurrency {concurrency}")
                    base = asynch.get("aiohttp (raw)", asynch["httpx async (raw)"])
                    _print_rows(asynch, base, connects[key], "vs raw aiohttp" if "aiohttp (raw)" in asynch else "vs raw httpx")
            finally:
                proc.stdin.close()
                proc.wait(10)
        result["cpu_us_per_call"] = cpu
        result["new_connections_per_row"] = connects

    if args.only in (None, "burst", "rss"):
        proc, url = start_server(16)
        try:
            if args.only in (None, "burst"):
                burst = burst_rows(url, args.burst_calls)
                result["burst"] = burst
                print(f"\nCPU per call at concurrency 1 before and after {BURST} calls in flight at once "
                      f"({args.burst_calls} calls each side, non-streamed)")
                print(f"{'client':<46}{'before us':>11}{'after us':>10}{'after/before':>14}")
                for name, got in burst.items():
                    print(f"{name:<46}{got['before_us']:>11.0f}{got['after_us']:>10.0f}{got['ratio']:>13.2f}x")
            if args.only in (None, "rss"):
                rss = rss_rows(url, args.rss_calls)
                result["rss_mib"] = rss
                print(f"\nRSS (MiB) after N calls, one client, SQLite ledger (async: {RSS_CONCURRENCY} in flight)")
                marks = [k for k in next(iter(rss.values())) if k != "start"]
                print(f"{'client':<34}{'start':>8}" + "".join(f"{m:>9}" for m in marks) + f"{'last-first':>12}")
                for name, got in rss.items():
                    print(f"{name:<34}{got['start']:>8.1f}" + "".join(f"{got[m]:>9.1f}" for m in marks)
                          + f"{got[marks[-1]] - got[marks[0]]:>+12.1f}")
        finally:
            proc.stdin.close()
            proc.wait(10)

    refused = _GUARD["_blocked"] + [m for m, got in result.get("import", {}).items() if got["refused_non_loopback"]]
    result["network"] = {"loopback_connects": _GUARD["_connects"][0], "refused_non_loopback": refused}
    print(f"\nnetwork: {_GUARD['_connects'][0]} connects, all to 127.0.0.1; refused non-loopback attempts: "
          f"{len(refused)}{' ' + repr(refused) if refused else ''}")

    write_json(args.json, result)
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
