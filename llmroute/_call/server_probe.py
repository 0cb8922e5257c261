"""Identifying the servers behind a client's self-hosted providers, once each, off the request path.

The thin I/O shell around `providers/server_identity.py`. The first call that may reach a provider
of an identifiable kind queues it (`ServerIdentities.want`); one daemon thread for the whole process
asks the provider's free GET endpoints, on a connection pool of its own that it closes when its
queue is empty, until one answer says which server it is. Answers are kept per server (base URL and
credentials) and shared by every client of the process, so a program that builds many clients asks
each server once; an answer is asked again once it is old (`stale`: an identification after
`IDENTIFIED_TTL_S`, since a server behind a URL can be replaced; "not identified" after
`UNIDENTIFIED_RETRY_S`, since a server that was down at the first ask may be up now), when a new
client wants it or a cut stream is about to decide with it. Nothing here is billed, written to the ledger, counted
by a breaker, or waited for by a call, except a stream cut after content, which may wait (`wait`,
bounded by `CUT_WAIT_S`) for an identification still under way, since the answer decides whether a
backup can continue the cut answer.

It must never block a call that is not recovering from a cut, never retry within one ask, never read more than
`_MAX_BODY` of an answer, never log a key or a body, hold no reference to a client, and never raise
into a call: any failure is "not identified" (behave as today).
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Deque, Dict, Iterable

from llmroute.providers.server_identity import Identity, identify, probe_paths, probe_request

if TYPE_CHECKING:
    from llmroute.config import Provider

__all__ = ["ServerIdentities", "PROBE_TIMEOUT_S", "CUT_WAIT_S", "IDENTIFIED_TTL_S", "UNIDENTIFIED_RETRY_S", "stale"]

PROBE_TIMEOUT_S = 3.0  # per GET: an info endpoint answers from memory
CUT_WAIT_S = 2.0  # the longest a cut stream waits for an identification still under way
_MAX_BODY = 1 << 20  # a model list or a settings object; more is not one of these servers
IDENTIFIED_TTL_S = 3600.0  # a URL's server may be redeployed as another kind
UNIDENTIFIED_RETRY_S = 60.0  # a server down or starting at the first ask


def stale(identity: Identity, found_at: float, now: float) -> bool:
    """Is an answer found at `found_at` (monotonic seconds) to be asked again at `now`?"""
    return now - found_at >= (IDENTIFIED_TTL_S if identity.server is not None else UNIDENTIFIED_RETRY_S)


def _server_key(provider: "Provider") -> str:
    """One server: its base URL and what it is asked with (the key is hashed, never kept)."""
    request = probe_request(provider, "models")
    material = "\x00".join([provider.base_url.rstrip("/")] + [f"{k}:{v}" for k, v in sorted(request.headers.items())])
    return hashlib.sha256(material.encode("utf-8")).hexdigest()


class _Registry:
    """The process's identifications: server key -> Identity, and the one worker that finds them."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.known: Dict[str, Identity] = {}
        self.found_at: Dict[str, float] = {}  # server key -> monotonic time its answer came
        self.pending: Dict[str, "Provider"] = {}
        self.queue: Deque[str] = deque()
        self.thread: threading.Thread | None = None
        self.pid = os.getpid()

    def after_fork(self) -> None:
        """A forked child has no worker thread: what was under way in the parent is asked again."""
        if self.pid == os.getpid():
            return
        self.pid = os.getpid()
        self.lock = threading.Condition()
        self.pending.clear()
        self.queue.clear()
        self.thread = None

    def want(self, key: str, provider: "Provider", now: float) -> None:
        """Queue `key`'s server unless it is being asked or its answer is still fresh."""
        with self.lock:
            if key in self.pending:
                return
            known = self.known.get(key)
            if known is not None and not stale(known, self.found_at.get(key, now), now):
                return
            self.pending[key] = provider
            self.queue.append(key)
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self.run, name="llmroute-identify", daemon=True)
                self.thread.start()

    def run(self) -> None:
        from llmroute._http.transport import SyncTransport  # the worker's own pool, never a call's

        transport = SyncTransport()
        try:
            while True:
                with self.lock:
                    if not self.queue:
                        self.thread = None
                        return
                    key = self.queue.popleft()
                    provider = self.pending.get(key)
                identity = Identity(None, "not identified")
                if provider is not None:
                    try:
                        identity = _identify(transport, provider)
                    except Exception as exc:  # noqa: BLE001 - never into a call: not identified
                        identity = Identity(None, f"not identified: {type(exc).__name__}")
                with self.lock:
                    self.pending.pop(key, None)
                    self.known[key] = identity  # the old answer stays readable until this one replaces it
                    self.found_at[key] = time.monotonic()
                    self.lock.notify_all()
        finally:
            transport.close()


