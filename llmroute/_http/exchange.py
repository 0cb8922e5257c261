"""The one send-and-read path: every request llmroute sends goes through here, sync and async.

Chat (plain and streamed), embeddings, `models.list()`, the semantic cache's embedder and the batch
APIs' uploads, polls, downloads and cancels all describe their request as an `Exchange` and call
`send`/`asend` (then `read`/`aread` or `chunks`/`achunks`) or `fetch`/`afetch`, which apply, in one
place:

- the attempt's timeouts (connect, time-to-first-token or total, per read) and its deadline;
- the read caps of `bounded.ReadLimits` (bytes on the wire, bytes after gzip/deflate; the SSE line
  cap is the stream decoder's, set from the same `ReadLimits`), error bodies included;
- the typed error for what the HTTP library raised (`typed_error`), whose text goes through
  `errors.py`'s scrubber, so a key a platform echoes never reaches a message;
- what the call core records for the attempt and the breaker: `connect_s` (time spent opening a
  connection, None when a pooled one was reused), `sent` (False when the request could not be built:
  nothing reached the platform) and `status`.

It never decides anything about a call (retries, failover, pricing are the call core's) and never
parses a platform's body: `on_error` (the adapter's error mapping) turns a non-2xx body into an
error. The transports (`transport.py`) stay the only module that touches a socket. docs/transport.md.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Iterator, Mapping, Tuple
from urllib.parse import urljoin, urlsplit

from llmroute import errors as E
from llmroute._http.bounded import ReadLimits
from llmroute._http.request import HttpRequest
from llmroute._http.timeouts import Timeouts
from llmroute._http.transport import (AsyncConnectTimer, AsyncResponse, AsyncTransport, ConnectTimer, SyncResponse,
                                      SyncTransport, aiter_body, aread_body, iter_body, map_transport_error,
                                      read_body)
from llmroute._runtime.redaction import is_secret_header

__all__ = ["Exchange", "Reply", "ErrorFromResponse", "send", "read", "chunks", "fetch", "asend", "aread", "achunks",
           "afetch", "typed_error", "at_deadline", "sync_network_errors", "network_errors", "redirected",
           "MAX_REDIRECTS"]

# (status, headers, body) of a non-2xx response -> the error to raise (an adapter's error mapping).
ErrorFromResponse = Callable[[int, Mapping[str, str], bytes], Exception]

MAX_REDIRECTS = 5
_REDIRECTS = (301, 302, 303, 307, 308)


class Exchange:
    """One request and the reading of its response: what to send, within which limits, and what the
    call core records of it (`connect_s`, `sent`, `status`). `provider` names the connection pool;
    `deployment` is named in errors."""

    __slots__ = ("request", "timeouts", "limits", "provider", "deployment", "max_connections", "deadline",
                 "connect_s", "sent", "status")

    def __init__(self, request: HttpRequest, timeouts: Timeouts, limits: ReadLimits, *, provider: str,
                 deployment: str, max_connections: int, deadline: float | None = None) -> None:
        self.request = request
        self.timeouts = timeouts
        self.limits = limits
        self.provider = provider
        self.deployment = deployment
        self.max_connections = max_connections
        # monotonic; reads stop here. A call passes its attempt's deadline; otherwise the total from now.
        self.deadline = deadline if deadline is not None else time.monotonic() + timeouts.total_s
        self.connect_s: float | None = None
        self.sent = True
        self.status: int | None = None

    def opened(self, response: Any, on_error: ErrorFromResponse | None) -> bool:
        """Note the response's status; True if its body is an error for `on_error` to read."""
        self.status = response.status_code
        return on_error is not None and response.status_code >= 300

    def __repr__(self) -> str:  # the request's headers hold the key: never shown
        return f"Exchange({self.request.method} {self.request.url}, status={self.status})"


@dataclass
class Reply:
    """A response read whole, within the caps."""

    status: int
    headers: Mapping[str, str]
    body: bytes


def typed_error(exc: Exception, ex: Exchange) -> E.ProviderError:
    """The typed error for what a transport raised during `ex`: a read cut at the deadline is the
    total timeout (whatever the per-read limit said)."""
    error = map_transport_error(exc, provider=ex.provider, deployment=ex.deployment, timeouts=ex.timeouts,
                                url=ex.request.url)
    return at_deadline(error, ex.timeouts, ex.deadline)


