"""Run one loopback platform server in its own process (benchmark targets must not share the client's GIL).

    python -m tests.servers.run --platform together --port 0 [--tokens 64 --ttft-ms 50 --gap-ms 5]

Prints the bound base URL (e.g. http://127.0.0.1:41234/v1) as the first stdout line,
then serves until SIGINT/SIGTERM or, when stdin is a pipe, until it closes (so a
parent that dies takes it down). With --tokens/--ttft-ms/--gap-ms the default answer is that many pieces
with that timing. Listens on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import stat
import sys
import threading

from tests.servers.base import PlatformServer
from tests.servers.registry import SERVERS
from tests.servers.script import Reply


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tests.servers.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--platform", required=True, choices=sorted(SERVERS))
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--api-key", default=None, help="override the platform's test key")
    parser.add_argument("--tokens", type=int, default=None, help="pieces in the default answer")
    parser.add_argument("--ttft-ms", type=float, default=0.0, help="default time to first piece")
    parser.add_argument("--gap-ms", type=float, default=0.0, help="default gap between pieces")
    parser.add_argument("--no-stdin-watch", action="store_true", help="do not exit when stdin closes")
    return parser


async def _main(args: argparse.Namespace) -> None:
    kwargs: dict[str, object] = {"port": args.port, "record_limit": 1000}
    if args.api_key is not None:
        kwargs["api_key"] = args.api_key
    if args.tokens is not None or args.ttft_ms or args.gap_ms:
        pieces = None if args.tokens is None else [" tok"] * args.tokens
        kwargs["default_reply"] = Reply(pieces=pieces, ttft_s=args.ttft_ms / 1000, gap_s=args.gap_ms / 1000)
    server = SERVERS[args.platform](**kwargs)  # type: ignore[arg-type]
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, server.stop_soon)
    if not args.no_stdin_watch and _stdin_is_pipe():
        threading.Thread(target=_stop_on_stdin_eof, args=(loop, server), daemon=True).start()

    def announce() -> None:
        print(server.base_url, flush=True)

    await server.serve(on_ready=announce)


def _stdin_is_pipe() -> bool:
    try:
        return stat.S_ISFIFO(os.fstat(sys.stdin.fileno()).st_mode)
    except (OSError, ValueError):
        return False


def _stop_on_stdin_eof(loop: asyncio.AbstractEventLoop, server: PlatformServer) -> None:
    # A parent holding our stdin pipe open keeps us alive; when it exits the pipe closes.
    while sys.stdin.buffer.read(4096):
        pass
    loop.call_soon_threadsafe(server.stop_soon)


def main(argv: list[str] | None = None) -> None:
    asyncio.run(_main(build_parser().parse_args(argv)))


if __name__ == "__main__":
    main()
