"""The only module that does network I/O: connection pools, sync and async, one per provider.
Only `exchange.py` sends through it: the one send path every operation uses (timeouts, read caps,
typed errors: docs/transport.md).

It sends an adapter's `HttpRequest` and hands back the status, headers and body bytes (whole, or as
they arrive). It knows nothing of platforms; it maps the HTTP libraries' exceptions to llmroute's
connect / time-to-first-token / total timeouts and connection errors, naming the deployment. The sync
side runs on httpcore's connection pool, set up as `httpx.Client` sets it up (its limits, TLS context,
default headers and cookie jar) and raising httpx's exceptions, without httpx's per-request models
(about 0.6x the CPU of `httpx.Client.send` per request). The async side runs on aiohttp by default
(`transport="aiohttp"`, or "auto"): it costs several times less CPU per request than httpx's async
pool and holds up at high concurrency
(benchmarks/RESULTS.md); `transport="httpx"` chooses httpx's. httpx and aiohttp are imported on
the first request, so `import llmroute` does not pay for them.

Both sides ask for `Accept-Encoding: identity` unless the request names an encoding: streams are
read as raw bytes, which a compressed body would garble. The libraries' behaviour relied on here, with
sources: docs/transport.md.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, AsyncIterator, Dict, Iterable, Iterator, List, Mapping, Tuple
from urllib.parse import urlsplit

from llmroute import errors as E
from llmroute._http.bounded import BodyReader, ReadLimits
from llmroute._http.request import HttpRequest
from llmroute._http.timeouts import Timeouts
from llmroute._runtime.secrets import MASK, wire_headers

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    import aiohttp
    import httpcore
    import httpx

__all__ = ["DROPPED_BEFORE_REPLY", "BROKEN_AFTER_SEND", "Timeouts", "httpx_timeout", "SyncTransport", "SyncResponse", "SyncHeaders",
           "AsyncTransport", "AiohttpResponse", "ConnectTimer",
           "AsyncConnectTimer", "AsyncResponse", "map_transport_error", "iter_body", "read_body", "aiter_body",
           "aread_body"]


def _async_timeout(seconds: float) -> AbstractAsyncContextManager[object]:
    """`asyncio.timeout` (Python 3.11+); on 3.10, async_timeout's (aiohttp's own dependency there), which
    raises asyncio.TimeoutError rather than the builtin TimeoutError."""
    if sys.version_info >= (3, 11):
        import asyncio

        return asyncio.timeout(seconds)
    import async_timeout

    return async_timeout.timeout(seconds)  # type: ignore[no-any-return]  # untyped on 3.10 (no stubs)


def httpx_timeout(timeouts: Timeouts) -> "httpx.Timeout":
    import httpx  # imported on first use: `import llmroute` does not pay for it

    return httpx.Timeout(connect=timeouts.connect_s, read=timeouts.read_s, write=timeouts.read_s,
                         pool=timeouts.connect_s)


# `ProviderError.code` of an APIConnectionError raised when the server closed a pooled keep-alive
# connection before answering: the request may not have been read; the plan resends it at once, as a
# visible attempt within max_retries, and the breaker does not count it.
DROPPED_BEFORE_REPLY = "connection_dropped_before_reply"
# `ProviderError.code` of an APIConnectionError raised when the connection broke while the reply was
# awaited or read: the whole request had been written, so the platform read the prompt and may bill
# it (the attempt is recorded with its prompt estimated, `call.may_have_been_billed`).
BROKEN_AFTER_SEND = "connection_broken_after_send"


def _peer(url: str | None, provider: str) -> str:
    """' to host:port (provider p)' for a connection error's message; '' without a URL."""
    if not url:
        return ""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return ""
    return f" to {parts.hostname}:{port} (provider {provider})"


def map_transport_error(exc: Exception, *, provider: str, deployment: str, timeouts: Timeouts,
                        url: str | None = None) -> E.ProviderError:
    """httpx and aiohttp exceptions -> typed errors that say which limit fired; connection failures
    name the host and port (`url`: the request's) and the provider."""
    kw: Dict[str, Any] = dict(provider=provider, deployment=deployment)
    peer = _peer(url, provider)
    if _stale_connection(exc):
        return E.APIConnectionError(f"connection closed by the server before a reply: {_reason(exc)}",
                                 code=DROPPED_BEFORE_REPLY, **kw)
    if type(exc).__module__.split(".")[0] == "aiohttp":
        name = type(exc).__name__
        if name == "ConnectionTimeoutError":
            return E.APITimeoutError(f"connect timeout: no connection{peer} within {timeouts.connect_s:g}s",
                                  timeout="connect", seconds=timeouts.connect_s, **kw)
        if "Timeout" in name:
            return _read_timeout(timeouts, kw)
        if name == "ClientPayloadError" or (name == "ClientOSError" and getattr(exc, "errno", None) == errno.ECONNRESET):
            return E.APIConnectionError(f"connection broken: {_reason(exc)}", code=BROKEN_AFTER_SEND, **kw)
        return E.APIConnectionError(f"connection{peer} failed: {_reason(exc)}", **kw)
    httpx = sys.modules.get("httpx")  # an httpx exception means httpx is imported
    if httpx is not None and isinstance(exc, httpx.HTTPError):
        return _map_httpx_error(httpx, exc, kw, timeouts, peer)
    if isinstance(exc, E.BuiltinTimeoutError) or type(exc).__name__ == "TimeoutError":  # asyncio.TimeoutError (aiohttp side)
        return _read_timeout(timeouts, kw)
    if isinstance(exc, OSError):
        return E.APIConnectionError(f"connection{peer} failed: {exc.strerror or exc}", **kw)
    raise exc