def at_deadline(error: E.ProviderError, timeouts: Timeouts, deadline: float) -> E.ProviderError:
    """A read timeout that fired at the deadline (monotonic): the transport cut the read there, so it
    is the total timeout."""
    if isinstance(error, E.APITimeoutError) and error.timeout != "connect" and time.monotonic() >= deadline - 0.01:
        return E.APITimeoutError(f"total timeout: the attempt took longer than its {timeouts.total_s:.3g}s limit",
                                 timeout="total", seconds=timeouts.total_s, provider=error.provider,
                                 deployment=error.deployment)
    return error


_NETWORK_ERRORS: Tuple[Any, ...] | None = None
_ASYNC_NETWORK_ERRORS: Tuple[Any, ...] | None = None


def sync_network_errors() -> Tuple[Any, ...]:
    """What the sync transport raises. httpx is imported on first use, not at `import llmroute`."""
    global _NETWORK_ERRORS
    if _NETWORK_ERRORS is None:
        import httpx

        _NETWORK_ERRORS = (httpx.HTTPError, OSError)
    return _NETWORK_ERRORS


def network_errors() -> Tuple[Any, ...]:
    """What the async transports raise. asyncio and aiohttp are imported on first use, not at
    `import llmroute`; the tuple is built once."""
    global _ASYNC_NETWORK_ERRORS
    if _ASYNC_NETWORK_ERRORS is None:
        import asyncio

        import aiohttp

        _ASYNC_NETWORK_ERRORS = sync_network_errors() + (aiohttp.ClientError, asyncio.TimeoutError)
    return _ASYNC_NETWORK_ERRORS


def redirected(request: HttpRequest, status: int, headers: Mapping[str, str]) -> HttpRequest | None:
    """The request to send after a redirect, as browsers and httpx do it, or None if `status` is not one.
    303 (and 301/302 after a POST) becomes a GET without a body; credentials (`Authorization`,
    `*-Api-Key`, cookies ...) are dropped when the redirect leaves the origin (a signed download URL
    must not receive the platform key). Sans-I/O."""
    location = headers.get("location")
    if status not in _REDIRECTS or not location:
        return None
    url = urljoin(request.url, location)
    method, json, content = request.method, request.json, request.content
    if status == 303 or (status in (301, 302) and method == "POST"):
        method, json, content = "GET", None, None  # a GET has no JSON body
    given = request.headers
    if _origin(url) != _origin(request.url):
        given = {k: v for k, v in given.items() if not is_secret_header(k)}
    if content is None and json is None:
        given = {k: v for k, v in given.items() if k.lower() not in ("content-type", "content-length")}
    return HttpRequest(method, url, given, json, request.stream, content)


def _origin(url: str) -> Tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme.lower(), parts.netloc.lower()


# ---- send and read: the async code is the source, the sync twin is generated from it --------------


# --- async source: exchange ---
async def asend(transport: AsyncTransport, ex: Exchange, on_error: ErrorFromResponse | None = None) -> AsyncResponse:
    """Send `ex.request`; the response with its body unread. A non-2xx status with `on_error` given:
    the error body is read within the caps and `on_error`'s error raised. Transport exceptions pass
    through (the caller maps them: `typed_error`, or the call core's `transport_error`)."""
    timer = AsyncConnectTimer()
    try:
        response = await transport.open(ex.request, ex.timeouts, provider=ex.provider, timer=timer,
                                        deadline=ex.deadline,  # async only
                                        max_connections=ex.max_connections)
    except E.InvalidRequestError:  # the transport could not build it: nothing was sent
        ex.sent = False
        raise
    finally:
        ex.connect_s = timer.connect_s
    if ex.opened(response, on_error):
        raise _error(on_error, response, await aread(response, ex))
    return response


async def aread(response: AsyncResponse, ex: Exchange) -> bytes:
    """The whole body within the caps and the deadline; the response is closed after."""
    try:
        return await aread_body(response, ex.limits, ex.deadline, provider=ex.provider, deployment=ex.deployment)
    finally:
        await response.aclose()


