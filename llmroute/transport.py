"""The only module that does network I/O: httpx connection pools, sync and async, one per provider.

It sends an adapter's `HttpRequest` and hands back the status, headers and body bytes (whole, or as
they arrive). It knows nothing of platforms; it maps httpx's exceptions to llmroute's connect /
time-to-first-token / total timeouts and connection errors, naming the deployment. The async side
runs on aiohttp when the `llmroute[aiohttp]` extra is installed (`transport="auto"`, the default:
it costs several times less CPU per request), else on httpx's own transport; aiohttp is imported
only when an `AsyncClient` uses it.
"""

from __future__ import annotations

import contextvars
import functools
import threading
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Dict, Iterator, Optional

import httpx

from . import errors as E
from .bounded import ACCEPT_ENCODING, BodyReader, ReadLimits
from .providers.base import HttpRequest

__all__ = ["DROPPED_BEFORE_REPLY", "Timeouts", "SyncTransport", "AsyncTransport", "ConnectTimer", "AsyncConnectTimer",
           "map_transport_error", "iter_body", "read_body", "aiter_body", "aread_body"]


@dataclass(frozen=True)
class Timeouts:
    """Limits for one attempt. `read_s` bounds each wait for bytes: until the first token it is the
    time-to-first-token limit (or what is left of the total, if less); `total_s` is checked between reads."""

    connect_s: float
    ttft_s: float
    total_s: float
    read_s: float
    read_kind: str  # "ttft" or "total": which limit a read timeout means
    stall_s: Optional[float] = None  # streams: no content for this long after content started

    def httpx(self) -> httpx.Timeout:
        return httpx.Timeout(connect=self.connect_s, read=self.read_s, write=self.read_s, pool=self.connect_s)


# `ProviderError.code` of a ConnectionError raised when the server closed a pooled keep-alive
# connection before answering: the request may not have been read; the plan resends it at once, as a
# visible attempt within max_retries, and the breaker does not count it.
DROPPED_BEFORE_REPLY = "connection_dropped_before_reply"


def map_transport_error(exc: Exception, *, provider: str, deployment: str, timeouts: Timeouts) -> E.ProviderError:
    """httpx (and aiohttp, through httpx-aiohttp) exceptions -> typed errors that say which limit fired."""
    kw: Dict[str, Any] = dict(provider=provider, deployment=deployment)
    if _stale_connection(exc):
        return E.ConnectionError(f"connection closed by the server before a reply: {_reason(exc)}",
                                 code=DROPPED_BEFORE_REPLY, **kw)
    cause = exc.__cause__
    if cause is not None and type(cause).__module__.startswith("aiohttp"):
        # httpx-aiohttp maps every aiohttp connection error to httpx.ConnectTimeout: read the cause.
        exc = cause  # type: ignore[assignment]
    if type(exc).__module__.split(".")[0] == "aiohttp":
        name = type(exc).__name__
        if name == "ConnectionTimeoutError":
            return E.TimeoutError(f"connect timeout: no connection within {timeouts.connect_s:g}s",
                                  timeout="connect", seconds=timeouts.connect_s, **kw)
        if "Timeout" in name:
            return E.TimeoutError(_read_timeout_text(timeouts), timeout=timeouts.read_kind,
                                  seconds=timeouts.ttft_s if timeouts.read_kind == "ttft" else timeouts.total_s, **kw)
        return E.ConnectionError(f"connection failed: {_reason(exc)}", **kw)
    if isinstance(exc, (httpx.ConnectTimeout, httpx.PoolTimeout)):
        return E.TimeoutError(
            f"connect timeout: no connection within {timeouts.connect_s:g}s", timeout="connect",
            seconds=timeouts.connect_s, **kw,
        )
    if isinstance(exc, (httpx.ReadTimeout, httpx.WriteTimeout)):
        return E.TimeoutError(_read_timeout_text(timeouts), timeout=timeouts.read_kind,
                              seconds=timeouts.ttft_s if timeouts.read_kind == "ttft" else timeouts.total_s, **kw)
    if isinstance(exc, httpx.TimeoutException):
        return E.TimeoutError(f"timeout: {type(exc).__name__}", timeout="total", seconds=timeouts.total_s, **kw)
    if isinstance(exc, httpx.ConnectError):
        return E.ConnectionError(f"connection failed: {_reason(exc)}", **kw)
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError, httpx.NetworkError)):
        return E.ConnectionError(f"connection broken: {_reason(exc)}", **kw)
    if isinstance(exc, httpx.HTTPError):
        return E.ConnectionError(f"HTTP error: {_reason(exc)}", **kw)
    if isinstance(exc, E.BuiltinTimeoutError) or type(exc).__name__ == "TimeoutError":  # asyncio.TimeoutError (aiohttp side)
        return E.TimeoutError(_read_timeout_text(timeouts), timeout=timeouts.read_kind,
                              seconds=timeouts.ttft_s if timeouts.read_kind == "ttft" else timeouts.total_s, **kw)
    if isinstance(exc, OSError):
        return E.ConnectionError(f"connection failed: {exc.strerror or exc}", **kw)
    raise exc


