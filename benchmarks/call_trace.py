"""How many hops one call takes through llmroute: Python calls, files and module changes, traced with
`sys.setprofile` on one warm call (the client and its connection already made).

For a plain call (read as a stream, the default), a plain call with `plain_via_stream = false`, and a
streamed call, on the sync `Client` and on `AsyncClient`, it counts:

* `calls`: Python function calls made in llmroute's own files during the call;
* `files`: distinct llmroute files those calls ran in;
* `module changes`: consecutive traced calls (llmroute's files, the HTTP libraries and the standard
  library alike) whose file differs from the previous call's file;
* `before send`: the module changes before the request's bytes are first written to the socket
  (the first `socket.send`/`sendall`/`transport.write` C call seen);
* `functions`: distinct Python functions (code objects) the call ran, in llmroute's files and in all
  files (the HTTP libraries, asyncio and the standard library included): the code a call touches, which
  the CPU caches must hold.

Two rows of raw aiohttp (a plain call reading the JSON body, and one reading the same answer as a stream,
parsing each event's JSON), as `client_overhead_ab.py`'s raw side makes them, give the all-files
`functions` and `module changes` a scale.

    python benchmarks/call_trace.py [--json benchmarks/out/call_trace.json]

It talks only to a loopback server it starts (`tests.servers.run --platform openai`) and makes one traced
call per row (after one untraced warm-up), so it is bounded and deterministic up to dict ordering.
The counts do not depend on the machine's load; the time a call costs is measured by client_overhead.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MODEL = "gpt-4o-mini"
MESSAGES = [{"role": "user", "content": "Say hello"}]
PACKAGE = str(ROOT / "llmroute")
SENDS = {"send", "sendall", "write", "writelines"}


class Tracer:
    def __init__(self) -> None:
        self.calls = 0
        self.files: set[str] = set()
        self.changes = 0
        self.before_send = -1
        self._last = ""
        self.code: set[Any] = set()  # every code object run

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event == "c_call":
            if self.before_send < 0 and getattr(arg, "__name__", "") in SENDS and \
                    type(getattr(arg, "__self__", None)).__name__ in ("socket", "_SelectorSocketTransport", "SSLSocket"):
                self.before_send = self.changes
            return
        if event != "call":
            return
        filename = frame.f_code.co_filename
        if filename != self._last:
            self.changes += 1
            self._last = filename
        self.code.add(frame.f_code)
        if filename.startswith(PACKAGE):
            self.calls += 1
            self.files.add(filename)

    def row(self) -> Dict[str, int]:
        return {"calls": self.calls, "files": len(self.files), "module changes": self.changes,
                "before send": self.before_send,
                "functions": sum(code.co_filename.startswith(PACKAGE) for code in self.code),
                "functions, all files": len(self.code)}


def start_server() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "tests.servers.run", "--platform", "openai", "--port", "0",
                             "--tokens", "8"], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    if not url.startswith("http"):
        raise SystemExit("loopback server did not start")
    return proc, url


def configs(url: str) -> Dict[str, Dict[str, Any]]:
    base = {"providers": {"bench": {"kind": "openai-compatible", "base_url": url, "api_key": "sk-test-openai"}},
            "tiers": {"small": {"deployments": [f"bench:{MODEL}"]}},
            "pricing": {f"bench:{MODEL}": {"input_per_million": 0.15, "output_per_million": 0.6, "currency": "USD"}},
            "ledger": {"sink": "memory"}}
    plain_body = json.loads(json.dumps(base))
    plain_body["resilience"] = {"plain_via_stream": False}
    return {"plain": base, "plain, plain_via_stream = false": plain_body, "stream": base}


def trace_sync(cfg: Dict[str, Any], stream: bool) -> Dict[str, int]:
    import llmroute

    def call(client: Any) -> None:
        if stream:
            with client.chat.completions.create(model="small", messages=MESSAGES, stream=True) as s:
                for _ in s:
                    pass
        else:
            client.chat.completions.create(model="small", messages=MESSAGES)

    with llmroute.Client(config=cfg) as client:
        call(client)
        tracer = Tracer()
        sys.setprofile(tracer)
        try:
            call(client)
        finally:
            sys.setprofile(None)
    return tracer.row()


def trace_async(cfg: Dict[str, Any], stream: bool) -> Dict[str, int]:
    import llmroute

    async def call(client: Any) -> None:
        if stream:
            s = await client.chat.completions.create(model="small", messages=MESSAGES, stream=True)
            async with s:
                async for _ in s:
                    pass
        else:
            await client.chat.completions.create(model="small", messages=MESSAGES)

    async def main() -> Dict[str, int]:
        async with llmroute.AsyncClient(config=cfg) as client:
            await call(client)
            tracer = Tracer()
            sys.setprofile(tracer)
            try:
                await call(client)
            finally:
                sys.setprofile(None)
            return tracer.row()

    return asyncio.run(main())


def trace_raw_aiohttp(url: str, stream: bool) -> Dict[str, int]:
    import aiohttp

    from benchmarks.client_overhead import chat_request, raw_aiohttp_call  # client_overhead_ab.py's raw side

    body, headers = chat_request(stream)

    async def call(session: Any) -> None:
        await raw_aiohttp_call(session, url, body, headers, stream)

    async def main() -> Dict[str, int]:
        async with aiohttp.ClientSession() as session:
            await call(session)
            tracer = Tracer()
            sys.setprofile(tracer)
            try:
                await call(session)
            finally:
                sys.setprofile(None)
            return tracer.row()

    return asyncio.run(main())


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="write the table here as JSON")
    args = parser.parse_args(argv)
    proc, url = start_server()
    rows: Dict[str, Dict[str, int]] = {}
    try:
        for name, cfg in configs(url).items():
            stream = name == "stream"
            runners: Dict[str, Callable[[Dict[str, Any], bool], Dict[str, int]]] = {
                "Client": trace_sync, "AsyncClient": trace_async}
            for client_name, run in runners.items():
                rows[f"{client_name}, {name}"] = run(cfg, stream)
        rows["raw aiohttp, plain"] = trace_raw_aiohttp(url, stream=False)
        rows["raw aiohttp, reading the stream"] = trace_raw_aiohttp(url, stream=True)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()  # the server stops when its stdin closes
        proc.wait(10)
    width = max(map(len, rows))
    print(f"{'call'.ljust(width)}  calls  files  module changes  before send  functions  functions, all files")
    for name, row in rows.items():
        print(f"{name.ljust(width)}  {row['calls']:5}  {row['files']:5}  {row['module changes']:14}  {row['before send']:11}"
              f"  {row['functions']:9}  {row['functions, all files']:20}")
    if args.json:
        os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(rows, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
