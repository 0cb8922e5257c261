"""Identifying the servers behind a client's self-hosted providers, once each, off the request path.

`ServerIdentities` is the thin I/O shell around `providers/server_identity.py`: the first call that
may reach a provider of an identifiable kind (`want`) queues it, and one daemon thread asks the
provider's free GET endpoints, on a transport of its own, until one answer says which server it is.
The answer is cached for the client's life (per provider: one base URL is one server). Nothing here
is billed, written to the ledger, counted by a breaker, or waited for by a call, except a stream cut
after content, which may wait `wait` (bounded) for an identification still under way, since the
answer decides whether a backup can continue the cut answer.

It must never block a call that is not recovering from a cut, never retry, never log a key or a
body, and never raise into a call: any failure is "not identified" (behave as today).
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Deque, Dict, Iterable, Optional

from llmroute.providers.server_identity import Identity, identify, probe_paths, probe_request

if TYPE_CHECKING:
    from llmroute.config import Provider

__all__ = ["ServerIdentities", "PROBE_TIMEOUT_S", "CUT_WAIT_S"]

PROBE_TIMEOUT_S = 3.0  # per GET: an info endpoint answers from memory
CUT_WAIT_S = 2.0  # the longest a cut stream waits for an identification still under way
_MAX_BODY = 1 << 20  # a model list or a settings object; more is not one of these servers


class ServerIdentities:
    """provider name -> `Identity`, found in the background. Thread-safe; one per client."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._known: Dict[str, Identity] = {}
        self._pending: Dict[str, "Provider"] = {}
        self._queue: Deque[str] = deque()
        self._thread: Optional[threading.Thread] = None
        self._transport: Any = None
        self._closed = False
        self._pid = os.getpid()

    def known(self, provider: str) -> Optional[Identity]:
        """The identity found for `provider` (None: not asked, or still under way)."""
        return self._known.get(provider)

    def want(self, providers: Iterable["Provider"]) -> None:
        """Identify these providers (each once) in the background; returns at once."""
        self._after_fork()
        with self._lock:
            if self._closed:
                return
            for provider in providers:
                name = provider.name
                if name in self._known or name in self._pending:
                    continue
                self._pending[name] = provider
                self._queue.append(name)
            if self._queue and (self._thread is None or not self._thread.is_alive()):
                self._thread = threading.Thread(target=self._run, name="llmroute-identify", daemon=True)
                self._thread.start()

    def pending(self, providers: Iterable[str]) -> bool:
        self._after_fork()
        return self._is_pending(providers)

    def _is_pending(self, providers: Iterable[str]) -> bool:
        return any(name in self._pending for name in providers)

    def wait(self, providers: Iterable[str], timeout_s: float = CUT_WAIT_S) -> None:
        """Block until none of `providers` is being identified, or `timeout_s` passed (sync shells)."""
        names = list(providers)
        deadline = time.monotonic() + timeout_s
        self._after_fork()
        with self._lock:
            while self._is_pending(names) and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._lock.wait(left)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._queue.clear()
            self._pending.clear()
            self._lock.notify_all()
            transport, self._transport = self._transport, None
        if transport is not None:
            transport.close()

    # ------------------------------------------------------------------ the worker thread

    def _after_fork(self) -> None:
        """A forked child has no worker thread: what was under way in the parent is asked again."""
        if self._pid == os.getpid():
            return
        self._pid = os.getpid()
        self._lock = threading.Condition()
        self._pending.clear()
        self._queue.clear()
        self._thread = None
        self._transport = None

    def _run(self) -> None:
        from llmroute._http.transport import SyncTransport  # the worker's own pool, never a call's

        while True:
            with self._lock:
                if self._closed or not self._queue:
                    return
                name = self._queue.popleft()
                provider = self._pending.get(name)
                if self._transport is None:
                    self._transport = SyncTransport()
                transport = self._transport
            identity = Identity(None, "not identified")
            if provider is not None:
                try:
                    identity = self._identify(transport, provider)
                except Exception as exc:  # noqa: BLE001 - never into a call: not identified
                    identity = Identity(None, f"not identified: {type(exc).__name__}")
            with self._lock:
                self._pending.pop(name, None)
                self._known[name] = identity
                self._lock.notify_all()

    def _identify(self, transport: Any, provider: "Provider") -> Identity:
        from llmroute._http.timeouts import Timeouts

        timeouts = Timeouts(connect_s=PROBE_TIMEOUT_S, ttft_s=PROBE_TIMEOUT_S, total_s=PROBE_TIMEOUT_S,
                            read_s=PROBE_TIMEOUT_S, read_kind="total")
        tried = []
        for path in probe_paths(provider):
            if self._closed:
                break
            try:
                response = transport.open(probe_request(provider, path), timeouts, provider=provider.name,
                                          max_connections=1)
            except Exception as exc:  # noqa: BLE001 - a refused or unreachable endpoint says nothing
                tried.append(f"{path}: {type(exc).__name__}")
                if path == "models":
                    break  # the server is not answering at all: do not knock on every door
                continue
            try:
                body = response.read() if response.status_code == 200 else b""
            finally:
                response.close()
            found = identify(path, response.status_code, {"server": response.headers.get("server") or ""},
                             body[:_MAX_BODY])
            if found is not None:
                return found
            tried.append(f"{path}: {response.status_code}")
        return Identity(None, "not identified (" + ", ".join(tried) + ")")