def _read_timeout_text(timeouts: Timeouts) -> str:
    if timeouts.read_kind == "ttft":
        return f"time-to-first-token timeout: nothing within {timeouts.ttft_s:g}s"
    return f"total timeout: the call took longer than {timeouts.total_s:g}s"


def _reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    cause = exc.__cause__ or exc.__context__
    if cause is not None and str(cause) and str(cause) not in text:
        text = f"{text} ({cause})"
    return text[:300]


def _body(request: HttpRequest) -> Dict[str, Any]:
    return {"content": request.content} if request.content is not None else {"json": request.json}


class _UntilDeadline(dict):
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


# The deadline of the request this thread is sending (monotonic), for `_DeadlineStream`.
_DEADLINE: contextvars.ContextVar[Optional[float]] = contextvars.ContextVar("llmroute_deadline", default=None)


class _DeadlineStream:
    """httpcore's sync network stream, each read and write cut to what is left before `_DEADLINE`.
    httpcore reads its timeouts once per phase, so without this a server trickling its headers one
    byte at a time would hold the request for as long as it likes."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    @staticmethod
    def _cut(timeout: Optional[float]) -> Optional[float]:
        deadline = _DEADLINE.get()
        if deadline is None:
            return timeout
        left = max(0.001, deadline - time.monotonic())
        return left if timeout is None else min(timeout, left)

    def read(self, max_bytes: int, timeout: Optional[float] = None) -> bytes:
        return self._inner.read(max_bytes, self._cut(timeout))

    def write(self, buffer: bytes, timeout: Optional[float] = None) -> None:
        self._inner.write(buffer, self._cut(timeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, *args: Any, **kwargs: Any) -> "_DeadlineStream":
        return _DeadlineStream(self._inner.start_tls(*args, **kwargs))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend:
    """httpcore's sync network backend, handing out `_DeadlineStream`s."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def connect_tcp(self, *args: Any, **kwargs: Any) -> _DeadlineStream:
        return _DeadlineStream(self._inner.connect_tcp(*args, **kwargs))

    def connect_unix_socket(self, *args: Any, **kwargs: Any) -> _DeadlineStream:
        return _DeadlineStream(self._inner.connect_unix_socket(*args, **kwargs))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _with_deadlines(client: httpx.Client) -> httpx.Client:
    pool = getattr(getattr(client, "_transport", None), "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if backend is not None:
        pool._network_backend = _DeadlineBackend(backend)  # type: ignore[union-attr]
    return client


def _build(client: Any, request: HttpRequest, timeouts: Timeouts, timer: Optional[ConnectTimer]) -> httpx.Request:
    """The httpx request, bounded: per-read timeouts cut to the deadline, only encodings we decode.
    A request that cannot be built (a header or body value httpx refuses) is an InvalidRequestError,
    raised before anything is sent."""
    try:
        req = client.build_request(
            request.method, request.url, headers=request.headers, **_body(request), timeout=timeouts.httpx(),
            extensions={"trace": timer} if timer is not None else None,
        )
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError and httpx's LocalProtocolError included
        raise E.InvalidRequestError(f"cannot be built: {type(exc).__name__}: {str(exc)[:200]}", field="request") \
            from None
    req.extensions["timeout"] = _UntilDeadline(req.extensions.get("timeout") or {}, time.monotonic() + timeouts.total_s)
    req.headers["Accept-Encoding"] = ACCEPT_ENCODING  # both decoded within the caps (bounded.py)
    return req


def _past(deadline: float) -> httpx.ReadTimeout:
    return httpx.ReadTimeout(f"the attempt's total timeout passed while reading ({time.monotonic() - deadline:.1f}s over)")


def iter_body(response: httpx.Response, limits: ReadLimits, deadline: float, *, provider: str,
              deployment: str) -> Iterator[bytes]:
    """The body's bytes as they arrive, decoded, within the read caps and the deadline (monotonic)."""
    reader = BodyReader(limits, response.headers.get("content-encoding"), provider=provider, deployment=deployment)
    for data in response.iter_raw():
        if time.monotonic() > deadline:
            raise _past(deadline)
        out = reader.feed(data)
        if out:
            yield out
    tail = reader.close()
    if tail:
        yield tail


def read_body(response: httpx.Response, limits: ReadLimits, deadline: float, *, provider: str,
              deployment: str) -> bytes:
    return b"".join(iter_body(response, limits, deadline, provider=provider, deployment=deployment))


async def aiter_body(response: httpx.Response, limits: ReadLimits, deadline: float, *, provider: str,
                     deployment: str) -> AsyncIterator[bytes]:
    """`iter_body` for async responses; a trickle is cut at the deadline by `asyncio.timeout`."""
    import asyncio

    reader = BodyReader(limits, response.headers.get("content-encoding"), provider=provider, deployment=deployment)
    raw = response.aiter_raw().__aiter__()
    while True:
        try:
            async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                data = await raw.__anext__()
        except StopAsyncIteration:
            break
        except E.BuiltinTimeoutError:
            raise _past(deadline) from None
        out = reader.feed(data)
        if out:
            yield out
    tail = reader.close()
    if tail:
        yield tail


async def aread_body(response: httpx.Response, limits: ReadLimits, deadline: float, *, provider: str,
                     deployment: str) -> bytes:
    return b"".join([data async for data in aiter_body(response, limits, deadline, provider=provider,
                                                        deployment=deployment)])


def _limits(max_connections: int) -> httpx.Limits:
    return httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections, keepalive_expiry=30)