def _map_httpx_error(httpx: Any, exc: Exception, kw: Dict[str, Any], timeouts: Timeouts,
                     peer: str = "") -> E.ProviderError:
    if isinstance(exc, (httpx.ConnectTimeout, httpx.PoolTimeout)):
        return E.APITimeoutError(
            f"connect timeout: no connection{peer} within {timeouts.connect_s:g}s", timeout="connect",
            seconds=timeouts.connect_s, **kw,
        )
    if isinstance(exc, (httpx.ReadTimeout, httpx.WriteTimeout)):
        return _read_timeout(timeouts, kw)
    if isinstance(exc, httpx.TimeoutException):
        return E.APITimeoutError(f"timeout: {type(exc).__name__}", timeout="total", seconds=timeouts.total_s, **kw)
    if isinstance(exc, httpx.ConnectError):
        return E.APIConnectionError(f"connection{peer} failed: {_reason(exc)}", **kw)
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError)):  # the request was written whole
        return E.APIConnectionError(f"connection broken: {_reason(exc)}", code=BROKEN_AFTER_SEND, **kw)
    if isinstance(exc, (httpx.WriteError, httpx.NetworkError)):
        return E.APIConnectionError(f"connection broken: {_reason(exc)}", **kw)
    return E.APIConnectionError(f"HTTP error: {_reason(exc)}", **kw)


def _read_timeout(timeouts: Timeouts, kw: Dict[str, Any]) -> E.APITimeoutError:
    """A read timeout, named for the limit it means (`Timeouts.read_kind`)."""
    if timeouts.read_kind == "ttft":
        return E.APITimeoutError(f"time-to-first-token timeout: nothing within {timeouts.ttft_s:g}s", timeout="ttft",
                                 seconds=timeouts.ttft_s, **kw)
    if timeouts.read_kind == "read":
        return E.APITimeoutError(f"read timeout: no bytes for {timeouts.read_s:g}s", timeout="read",
                                 seconds=timeouts.read_s, **kw)
    return E.APITimeoutError(f"total timeout: the attempt took longer than its {timeouts.total_s:.3g}s limit", timeout="total",
                             seconds=timeouts.total_s, **kw)


def _reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    cause = exc.__cause__ or exc.__context__
    if cause is not None and str(cause) and str(cause) not in text:
        text = f"{text} ({cause})"
    return text[:300]


def _body(request: HttpRequest) -> Dict[str, Any]:
    return {"content": request.content} if request.content is not None else {"json": request.json}


class _UntilDeadline(Dict[str, Any]):
    """httpcore's per-request timeouts, each socket wait cut to what is left before `deadline`: httpcore
    reads this dict before every read and write, so a server trickling one byte a second (headers or
    body) cannot hold the request past the attempt's total timeout."""

    def __init__(self, timeouts: Dict[str, Any], deadline: float) -> None:
        super().__init__(timeouts)
        self.deadline = deadline

    def get(self, key: str, default: Any = None) -> Any:
        value = super().get(key, default)
        left = max(0.001, self.deadline - time.monotonic())
        return left if value is None else min(value, left)


def headers_within(timeouts: Timeouts) -> float:
    """How long the response's headers may take: a streamed read's first-token limit (a deadline, so
    a server trickling its headers a byte at a time is cut there and the call moves on, as from a
    silent one), else the attempt's total."""
    return timeouts.read_s if timeouts.read_kind == "ttft" else timeouts.total_s


_NO_CUT = contextlib.nullcontext()  # reusable: it holds no state


def _headers_cut(timeouts: Timeouts) -> AbstractAsyncContextManager[object]:
    """On aiohttp, whose own total timer already ends at the deadline: a timer at `headers_within`
    only when that is sooner (a streamed read's first-token limit), else nothing."""
    return _async_timeout(timeouts.read_s) if timeouts.read_kind == "ttft" else _NO_CUT


# The deadline of the request this thread is sending (monotonic), for `_DeadlineStream`.
_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("llmroute_deadline", default=None)


