"""A small, fast HTTP/1.1 server on raw asyncio streams, and the base class of every loopback platform server.

Why hand-written: the servers double as benchmark targets, so they must be light
(several thousand small requests per second on one core) and dependency-free
(stdlib only). It speaks just enough HTTP/1.1 for clients under test: keep-alive,
Content-Length and chunked request bodies, Content-Length and chunked responses,
streamed bodies flushed piece by piece (TCP_NODELAY, drain after every write) and
connection resets (RST via SO_LINGER 0) on demand.

`PlatformServer` adds the lifecycle (a background thread with its own event loop,
port 0 on 127.0.0.1, context manager, stops itself at exit), the `Script` of
replies and the request record. Platform modules subclass it and add routes.

It must never listen on anything but 127.0.0.1, nor touch the network otherwise.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import socket
import struct
import sys
import threading
import time
import traceback
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from tests.servers.script import RecordedRequest, Reply, Script

HOST = "127.0.0.1"
PROBE_HEADER = "x-llmroute-probe"  # llmroute/providers/server_identity.py: PROBE_HEADER, lower-cased

_REASONS = {
    200: "OK", 400: "Bad Request", 401: "Unauthorized", 402: "Payment Required",
    403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout",
    412: "Precondition Failed", 413: "Payload Too Large", 422: "Unprocessable Entity",
    424: "Failed Dependency", 429: "Too Many Requests", 431: "Request Header Fields Too Large",
    500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable",
    504: "Gateway Timeout",
}


class Reset:
    """Yielded by a streamed body to abort the connection with a TCP RST."""


RESET = Reset()


class Flush:
    """Yielded by a streamed body before it waits: send everything buffered so far now."""


FLUSH = Flush()

StreamBody = AsyncIterator["bytes | Reset | Flush"]


@dataclass
class Response:
    """What a handler returns. `stream` (if set) is sent with chunked transfer encoding."""

    status: int = 200
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    stream: StreamBody | None = None
    delay_s: float = 0.0
    reset: bool = False
    close: bool = False  # close the connection cleanly (FIN) without a response, as a keep-alive drop

    @classmethod
    def json(cls, payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
        hdrs = [("Content-Type", "application/json")]
        hdrs += list((headers or {}).items())
        return cls(status, hdrs, json.dumps(payload, ensure_ascii=False).encode())

    @classmethod
    def text(cls, text: str, status: int = 200, headers: dict[str, str] | None = None) -> Response:
        hdrs = [("Content-Type", "text/plain; charset=utf-8")] + list((headers or {}).items())
        return cls(status, hdrs, text.encode())


Handler = Callable[[RecordedRequest], Awaitable[Response]]


def _abort_with_rst(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            # Linger 0 turns close() into an RST: the client sees a reset, not a clean EOF.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.transport.abort()


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts = []
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            # Skip trailers up to the blank line.
            while (await reader.readuntil(b"\r\n")) != b"\r\n":
                pass
            return b"".join(parts)
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)


class HTTPServer:
    """HTTP/1.1 over asyncio streams. Runs inside whatever loop calls `start()`."""

    def __init__(self, handler: Handler, host: str = HOST, port: int = 0) -> None:
        if host != HOST:
            raise ValueError("loopback servers bind 127.0.0.1 only")
        self._handler = handler
        self._host = host
        self._port = port
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.port = 0
        self.connections_total = 0  # accepted TCP connections (tests check keep-alive reuse)

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._serve_connection, self._host, self._port, limit=1 << 20, backlog=1024
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        self.connections_total += 1
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        aborted = False
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                except asyncio.LimitOverrunError:
                    writer.write(b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    return
                lines = head[:-4].decode("latin-1").split("\r\n")
                try:
                    method, target, version = lines[0].split(" ", 2)
                except ValueError:
                    writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    return
                headers: dict[str, str] = {}
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
                try:
                    if "chunked" in headers.get("transfer-encoding", "").lower():
                        body = await _read_chunked(reader)
                    else:
                        length = int(headers.get("content-length", "0") or 0)
                        body = await reader.readexactly(length) if length else b""
                except (asyncio.IncompleteReadError, ConnectionError, ValueError):
                    return
                path, _, query = target.partition("?")
                request = RecordedRequest(method, path, query, headers, body)
                conn_header = headers.get("connection", "").lower()
                keep_alive = conn_header != "close" if version == "HTTP/1.1" else conn_header == "keep-alive"
                try:
                    response = await self._handler(request)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    traceback.print_exc(file=sys.stderr)
                    response = Response.text(traceback.format_exc(), 500)
                if response.delay_s > 0:
                    await asyncio.sleep(response.delay_s)
                if response.reset:
                    aborted = True
                    _abort_with_rst(writer)
                    return
                if response.close:
                    return
                if not await self._write_response(writer, response, keep_alive, method == "HEAD"):
                    aborted = True
                    return
                if not keep_alive:
                    return
        except (ConnectionError, asyncio.CancelledError):
            aborted = True
        finally:
            self._connections.discard(task)
            if not aborted:
                try:
                    await writer.drain()
                except ConnectionError:
                    pass
            writer.close()

    async def _write_response(
        self, writer: asyncio.StreamWriter, response: Response, keep_alive: bool, head_only: bool
    ) -> bool:
        """Write one response. Returns False if the connection was reset on purpose or by the peer."""
        status_line = f"HTTP/1.1 {response.status} {_REASONS.get(response.status, 'Status')}\r\n"
        out = [status_line]
        for name, value in response.headers:
            out.append(f"{name}: {value}\r\n")
        if not keep_alive:
            out.append("Connection: close\r\n")
        if response.stream is None:
            out.append(f"Content-Length: {len(response.body)}\r\n\r\n")
            writer.write("".join(out).encode("latin-1") + (b"" if head_only else response.body))
            await writer.drain()
            return True
        out.append("Transfer-Encoding: chunked\r\n\r\n")
        # Frames produced back to back are coalesced into one send; a FLUSH (yielded before
        # every wait) pushes them out, so scripted timings are exact and idle streams cheap.
        pending = ["".join(out).encode("latin-1")]
        try:
            async for piece in response.stream:
                if isinstance(piece, Flush):
                    if pending:
                        writer.write(b"".join(pending))
                        pending.clear()
                        await writer.drain()
                elif isinstance(piece, Reset):
                    if pending:
                        writer.write(b"".join(pending))
                        await writer.drain()
                        # Give the client time to read what was sent: an RST can make the
                        # peer drop data it has not read yet, and "N chunks then reset" means N arrive.
                        await asyncio.sleep(0.01)
                    _abort_with_rst(writer)
                    return False
                elif piece:
                    pending.append(b"%x\r\n%s\r\n" % (len(piece), piece))
        finally:
            await response.stream.aclose()  # type: ignore[attr-defined]
        pending.append(b"0\r\n\r\n")
        writer.write(b"".join(pending))
        await writer.drain()
        return True


async def wait_until(loop: asyncio.AbstractEventLoop, deadline: float) -> AsyncIterator[Flush]:
    """In a streamed body: `async for f in wait_until(loop, t): yield f`. Flushes, then sleeps
    to an absolute loop time, so scripted gaps do not accumulate write latency."""
    delay = deadline - loop.time()
    if delay > 0:
        yield FLUSH
        await asyncio.sleep(delay)


_live_servers: weakref.WeakSet[PlatformServer] = weakref.WeakSet()


@atexit.register
def _stop_live_servers() -> None:
    for server in list(_live_servers):
        server.stop()


class PlatformServer:
    """Base of every loopback platform server: lifecycle, script, request record, route table.

    Subclasses fill `routes()` with {(method, path): handler}. Use as
    `with TogetherServer() as srv: ... srv.base_url ...`, or `start()`/`stop()`.
    """

    platform = "base"
    base_path = "/v1"

    def __init__(self, port: int = 0, record_limit: int = 100_000) -> None:
        self.script = Script(record_limit)
        self._port_wanted = port
        self._routes = self.routes()
        self._http: HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None
        self.port = 0

    # -- routes -------------------------------------------------------------------------------------
    def routes(self) -> dict[tuple[str, str], Handler]:
        return {}

    async def handle(self, request: RecordedRequest) -> Response:
        if PROBE_HEADER in request.headers:
            # llmroute's server identification (docs/failover.md): kept apart from what a test sent,
            # so a test's `requests`, `last_request` and scripted replies are its own calls'.
            self.probes.append(request)
        else:
            self.script.record(request)
        handler = self._routes.get((request.method, request.path))
        if handler is None and request.method == "HEAD":
            handler = self._routes.get(("GET", request.path))
        if handler is None:
            return self.no_route(request)
        return await handler(request)

    def no_route(self, request: RecordedRequest) -> Response:
        return Response.json({"detail": "Not Found"}, 404)

    # -- scripting ----------------------------------------------------------------------------------
    def push(self, *replies: Reply, path: str | None = None, model: str | None = None) -> None:
        """Queue replies for the next requests (see `Script` for the lookup order)."""
        self.script.push(*replies, path=path, model=model)

    @property
    def default_reply(self) -> Reply | None:
        return self.script.default

    @default_reply.setter
    def default_reply(self, reply: Reply | None) -> None:
        self.script.default = reply

    @property
    def probes(self) -> list[RecordedRequest]:
        """The identification GETs llmroute sent this server (never scripted, never in `requests`)."""
        if not hasattr(self, "_probes"):
            self._probes: list[RecordedRequest] = []
        return self._probes

    @property
    def requests(self) -> list[RecordedRequest]:
        return list(self.script.requests)

    @property
    def last_request(self) -> RecordedRequest:
        return self.script.requests[-1]

    def chat_requests(self) -> list[RecordedRequest]:
        """Recorded requests to this platform's chat endpoint(s)."""
        return [r for r in self.script.requests if r.path in self.chat_paths()]

    def chat_paths(self) -> set[str]:
        return {self.base_path + "/chat/completions"}

    def reset(self) -> None:
        """Forget scripted replies, the default override and recorded requests (between tests)."""
        self.script.reset()
        self.probes.clear()

    # -- lifecycle ----------------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}{self.base_path}"

    @property
    def root_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def connections_total(self) -> int:
        return self._http.connections_total if self._http is not None else 0

    def url(self, path: str) -> str:
        return self.root_url + path

    def start(self) -> PlatformServer:
        if self._thread is not None:
            return self
        self._thread = threading.Thread(target=self._run_thread, name=f"{self.platform}-server", daemon=True)
        self._thread.start()
        self._ready.wait(10)
        if self._startup_error is not None:
            raise RuntimeError(f"{self.platform} server failed to start") from self._startup_error
        if not self._ready.is_set():
            raise RuntimeError(f"{self.platform} server did not start within 10 s")
        _live_servers.add(self)
        return self

    def stop(self) -> None:
        loop, stop_event, thread = self._loop, self._stop_event, self._thread
        if thread is None:
            return
        if loop is not None and stop_event is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(stop_event.set)
            except RuntimeError:
                pass  # loop already closed
        thread.join(10)
        self._thread = None
        _live_servers.discard(self)

    def stop_soon(self) -> None:
        """Ask `serve()` to return; call from inside the server's own loop (signal handlers)."""
        if self._stop_event is not None:
            self._stop_event.set()

    def __enter__(self) -> PlatformServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run_thread(self) -> None:
        try:
            asyncio.run(self.serve())
        except BaseException as exc:  # reported to start(); a thread must not die silently
            self._startup_error = exc
            self._ready.set()

    async def serve(self, on_ready: Callable[[], None] | None = None) -> None:
        """Run in the current event loop until `stop()` (used by the thread and by `run.py`)."""
        self._loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        self._http = HTTPServer(self.handle, HOST, self._port_wanted)
        await self._http.start()
        self.port = self._http.port
        self._ready.set()
        if on_ready is not None:
            on_ready()
        try:
            await self._stop_event.wait()
        finally:
            await self._http.close()


def now_unix() -> int:
    return int(time.time())
