"""Exit paths, bad input and hostile servers: what one client does in each case, one row per case.

    .venv/bin/python benchmarks/guarantees.py            # this tree
    PYTHONPATH=/path/to/old/tree .venv/bin/python benchmarks/guarantees.py   # a baseline tree

Every case talks to loopback servers only (tests/servers/), each bounded in bytes and seconds (the
hostile server gives up after 30 s). Runs in about a minute. Memory is the tracemalloc peak of the
call (Python allocations; the caps are 32 MiB by default).
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import sys
import threading
import time
import tracemalloc
import warnings
from typing import Any, Callable

sys.path.append(os.path.join(os.path.dirname(__file__), ".."))  # tests/servers; PYTHONPATH may name another llmroute

import llmroute as L  # noqa: E402
from tests.resilience.client_helpers import MESSAGES, TIER, tier_config  # noqa: E402
from tests.servers.fault import FaultServer, slow_headers, timed  # noqa: E402
from tests.servers.hostile import HostileServer  # noqa: E402


def _outcome(fn: Callable[[], Any]) -> str:
    try:
        out = fn()
    except BaseException as exc:  # noqa: BLE001 - the row says what escaped
        last = getattr(exc, "last_error", None) or exc
        detail = f" ({last.limit})" if hasattr(last, "limit") else ""
        return f"{type(last).__name__}{detail}"
    return f"ok {type(out).__name__}"


def hostile_rows(server: HostileServer) -> list[tuple[str, str, str]]:
    config = tier_config({"h": server.base_url})
    rows = []

    def case(name: str, mode: str, *, stream: bool = False, timeout: float = 60) -> None:
        server.mode = mode
        if mode == "gzip_bomb":
            server.bomb()
        gc.collect()
        tracemalloc.start()
        started = time.monotonic()

        def call() -> Any:
            with L.Client(config=config) as client:
                out = client.chat.completions.create(model=TIER, messages=MESSAGES, stream=stream, timeout=timeout)
                return out.get_final_completion() if stream else out

        result = _outcome(call)
        elapsed = time.monotonic() - started
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        rows.append((name, result, f"{elapsed:.1f} s, peak {peak / (1 << 20):.0f} MiB"))

    case("server trickles headers, timeout=3", "trickle_headers", timeout=3)
    case("server trickles the body, timeout=3", "trickle_body", timeout=3)
    server.huge_bytes = 256 << 20
    case("256 MiB body", "huge_body")
    case("gzip bomb (256 MiB of zeros)", "gzip_bomb")
    server.huge_bytes = 64 << 20
    case("64 MiB SSE line", "long_sse_line", stream=True)
    case("gzip-compressed SSE stream", "gzip_sse", stream=True)
    case("100,000 nested JSON lists", "nested_json")
    case("200 with choices: []", "empty_choices")
    with L.Client(config=config) as client:
        server.mode = f"usage:{10**30}"
        result = _outcome(lambda: client.chat.completions.create(model=TIER, messages=MESSAGES))
        records = client._engine.ledger.records
        detail = (f"ledger input_tokens {records[-1].input_tokens:.3g}, estimated={records[-1].usage_estimated}"
                  if records else "no ledger row")
        rows.append(("usage of 10^30 tokens", result, detail))
    case("301 redirect", "redirect:301")
    return rows


def _slot(client: Any) -> str:
    limits = client._engine.limits
    held = limits.in_flight("a:m") if limits is not None else 0
    return f"slot held: {held}; ledger: {[r.status for r in client._engine.ledger.records]}"


def exit_rows(server: FaultServer) -> list[tuple[str, str, str]]:
    config = tier_config({"a": server}, resilience={"max_concurrency": 1, "queue_timeout_s": 0})
    rows = []

    def follow_up(client: Any) -> str:
        return _outcome(lambda: client.chat.completions.create(model=TIER, messages=MESSAGES))

    with L.Client(config=config) as client:
        server.push(timed(0.0, [0.05] * 40))
        stream = client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True)
        for _ in stream:
            break
        del stream
        gc.collect()
        rows.append(("stream: break, drop (GC), next call", follow_up(client), _slot(client)))

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        with L.Client(config=config) as client:
            server.push(slow_headers(3.0))
            signal.setitimer(signal.ITIMER_REAL, 0.3)
            _outcome(lambda: client.chat.completions.create(model=TIER, messages=MESSAGES))
            rows.append(("KeyboardInterrupt waiting for headers, next call", follow_up(client), _slot(client)))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)

    async def cancelled() -> tuple[str, str]:
        async with L.AsyncClient(config=config) as client:
            server.push(slow_headers(3.0))
            try:
                await asyncio.wait_for(client.chat.completions.create(model=TIER, messages=MESSAGES), 0.3)
            except BaseException:  # noqa: BLE001
                pass
            try:
                await client.chat.completions.create(model=TIER, messages=MESSAGES)
                result = "ok ChatCompletion"
            except BaseException as exc:  # noqa: BLE001
                result = type(exc).__name__
            return result, _slot(client)

    result, detail = asyncio.run(cancelled())
    rows.append(("asyncio wait_for timeout, next call", result, detail))

    closed = L.Client(config=config)
    closed.close()
    rows.append(("call after close()", _outcome(lambda: closed.chat.completions.create(model=TIER, messages=MESSAGES)),
                 ""))
    aclient = L.AsyncClient(config=config)
    asyncio.run(aclient.chat.completions.create(model=TIER, messages=MESSAGES))
    rows.append(("AsyncClient from a second event loop", _outcome(
        lambda: asyncio.run(aclient.chat.completions.create(model=TIER, messages=MESSAGES))), ""))
    return rows


def dropped_clients_row(server: FaultServer, tmp: str) -> tuple[str, str, str]:
    config = tier_config({"a": server})
    gc.collect()
    threads, fds = threading.active_count(), len(os.listdir("/proc/self/fd"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(200):
            config["ledger"] = {"sink": "jsonl", "path": os.path.join(tmp, f"l{i}.jsonl")}
            client = L.Client(config=config)
            client.chat.completions.create(model=TIER, messages=MESSAGES)
            del client
        gc.collect()
    time.sleep(0.5)
    return ("200 clients dropped without close()", "",
            f"+{threading.active_count() - threads} threads, +{len(os.listdir('/proc/self/fd')) - fds} fds")


def bad_input_row() -> tuple[str, str, str]:
    from tests.guarantees.test_bad_input import BAD

    server = FaultServer().start()
    try:
        config = tier_config({"a": server})
        typed = untyped = sent = 0
        with L.Client(config=config) as client:
            for kwargs, _ in BAD:
                before = len(server.chat_requests())
                try:
                    client.chat.completions.create(**{"model": TIER, "messages": MESSAGES, **kwargs})
                except L.InvalidRequestError:
                    typed += 1
                except BaseException:  # noqa: BLE001
                    untyped += 1
                if len(server.chat_requests()) > before:
                    sent += 1
        return (f"{len(BAD)} bad create() arguments", f"{typed} InvalidRequestError, {untyped} other",
                f"{sent} sent to the server")
    finally:
        server.stop()


def main() -> None:
    import tempfile

    rows = [bad_input_row()]
    fault = FaultServer().start()
    try:
        rows += exit_rows(fault)
        with tempfile.TemporaryDirectory() as tmp:
            rows.append(dropped_clients_row(fault, tmp))
    finally:
        fault.stop()
    with HostileServer() as hostile:
        rows += hostile_rows(hostile)
    print("| case | outcome | detail |")
    print("|---|---|---|")
    for name, result, detail in rows:
        print(f"| {name} | {result} | {detail} |")


if __name__ == "__main__":
    main()