class _DeadlineStream:
    """httpcore's sync network stream, each read and write cut to what is left before `_DEADLINE`.
    httpcore reads its timeouts once per phase, so without this a server trickling its headers one
    byte at a time would hold the request for as long as it likes."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    @staticmethod
    def _cut(timeout: float | None) -> float | None:
        deadline = _DEADLINE.get()
        if deadline is None:
            return timeout
        left = max(0.001, deadline - time.monotonic())
        return left if timeout is None else min(timeout, left)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, self._cut(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, self._cut(timeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, *args: Any, **kwargs: Any) -> "_DeadlineStream":
        started = time.perf_counter()
        stream = _DeadlineStream(self._inner.start_tls(*args, **kwargs))
        timer = _CONNECT_TIMER.get()
        if timer is not None and timer.connect_s is not None:  # TLS on the connection just opened
            timer.connect_s += time.perf_counter() - started
        return stream

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend:
    """httpcore's sync network backend, handing out `_DeadlineStream`s. It also times each connection
    it opens (TCP, then TLS in `_DeadlineStream.start_tls`) into the request's `ConnectTimer`, reached
    through `_CONNECT_TIMER`: httpcore calls it only for a new connection, in the request's thread.
    Not httpcore's `trace` extension: with one, httpcore formats and sends ten trace events per request."""

    def __init__(self, inner: httpcore.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(self, *args: Any, **kwargs: Any) -> _DeadlineStream:
        started = time.perf_counter()
        stream = _DeadlineStream(self._inner.connect_tcp(*args, **kwargs))
        timer = _CONNECT_TIMER.get()
        if timer is not None:
            timer.connect_s = time.perf_counter() - started
        return stream

    def connect_unix_socket(self, *args: Any, **kwargs: Any) -> _DeadlineStream:
        return _DeadlineStream(self._inner.connect_unix_socket(*args, **kwargs))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _build(client: httpx.AsyncClient, request: HttpRequest, timeouts: Timeouts, timer: ConnectTimer | None) -> httpx.Request:
    """The httpx request, bounded: per-read timeouts cut to the deadline, only encodings we decode.
    A request that cannot be built (a header or body value httpx refuses) is an InvalidRequestError,
    raised before anything is sent."""
    try:
        req = client.build_request(
            request.method, request.url, headers=_headers(request), **_body(request), timeout=httpx_timeout(timeouts),
            extensions={"trace": timer} if timer is not None else None,
        )
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError and httpx's LocalProtocolError included
        raise E.InvalidRequestError(f"cannot be built: {type(exc).__name__}: {str(exc)[:200]}", field="request") \
            from None
    req.extensions["timeout"] = _UntilDeadline(req.extensions.get("timeout") or {}, time.monotonic() + timeouts.total_s)
    return req


def _past(deadline: float) -> httpx.ReadTimeout:
    import httpx

    return httpx.ReadTimeout(f"the attempt's total timeout passed while reading ({time.monotonic() - deadline:.1f}s over)")


def iter_body(response: Any, limits: ReadLimits, deadline: float, *, provider: str,
              deployment: str) -> Iterator[bytes]:
    """The body's bytes as they arrive, decoded, within the read caps and the deadline (monotonic)."""
    reader = BodyReader(limits, response.headers.get("content-encoding"), provider=provider, deployment=deployment)
    source: Iterable[bytes]
    errors: Tuple[type[Exception], ...] = ()
    if type(response) is SyncResponse:  # `SyncResponse.iter_raw`, inline: one generator per read instead of two
        source, errors = response._response.stream, _httpcore_errors()
    else:
        source = response.iter_raw()
    try:
        for data in source:
            if time.monotonic() > deadline:
                raise _past(deadline)
            out = reader.feed(data)
            if out:
                yield out
    except errors as exc:
        raise _as_httpx_error(exc) from exc
    tail = reader.close()
    if tail:
        yield tail


def read_body(response: SyncResponse, limits: ReadLimits, deadline: float, *, provider: str,
              deployment: str) -> bytes:
    """The whole body of a sync response, decoded, within the read caps and the deadline (`iter_body`, joined)."""
    return b"".join(iter_body(response, limits, deadline, provider=provider, deployment=deployment))


async def aiter_body(response: Any, limits: ReadLimits, deadline: float, *, provider: str,
                     deployment: str) -> AsyncIterator[bytes]:
    """`iter_body` for async responses; a trickle is cut at the deadline.

    On aiohttp the request's own total timer (`_aiohttp_timeout`: one timer per request, at the
    deadline) bounds every wait for bytes, and `sock_read` each one: no timer is set here. On httpx,
    each wait for bytes is cut by `asyncio.timeout` at the deadline."""
    import asyncio

    reader = BodyReader(limits, response.headers.get("content-encoding"), provider=provider, deployment=deployment)
    if type(response) is AiohttpResponse:
        content = response._response.content
        try:
            while True:
                data = await content.readany()
                if not data:
                    break
                out = reader.feed(data)
                if out:
                    yield out
        except (E.BuiltinTimeoutError, asyncio.TimeoutError):  # the same class on 3.11+
            raise _past(deadline) from None
    else:
        raw = response.aiter_raw().__aiter__()
        while True:
            try:
                async with _async_timeout(max(0.0, deadline - time.monotonic())):
                    data = await raw.__anext__()
            except StopAsyncIteration:
                break
            except (E.BuiltinTimeoutError, asyncio.TimeoutError):
                raise _past(deadline) from None
            out = reader.feed(data)
            if out:
                yield out
    tail = reader.close()
    if tail:
        yield tail


async def aread_body(response: Any, limits: ReadLimits, deadline: float, *, provider: str,
                     deployment: str) -> bytes:
    """The whole body of an async response, decoded, within the read caps and the deadline, as
    `aiter_body` reads it. On aiohttp, in one loop over the response's buffer without a generator
    (a plain answer is usually there whole: one read and the end)."""
    import asyncio

    if type(response) is not AiohttpResponse:
        return b"".join([data async for data in aiter_body(response, limits, deadline, provider=provider,
                                                          deployment=deployment)])
    reader = BodyReader(limits, response.headers.get("content-encoding"), provider=provider, deployment=deployment)
    content = response._response.content
    parts: List[bytes] = []
    try:
        while not content.at_eof():  # the whole body in the buffer: one read, no second one to see the end
            data = await content.readany()
            if not data:
                break
            parts.append(reader.feed(data))
    except (E.BuiltinTimeoutError, asyncio.TimeoutError):  # the same class on 3.11+
        raise _past(deadline) from None
    tail = reader.close()
    if tail:
        parts.append(tail)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _content(request: HttpRequest) -> bytes | None:
    """The body to send: the adapter's pre-encoded JSON, as is; None for a request without one (a GET)."""
    if request.content is not None:
        return request.content
    if request.json is None:
        return None
    import json

    return json.dumps(request.json, separators=(",", ":"), ensure_ascii=False).encode()


def _headers(request: HttpRequest) -> Dict[str, str]:
    """The request's headers as the HTTP library sends them, asking for an uncompressed body unless
    they name an encoding (a server that compresses anyway is decoded within the read caps:
    bounded.BodyReader). Keys are revealed here, at the last moment, as strings whose repr is the
    mask (`secrets.wire_headers`): call it inline in the library call, never into a local."""
    headers = wire_headers(request.headers)
    for name in headers:
        if name.lower() == "accept-encoding":
            return headers
    return {**headers, "Accept-Encoding": "identity"}


class _OnTheWireBytes(bytes):
    """A header value encoded for httpcore, whose repr is the mask (it may hold a key)."""

    def __repr__(self) -> str:
        return f"b'{MASK}'"


_TLS_LOCK = threading.Lock()
_TLS_CONTEXT: Any = None


def _tls_context() -> Any:
    """The process's one client TLS context (httpx's: certifi's CA bundle, no SSL_CERT_* from the
    environment), made on first use and shared by every pool: loading the CA bundle costs 20-30 ms
    of CPU, which a context per pool paid again for every provider of every client."""
    global _TLS_CONTEXT
    if _TLS_CONTEXT is None:
        with _TLS_LOCK:
            if _TLS_CONTEXT is None:
                import httpx

                _TLS_CONTEXT = httpx.create_ssl_context(trust_env=False)
    return _TLS_CONTEXT


def _limits(max_connections: int) -> "httpx.Limits":
    import httpx

    return httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections, keepalive_expiry=30)