_REGISTRY = _Registry()


def _identify(transport: Any, provider: "Provider") -> Identity:
    from llmroute._http.bounded import ReadLimits
    from llmroute._http.exchange import Exchange, fetch
    from llmroute._http.timeouts import Timeouts

    timeouts = Timeouts(connect_s=PROBE_TIMEOUT_S, ttft_s=PROBE_TIMEOUT_S, total_s=PROBE_TIMEOUT_S,
                        read_s=PROBE_TIMEOUT_S, read_kind="total")
    limits = ReadLimits(max_response_bytes=_MAX_BODY, max_decoded_bytes=_MAX_BODY, max_sse_line_bytes=_MAX_BODY)
    tried = []
    for path in probe_paths(provider):
        ex = Exchange(probe_request(provider, path), timeouts, limits, provider=provider.name,
                      deployment=provider.name, max_connections=1)
        try:
            reply = fetch(transport, ex)  # no error mapping: a status is an answer too (a 404 says "not me")
        except Exception as exc:  # noqa: BLE001 - refused, unreachable, too large, too slow: says nothing
            tried.append(f"{path}: {type(exc).__name__}")
            if path == "models" and ex.status is None:
                break  # the server is not answering at all: do not knock on every door
            continue
        body = reply.body if reply.status == 200 else b""
        found = identify(path, reply.status, {"server": reply.headers.get("server") or ""}, body)
        if found is not None:
            return found
        tried.append(f"{path}: {reply.status}")
    return Identity(None, "not identified (" + ", ".join(tried) + ")")


class ServerIdentities:
    """One client's view: its provider names -> the process's identifications of their servers."""

    def __init__(self) -> None:
        self._keys: Dict[str, str] = {}  # provider name -> server key
        self._providers: Dict[str, "Provider"] = {}  # provider name -> the provider wanted
        self._closed = False

    def known(self, provider: str) -> Identity | None:
        """The identity found for `provider` (None: not asked, or still under way)."""
        key = self._keys.get(provider)
        return _REGISTRY.known.get(key) if key is not None else None

    def want(self, providers: Iterable["Provider"]) -> None:
        """Identify these providers' servers in the background (each once per process, again when its
        answer is `stale`); returns at once."""
        if self._closed:
            return
        _REGISTRY.after_fork()
        now = time.monotonic()
        for provider in providers:
            key = self._keys.get(provider.name)
            if key is None:
                key = self._keys[provider.name] = _server_key(provider)
            self._providers[provider.name] = provider
            _REGISTRY.want(key, provider, now)

    def refresh(self, providers: Iterable[str]) -> None:
        """Ask again, in the background, those of these (already wanted) providers whose answer is stale."""
        self.want([p for p in (self._providers.get(name) for name in providers) if p is not None])

    def pending(self, providers: Iterable[str]) -> bool:
        _REGISTRY.after_fork()
        return self._is_pending(providers)

    def _is_pending(self, providers: Iterable[str]) -> bool:
        return any(self._keys.get(name) in _REGISTRY.pending for name in providers)

    def wait(self, providers: Iterable[str], timeout_s: float = CUT_WAIT_S) -> None:
        """Block until none of `providers` is being identified, or `timeout_s` passed (sync shells)."""
        names = list(providers)
        deadline = time.monotonic() + timeout_s
        _REGISTRY.after_fork()
        with _REGISTRY.lock:
            while self._is_pending(names):
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                _REGISTRY.lock.wait(left)

    def close(self) -> None:
        """The client closed: it asks nothing more (what the process learned stays known)."""
        self._closed = True