class ConnectTimer:
    """httpx's `trace` extension: how long this request spent opening a connection (TCP, TLS).

    `connect_s` stays None when the request reused a pooled connection. On aiohttp the same timer
    is filled by aiohttp's own trace hooks (`_aiohttp_session`)."""

    __slots__ = ("_started", "connect_s")

    def __init__(self) -> None:
        self._started: Optional[float] = None
        self.connect_s: Optional[float] = None

    def event(self, name: str) -> None:
        if name == "connection.connect_tcp.started":
            self._started = time.perf_counter()
        elif name in ("connection.connect_tcp.complete", "connection.start_tls.complete") and self._started:
            self.connect_s = time.perf_counter() - self._started

    def __call__(self, name: str, info: Any) -> None:
        self.event(name)


class AsyncConnectTimer(ConnectTimer):
    __slots__ = ()

    async def __call__(self, name: str, info: Any) -> None:  # type: ignore[override]
        self.event(name)


# The timer of the request being sent in this task, for aiohttp's connection trace hooks (which run
# in the task that sends the request, so a context variable reaches them without a lookup table).
_AIOHTTP_TIMER: contextvars.ContextVar[Optional[ConnectTimer]] = contextvars.ContextVar("llmroute_connect_timer")


async def _aiohttp_connect_started(session: Any, context: Any, params: Any) -> None:
    timer = _AIOHTTP_TIMER.get(None)
    if timer is not None:
        timer._started = time.perf_counter()


async def _aiohttp_connect_ended(session: Any, context: Any, params: Any) -> None:
    timer = _AIOHTTP_TIMER.get(None)
    if timer is not None and timer._started:
        timer.connect_s = time.perf_counter() - timer._started


def _aiohttp_session(transport: Any, max_connections: int) -> Any:
    """The aiohttp session behind httpx-aiohttp, made on first use (inside the running loop): the
    provider's connection limit (httpx-aiohttp would default to 100), 30 s keep-alive like the httpx
    pools, the transport's TLS context, and trace hooks that time new connections (TCP + TLS)."""
    import aiohttp

    trace = aiohttp.TraceConfig()
    trace.on_connection_create_start.append(_aiohttp_connect_started)
    trace.on_connection_create_end.append(_aiohttp_connect_ended)
    connector = aiohttp.TCPConnector(limit=max_connections, keepalive_timeout=30, ssl=transport.ssl_context)
    return aiohttp.ClientSession(connector=connector, trace_configs=[trace])