class ConnectTimer:
    """How long this request spent opening a connection (TCP, TLS).

    `connect_s` stays None when the request reused a pooled connection. The async httpx transport
    passes it as httpx's `trace` extension; the sync pool's network backend (`_DeadlineBackend`) and
    aiohttp's connector (`_timed_connector`) fill `connect_s` themselves."""

    __slots__ = ("_started", "connect_s")

    def __init__(self) -> None:
        self._started: float | None = None
        self.connect_s: float | None = None

    def event(self, name: str) -> None:
        if name == "connection.connect_tcp.started":
            self._started = time.perf_counter()
        elif name in ("connection.connect_tcp.complete", "connection.start_tls.complete") and self._started:
            self.connect_s = time.perf_counter() - self._started

    def __call__(self, name: str, info: Any) -> None:
        self.event(name)


class AsyncConnectTimer(ConnectTimer):
    __slots__ = ()

    async def __call__(self, name: str, info: Any) -> None:  # type: ignore[override]  # httpx's async trace hook is awaited
        self.event(name)


# The request's ConnectTimer while aiohttp sends it (set by `AsyncTransport.open`, read by the connector).
_CONNECT_TIMER: contextvars.ContextVar[ConnectTimer | None] = contextvars.ContextVar("llmroute_connect_timer",
                                                                                     default=None)
_TIMED_CONNECTOR: List[Any] = []  # the TCPConnector subclass, made with aiohttp's first import


def _timed_connector() -> Any:
    """aiohttp's `TCPConnector`, timing each connection it opens (DNS, TCP, TLS) into the request's
    ConnectTimer. Not `TraceConfig` hooks: with a trace config aiohttp builds and sends ~5 trace
    signals per request and one per body chunk, +16 µs of CPU per plain request at concurrency 32
    (1.15x raw aiohttp; benchmarks/RESULTS.md, "The call core at the transport's cost")."""
    if not _TIMED_CONNECTOR:
        import aiohttp

        class TimedConnector(aiohttp.TCPConnector):
            async def _create_connection(self, req: Any, traces: Any, timeout: Any) -> Any:
                started = time.perf_counter()
                proto = await super()._create_connection(req, traces, timeout)
                timer = _CONNECT_TIMER.get()
                if timer is not None:
                    timer.connect_s = time.perf_counter() - started
                return proto

        _TIMED_CONNECTOR.append(TimedConnector)
    return _TIMED_CONNECTOR[0]