def achunks(response: AsyncResponse, ex: Exchange) -> AsyncIterator[bytes]:
    """The body's bytes as they arrive, decoded, within the caps and the deadline (the caller closes)."""
    return aiter_body(response, ex.limits, ex.deadline, provider=ex.provider, deployment=ex.deployment)


async def afetch(transport: AsyncTransport, ex: Exchange, on_error: ErrorFromResponse | None = None, *,
                 follow_redirects: bool = False) -> Reply:
    """Send and read whole: a `Reply`, or a typed error (`ProviderError`) for whatever went wrong."""
    hop = 0
    try:
        while True:
            response = await asend(transport, ex, None if follow_redirects else on_error)
            after = _next_hop(ex, response, hop, follow_redirects)
            if after is None:
                return _reply(response, await aread(response, ex), on_error)
            await aread(response, ex)  # the redirect's own body, drained within the caps: the connection is reused
            ex.request, hop = after, hop + 1
    except network_errors() as exc:
        raise typed_error(exc, ex) from None
# --- end async source: exchange ---


# --- generated from exchange by scripts/gen_sync.py; do not edit ---
def send(transport: SyncTransport, ex: Exchange, on_error: ErrorFromResponse | None = None) -> SyncResponse:
    """Send `ex.request`; the response with its body unread. A non-2xx status with `on_error` given:
    the error body is read within the caps and `on_error`'s error raised. Transport exceptions pass
    through (the caller maps them: `typed_error`, or the call core's `transport_error`)."""
    timer = ConnectTimer()
    try:
        response = transport.open(ex.request, ex.timeouts, provider=ex.provider, timer=timer,
                                        max_connections=ex.max_connections)
    except E.InvalidRequestError:  # the transport could not build it: nothing was sent
        ex.sent = False
        raise
    finally:
        ex.connect_s = timer.connect_s
    if ex.opened(response, on_error):
        raise _error(on_error, response, read(response, ex))
    return response


def read(response: SyncResponse, ex: Exchange) -> bytes:
    """The whole body within the caps and the deadline; the response is closed after."""
    try:
        return read_body(response, ex.limits, ex.deadline, provider=ex.provider, deployment=ex.deployment)
    finally:
        response.close()


def chunks(response: SyncResponse, ex: Exchange) -> Iterator[bytes]:
    """The body's bytes as they arrive, decoded, within the caps and the deadline (the caller closes)."""
    return iter_body(response, ex.limits, ex.deadline, provider=ex.provider, deployment=ex.deployment)


def fetch(transport: SyncTransport, ex: Exchange, on_error: ErrorFromResponse | None = None, *,
                 follow_redirects: bool = False) -> Reply:
    """Send and read whole: a `Reply`, or a typed error (`ProviderError`) for whatever went wrong."""
    hop = 0
    try:
        while True:
            response = send(transport, ex, None if follow_redirects else on_error)
            after = _next_hop(ex, response, hop, follow_redirects)
            if after is None:
                return _reply(response, read(response, ex), on_error)
            read(response, ex)  # the redirect's own body, drained within the caps: the connection is reused
            ex.request, hop = after, hop + 1
    except sync_network_errors() as exc:
        raise typed_error(exc, ex) from None
# --- end generated: exchange ---


def _error(on_error: ErrorFromResponse | None, response: Any, body: bytes) -> Exception:
    """`on_error`'s error for a non-2xx answer. The body (which may echo a key) is only this frame's
    argument, gone before the error is raised: no traceback's locals hold it (error trackers)."""
    assert on_error is not None  # called only when there is one (`Exchange.opened`, `_reply`)
    return on_error(response.status_code, response.headers, body)


def _reply(response: Any, body: bytes, on_error: ErrorFromResponse | None) -> Reply:
    if on_error is not None and response.status_code >= 300:
        error = _error(on_error, response, body)
        del body  # out of this frame's locals before the raise
        raise error
    return Reply(response.status_code, response.headers, body)


def _next_hop(ex: Exchange, response: Any, hop: int, follow_redirects: bool) -> HttpRequest | None:
    """The request a redirect asks for, when redirects are followed and fewer than MAX_REDIRECTS were."""
    if not follow_redirects or hop >= MAX_REDIRECTS:
        return None
    return redirected(ex.request, response.status_code, response.headers)