def _stale_connection(exc: BaseException) -> bool:
    """The server closed a pooled keep-alive connection before answering.

    llama.cpp's HTTP server, for one, closes a keep-alive connection after a few requests; the next
    request on it fails before any byte of a response. httpx says "Server disconnected without
    sending a response"; aiohttp raises ServerDisconnectedError, or ClientOSError "Cannot write to
    closing transport" when the close raced the write."""
    err: Optional[BaseException] = exc
    for _ in range(3):  # the exception and its causes (httpx-aiohttp wraps aiohttp's)
        if err is None:
            break
        name, text = type(err).__name__, str(err)
        if name == "RemoteProtocolError" and "without sending" in text:
            return True
        if name in ("ServerDisconnectedError", "ClientConnectionResetError"):
            return True
        if name == "ClientOSError" and "closing transport" in text:
            return True
        err = err.__cause__
    return False


class SyncTransport:
    """One `httpx.Client` per provider (base URLs and keys differ), created on first use."""

    def __init__(self) -> None:
        self._clients: Dict[str, httpx.Client] = {}
        self._lock = threading.Lock()
        self._closed = False

    def _client(self, provider: str, max_connections: int) -> httpx.Client:
        client = self._clients.get(provider)
        if client is None:
            with self._lock:
                if self._closed:
                    raise RuntimeError("the client is closed")
                client = self._clients.get(provider)
                if client is None:
                    client = _with_deadlines(httpx.Client(limits=_limits(max_connections), trust_env=False,
                                                          follow_redirects=False))
                    self._clients[provider] = client
        return client

    def open(self, request: HttpRequest, timeouts: Timeouts, *, provider: str, max_connections: int,
             timer: Optional[ConnectTimer] = None) -> httpx.Response:
        """Send and return the response with its body unread (the caller reads or streams it)."""
        client = self._client(provider, max_connections)
        req = _build(client, request, timeouts, timer)
        token = _DEADLINE.set(time.monotonic() + timeouts.total_s)
        try:
            return client.send(req, stream=True)
        finally:
            _DEADLINE.reset(token)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()


class AsyncTransport:
    """One `httpx.AsyncClient` per provider; `backend="aiohttp"` uses httpx-aiohttp's transport."""

    def __init__(self, backend: str = "auto") -> None:
        if backend not in ("auto", "httpx", "aiohttp"):
            raise E.ConfigError(
                f"unknown async transport {backend!r}; expected 'auto', 'httpx' or 'aiohttp'", key="transport"
            )
        if backend == "auto":
            # aiohttp costs several times less CPU per request than httpx's pool under concurrency
            # (benchmarks/RESULTS.md), so it is used whenever the aiohttp extra is installed.
            import importlib.util

            backend = "aiohttp" if importlib.util.find_spec("httpx_aiohttp") is not None else "httpx"
        self.backend = backend
        self._clients: Dict[str, httpx.AsyncClient] = {}
        self._closed = False

    def _make(self, max_connections: int) -> httpx.AsyncClient:
        limits = _limits(max_connections)
        if self.backend == "aiohttp":
            try:
                from httpx_aiohttp import AiohttpTransport
            except ImportError:
                raise E.ConfigError(
                    "transport 'aiohttp' needs the aiohttp extra: pip install 'llmroute[aiohttp]'", key="transport"
                ) from None
            transport = AiohttpTransport(limits=limits, trust_env=False)
            transport.client = functools.partial(_aiohttp_session, transport, max_connections)
            return httpx.AsyncClient(transport=transport, limits=limits, trust_env=False)
        return httpx.AsyncClient(limits=limits, trust_env=False, follow_redirects=False)

    def _client(self, provider: str, max_connections: int) -> httpx.AsyncClient:
        if self._closed:
            raise RuntimeError("the client is closed")
        client = self._clients.get(provider)
        if client is None:
            client = self._clients[provider] = self._make(max_connections)
        return client

    async def open(
        self, request: HttpRequest, timeouts: Timeouts, *, provider: str, max_connections: int,
        timer: Optional[AsyncConnectTimer] = None,
    ) -> httpx.Response:
        client = self._client(provider, max_connections)
        req = _build(client, request, timeouts, timer)
        # aiohttp knows nothing of httpx's trace extension: its own trace hooks find the timer here.
        token = _AIOHTTP_TIMER.set(timer) if timer is not None and self.backend == "aiohttp" else None
        import asyncio

        try:
            # aiohttp takes its timeouts once, at the start: the whole wait for headers is bounded here.
            async with asyncio.timeout(timeouts.total_s):
                return await client.send(req, stream=True)
        finally:
            if token is not None:
                _AIOHTTP_TIMER.reset(token)

    async def aclose(self) -> None:
        self._closed = True
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()