def _aiohttp_session(max_connections: int) -> Any:
    """One provider's aiohttp session, made on first use (inside the running loop): the provider's
    connection limit, 30 s keep-alive like the httpx pools, httpx's TLS context (the same CA bundle
    as the sync side), no proxy settings from the environment, and a connector that times new
    connections (TCP + TLS) into the request's `ConnectTimer` (`_timed_connector`)."""
    import aiohttp

    connector = _timed_connector()(limit=max_connections, keepalive_timeout=30, ssl=_tls_context())
    # Bodies arrive as sent: a server that compresses anyway is decoded by bounded.BodyReader, within
    # the read caps (aiohttp's own decompression has no cap: a gzip bomb would inflate whole).
    return aiohttp.ClientSession(connector=connector, trust_env=False, auto_decompress=False)


class AiohttpResponse:
    """An aiohttp response with the few httpx.Response members the clients use: `status_code`,
    `headers` (case-insensitive), `aiter_raw()` (bytes as they arrive) and `aclose()`. Bodies are
    read through `exchange.py` (within the read caps), never whole by the response itself; every
    wait for bytes is cut at the request's deadline by aiohttp's own timer (`_aiohttp_timeout`)."""

    __slots__ = ("_response", "status_code", "headers")

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status_code: int = response.status
        self.headers = response.headers

    def aiter_raw(self) -> AsyncIterator[bytes]:
        return self._response.content.iter_any()

    async def aclose(self) -> None:
        """Give the connection back to the pool (closed instead if the body was not read to its end)."""
        response = self._response
        response.release()
        await response.wait_for_close()


# What `AsyncTransport.open` returns: an `AiohttpResponse`, or an `httpx.Response` on the httpx transport.
AsyncResponse = Any


def _stale_connection(exc: BaseException) -> bool:
    """The server closed a pooled keep-alive connection before answering.

    llama.cpp's HTTP server, for one, closes a keep-alive connection after a few requests; the next
    request on it fails before any byte of a response. httpx says "Server disconnected without
    sending a response"; aiohttp raises ServerDisconnectedError, or ClientOSError "Cannot write to
    closing transport" when the close raced the write."""
    err: BaseException | None = exc
    for _ in range(3):  # the exception and its causes
        if err is None:
            break
        name, text = type(err).__name__, str(err)
        if name == "RemoteProtocolError" and "without sending a response" in text:
            return True  # not "... without sending complete message body": that reply was cut, not missing
        if name in ("ServerDisconnectedError", "ClientConnectionResetError"):
            return True
        if name == "ClientOSError" and "closing transport" in text:
            return True
        err = err.__cause__
    return False


# Headers `httpx.Client` adds to every request unless the request names them (Host and Content-Length
# are added per request, as httpx does).
_CLIENT_HEADERS = (("accept", b"Accept", b"*/*"), ("connection", b"Connection", b"keep-alive"))

# httpcore's exceptions -> httpx's of the same name, as `httpx.HTTPTransport` maps them.
_HTTPCORE_ERRORS: Any = None


def _httpcore_errors() -> Any:
    global _HTTPCORE_ERRORS
    if _HTTPCORE_ERRORS is None:
        import httpcore

        _HTTPCORE_ERRORS = (httpcore.TimeoutException, httpcore.NetworkError, httpcore.ProtocolError,
                            httpcore.ProxyError, httpcore.UnsupportedProtocol)
    return _HTTPCORE_ERRORS


def _as_httpx_error(exc: Exception) -> Exception:
    """The httpx exception httpx.Client would raise for an httpcore one (the same name, `exc` its cause)."""
    import httpx

    for cls in type(exc).__mro__:
        mapped = getattr(httpx, cls.__name__, None)
        if isinstance(mapped, type) and issubclass(mapped, httpx.HTTPError):
            error = mapped(str(exc))
            error.__cause__ = exc
            return error
    return exc


class _Target:
    """A URL as httpx parses it once: httpcore's URL, the Host header, and the httpx URL (cookies)."""

    __slots__ = ("url", "host", "httpx_url")

    def __init__(self, url: str) -> None:
        import httpcore
        import httpx

        parsed = httpx.URL(url)
        self.httpx_url = parsed
        self.url = httpcore.URL(scheme=parsed.raw_scheme, host=parsed.raw_host, port=parsed.port,
                                target=parsed.raw_path)
        self.host = parsed.netloc


class SyncHeaders(Mapping[str, str]):
    """A response's headers, read case-insensitively; several values of one name are joined with
    ", " (as `httpx.Headers.get` joins them). `raw` holds them as received."""

    __slots__ = ("raw", "_values")

    def __init__(self, raw: List[Tuple[bytes, bytes]]) -> None:
        self.raw = raw
        try:
            self._values = self._decoded(raw, "ascii")  # what servers send: one pass
        except UnicodeDecodeError:
            self._values = self._decoded(raw, _header_encoding(raw))

    @staticmethod
    def _decoded(raw: List[Tuple[bytes, bytes]], encoding: str) -> Dict[str, str]:
        values: Dict[str, str] = {}
        for name, value in raw:
            key, text = name.decode("ascii", "replace").lower(), value.decode(encoding)
            values[key] = f"{values[key]}, {text}" if key in values else text
        return values

    def __getitem__(self, name: str) -> str:
        return self._values[name.lower()]

    def get(self, name: str, default: Any = None) -> Any:
        return self._values.get(name.lower(), default)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._values

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"SyncHeaders({list(self._values)})"  # names only: a value may hold a secret


def _header_encoding(raw: List[Tuple[bytes, bytes]]) -> str:
    """httpx's choice: ASCII, else UTF-8, else ISO-8859-1 (which decodes any bytes)."""
    for encoding in ("ascii", "utf-8"):
        try:
            for _, value in raw:
                value.decode(encoding)
        except UnicodeDecodeError:
            continue
        return encoding
    return "iso-8859-1"


class SyncResponse:
    """A response from the sync pool with the few httpx.Response members the clients use:
    `status_code`, `headers` (case-insensitive), `iter_raw()` (bytes as they arrive) and `close()`.
    Errors while reading are httpx's exceptions, as from an httpx.Response. Bodies are read through
    `exchange.py` (within the read caps), never whole by the response itself."""

    __slots__ = ("_response", "status_code", "headers")

    def __init__(self, response: Any) -> None:
        self._response = response
        self.status_code: int = response.status
        self.headers = SyncHeaders(response.headers)

    def iter_raw(self) -> Iterator[bytes]:
        errors = _httpcore_errors()  # bound now: a generator finalised at interpreter exit cannot import
        try:
            yield from self._response.stream
        except errors as exc:
            raise _as_httpx_error(exc) from exc

    def close(self) -> None:
        """Give the connection back to the pool (closed instead if the body was not read to its end)."""
        try:
            self._response.close()
        except _httpcore_errors() as exc:
            raise _as_httpx_error(exc) from exc


class _SyncPool:
    """One provider's httpcore pool as `httpx.Client(limits=..., trust_env=False)` builds it (the same
    TLS context, limits and default headers), with reads cut to the attempt's deadline, and httpx's
    cookie jar kept only once a response sets a cookie."""

    def __init__(self, max_connections: int) -> None:
        import httpcore
        import httpx

        limits = _limits(max_connections)
        self.pool = httpcore.ConnectionPool(
            ssl_context=_tls_context(), max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections, keepalive_expiry=limits.keepalive_expiry,
            http1=True, http2=False, retries=0, network_backend=_DeadlineBackend(httpcore.SyncBackend()),  # type: ignore[arg-type]  # duck-typed: httpcore is imported on first use, so no subclass
        )
        self.user_agent = f"python-httpx/{httpx.__version__}".encode()
        self.targets: Dict[str, _Target] = {}
        self.cookies: Any = None  # an httpx.Cookies, once a response set one

    def target(self, url: str) -> _Target:
        target = self.targets.get(url)
        if target is None:
            target = _Target(url)
            if len(self.targets) < 256:  # URLs differ only by extra_query: a few, kept; more, parsed each time
                self.targets[url] = target
        return target

    def build(self, request: HttpRequest, timeouts: Timeouts) -> Any:
        """httpcore's request, with the headers and body httpx would send. A request that cannot be
        built (a header value httpx could not encode, an unparsable URL) is an InvalidRequestError,
        raised before anything is sent."""
        import httpcore

        try:
            target = self.target(request.url)
            headers = _headers(request)
            given = {name.lower() for name in headers}
            content = request.content
            if content is None and request.json is not None:
                content = _content(request)
                if "content-type" not in given:
                    headers = {**headers, "Content-Type": "application/json"}
            raw: List[Tuple[bytes, bytes]] = [] if "host" in given else [(b"Host", target.host)]
            for key, name, value in _CLIENT_HEADERS:
                if key not in given:
                    raw.append((name, value))
            if "user-agent" not in given:
                raw.append((b"User-Agent", self.user_agent))
            for header, text in headers.items():
                raw.append((header.encode("ascii"), _OnTheWireBytes(text.encode("ascii"))))
            if content is not None and "content-length" not in given:
                raw.append((b"Content-Length", str(len(content)).encode()))
            if self.cookies:
                raw.extend(self._cookie_header(request.method, target))
        except (TypeError, ValueError) as exc:  # UnicodeEncodeError included
            headers, raw = {}, []  # written keys out of this frame's locals (error trackers print them)
            raise E.InvalidRequestError(f"cannot be built: {type(exc).__name__}: {str(exc)[:200]}", field="request") \
                from None
        limits = {"connect": timeouts.connect_s, "read": timeouts.read_s, "write": timeouts.read_s,
                  "pool": timeouts.connect_s}
        extensions: Dict[str, Any] = {"timeout": _UntilDeadline(limits, time.monotonic() + timeouts.total_s)}
        return httpcore.Request(request.method, target.url, headers=raw, content=content, extensions=extensions)

    def _cookie_header(self, method: str, target: _Target) -> List[Tuple[bytes, bytes]]:
        import httpx

        probe = httpx.Request(method, target.httpx_url)
        self.cookies.set_cookie_header(probe)
        cookie = probe.headers.get("cookie")
        return [(b"Cookie", cookie.encode("latin-1"))] if cookie else []

    def keep_cookies(self, request: HttpRequest, response: Any) -> None:
        """httpx.Client's jar: what a response's Set-Cookie says is sent back on later requests."""
        if not any(name.lower() == b"set-cookie" for name, _ in response.headers):
            return
        import httpx

        if self.cookies is None:
            self.cookies = httpx.Cookies()
        probe = httpx.Request(request.method, self.target(request.url).httpx_url)
        self.cookies.extract_cookies(httpx.Response(response.status, headers=response.headers, request=probe))


class SyncTransport:
    """One connection pool per provider (base URLs and keys differ), created on first use."""

    def __init__(self) -> None:
        self._clients: Dict[str, _SyncPool] = {}
        self._lock = threading.Lock()
        self._closed = False

    def _client(self, provider: str, max_connections: int) -> _SyncPool:
        client = self._clients.get(provider)
        if client is None:
            with self._lock:
                if self._closed:
                    raise RuntimeError("the client is closed")
                client = self._clients.get(provider)
                if client is None:
                    client = self._clients[provider] = _SyncPool(max_connections)
        return client

    def open(self, request: HttpRequest, timeouts: Timeouts, *, provider: str, max_connections: int,
             timer: ConnectTimer | None = None) -> SyncResponse:
        """Send and return the response with its body unread (the caller reads or streams it)."""
        client = self._client(provider, max_connections)
        req = client.build(request, timeouts)
        token = _DEADLINE.set(time.monotonic() + headers_within(timeouts))
        timing = _CONNECT_TIMER.set(timer)  # a new connection is timed by `_DeadlineBackend`
        try:
            response = client.pool.handle_request(req)
        except _httpcore_errors() as exc:
            raise _as_httpx_error(exc) from exc
        finally:
            _CONNECT_TIMER.reset(timing)
            _DEADLINE.reset(token)
        client.keep_cookies(request, response)
        return SyncResponse(response)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.pool.close()


_GET_LOOP: List[Any] = []  # asyncio.get_running_loop, bound on first use (`import llmroute` stays light)


def _loop() -> Any:
    """The running event loop."""
    if not _GET_LOOP:
        import asyncio

        _GET_LOOP.append(asyncio.get_running_loop)
    return _GET_LOOP[0]()


class _LoopPools:
    """The pools of one event loop, and the async generator that closes them when that loop shuts down
    (`asyncio.run` and every runner call `loop.shutdown_asyncgens()` before closing a loop)."""

    __slots__ = ("loop", "clients", "guard")

    def __init__(self, loop: Any) -> None:
        self.loop = loop
        self.clients: Dict[str, Any] = {}
        self.guard: Any = None


class AsyncTransport:
    """One pool per provider and event loop: an aiohttp `ClientSession` (`backend="aiohttp"`, the
    default; "auto" means the same) or an `httpx.AsyncClient` (`backend="httpx"`).

    A pool belongs to the loop it was made on, so an `AsyncClient` used from a second loop (a second
    `asyncio.run(...)`, a notebook, a test suite with a loop per test) gets pools of its own there,
    made on first use. A loop's pools close when that loop shuts down (an async generator started on
    the loop is finalised by `shutdown_asyncgens`), or with the transport (`aclose`)."""

    def __init__(self, backend: str = "auto") -> None:
        if backend not in ("auto", "httpx", "aiohttp"):
            raise E.ConfigError(
                f"unknown async transport {backend!r}; expected 'auto', 'httpx' or 'aiohttp'", key="transport"
            )
        self.backend = "aiohttp" if backend == "auto" else backend
        self._loops: Dict[Any, _LoopPools] = {}
        self._closed = False

    @property
    def _clients(self) -> Dict[str, Any]:
        """Every pool, of every loop (for a finaliser); a call uses its own loop's (`_client`)."""
        return {f"{id(p.loop)}:{name}": c for p in list(self._loops.values()) for name, c in p.clients.items()}

    def _make(self, max_connections: int) -> Any:
        if self.backend == "aiohttp":
            return _aiohttp_session(max_connections)
        import httpx

        return httpx.AsyncClient(limits=_limits(max_connections), trust_env=False, follow_redirects=False,
                                 verify=_tls_context())

    async def _pools(self) -> _LoopPools:
        import asyncio

        loop = asyncio.get_running_loop()
        pools = self._loops.get(loop)
        if pools is None:
            for other in [other for other in self._loops if other.is_closed()]:
                del self._loops[other]  # closed without shutting its async generators down: pools lost
            pools = self._loops[loop] = _LoopPools(loop)
            pools.guard = self._close_at_shutdown(pools)
            await pools.guard.__anext__()  # started on this loop: finalised when it shuts down
        return pools

    async def _close_at_shutdown(self, pools: _LoopPools) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if self._loops.get(pools.loop) is pools:
                del self._loops[pools.loop]
            clients, pools.clients = list(pools.clients.values()), {}
            for client in clients:
                await (client.aclose() if self.backend == "httpx" else client.close())

    async def _client(self, provider: str, max_connections: int) -> Any:
        if self._closed:
            raise RuntimeError("the client is closed")
        pools = await self._pools()
        client = pools.clients.get(provider)
        if client is None:
            client = pools.clients[provider] = self._make(max_connections)
        return client

    def _made(self, provider: str) -> Any:
        """This loop's pool for `provider` when it is made and the transport open, else None (`_client`
        makes it): a call on a warm pool awaits nothing before sending."""
        pools = self._loops.get(_loop())
        return pools.clients.get(provider) if pools is not None and not self._closed else None

    async def open(
        self, request: HttpRequest, timeouts: Timeouts, *, provider: str, max_connections: int,
        timer: AsyncConnectTimer | None = None, deadline: float | None = None,
    ) -> Any:
        """Send and return the response (an `httpx.Response` or an `AiohttpResponse`), body unread.
        `deadline` (monotonic; by default `total_s` from now): the headers and, on aiohttp, every read
        of the body are cut there."""
        client = self._made(provider)
        if client is None:
            client = await self._client(provider, max_connections)
        if self.backend == "aiohttp":
            # POST is not idempotent: aiohttp never resends it on a dropped keep-alive connection;
            # map_transport_error names that case and the failover plan resends it, visibly.
            try:
                content = _content(request)
            except (TypeError, ValueError) as exc:
                raise E.InvalidRequestError(f"cannot be built: {type(exc).__name__}: {str(exc)[:200]}",
                                            field="request") from None
            # aiohttp's own total, at the deadline: it bounds the wait for a connection and for the
            # headers, and every later read of the body (`aiter_body`). A streamed read's headers are
            # also cut at its first-token limit (`headers_within`), a second timer.
            token = _CONNECT_TIMER.set(timer)
            try:
                async with _headers_cut(timeouts):
                    response = await client.request(
                        request.method, request.url, headers=_headers(request), data=content,
                        timeout=_aiohttp_timeout(timeouts, deadline), allow_redirects=False,
                    )
            finally:
                _CONNECT_TIMER.reset(token)
            return AiohttpResponse(response)
        req = _build(client, request, timeouts, timer)
        async with _async_timeout(headers_within(timeouts)):
            return await client.send(req, stream=True)

    async def aclose(self) -> None:
        """Close every loop's pools: this loop's here, a loop running in another thread's on that loop
        (waited for, briefly); a loop that is neither running nor closed closes them when it next runs."""
        import asyncio

        self._closed = True
        here = asyncio.get_running_loop()
        for pools in list(self._loops.values()):
            loop = pools.loop
            if loop is here:
                await pools.guard.aclose()
            elif loop.is_running():
                future = asyncio.run_coroutine_threadsafe(pools.guard.aclose(), loop)
                try:
                    await asyncio.wait_for(asyncio.wrap_future(future), 5.0)
                except (asyncio.TimeoutError, RuntimeError):
                    pass
            elif not loop.is_closed():
                self.close_later()
        self._loops.clear()

    def close_later(self) -> None:
        """From synchronous code (a finaliser): each loop's pools are closed on their loop, when it runs."""
        for pools in list(self._loops.values()):
            loop = pools.loop
            if loop.is_closed():
                continue
            try:
                loop.call_soon_threadsafe(lambda guard=pools.guard, loop=loop: loop.create_task(guard.aclose()))
            except RuntimeError:  # the loop closed meanwhile
                pass


_CLIENT_TIMEOUT: List[Any] = []  # aiohttp.ClientTimeout, bound with aiohttp's first import
_NO_CEILING = float("inf")  # aiohttp rounds a timer of 5 s or more up to a whole second unless told not to


def _aiohttp_timeout(timeouts: Timeouts, deadline: float | None = None) -> Any:
    """aiohttp's timeouts for one attempt's limits: `total` ends at the deadline (monotonic, the
    event loop's clock; by default `total_s` from now) and covers the wait for a pooled connection,
    the headers and every read of the body (aiohttp cancels the waiting read and raises
    `TimeoutError`); `connect` covers waiting for a pooled connection and opening one, as httpx's
    pool + connect timeouts do; `sock_read` bounds each wait for bytes (the first-token limit of a
    stream), set only when it can fire before the deadline. One timer per request, none rounded up."""
    if not _CLIENT_TIMEOUT:
        import aiohttp

        _CLIENT_TIMEOUT.append(aiohttp.ClientTimeout)
    left = (deadline - time.monotonic()) if deadline is not None else timeouts.total_s
    left = max(0.001, left)
    read_s = timeouts.read_s if timeouts.read_s < left else None
    return _CLIENT_TIMEOUT[0](total=left, connect=timeouts.connect_s, sock_connect=timeouts.connect_s,
                              sock_read=read_s, ceil_threshold=_NO_CEILING)
