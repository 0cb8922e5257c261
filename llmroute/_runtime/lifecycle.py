"""A client's life: open, forked, closed. No I/O of its own.

`Client` and `AsyncClient` ask `ClientLife.check()` before each call:

- after `close()`: `ClientClosedError`;
- in a child process after `fork()`: `check()` returns True once, and the client rebuilds its
  connection pools there (the parent's sockets are never written from the child). The locks of its
  services and the ledger's writer thread are renewed at the fork itself (`forksafe`, docs/fork.md);
- an `AsyncClient` serves any event loop: its transport keeps one pool per loop (llmroute/_http/
  transport.py); `loop` is the loop of the latest call.

A client dropped without `close()` is closed when it is garbage-collected, with a `ResourceWarning`
as the standard library's files and sockets do (`warn_unclosed`).

`OpenStreams` keeps (weakly) the streams a client handed out that are still open: `close()` ends
them as `abandoned`, and so does an exit hook at interpreter exit, while imports and threads still
work (a stream left to the interpreter's last collection could not even count its prompt's
tokens). Nothing here may block: ending a stream records its row and gives back what it holds.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import warnings
import weakref
from typing import Any

from llmroute import errors as E

__all__ = ["ClientLife", "warn_unclosed", "OpenStreams", "start_daemon"]

log = logging.getLogger("llmroute")


class ClientLife:
    __slots__ = ("name", "pid", "closed", "loop")

    def __init__(self, name: str) -> None:
        self.name = name
        self.pid = os.getpid()
        self.closed = False
        self.loop: Any = None

    def check(self, loop: Any | None = None) -> bool:
        """Raise if the client may not make a call now; True if this is a forked child's first call."""
        if self.closed:
            raise E.ClientClosedError(f"this {self.name} is closed: create a new one to make more calls")
        forked = os.getpid() != self.pid
        if forked:  # the parent's event loop does not run here: bind to the child's
            self.pid, self.loop = os.getpid(), None
        if loop is not None:
            self.loop = loop  # the loop of the latest call (any loop may call: pools are per loop)
        return forked


def start_daemon(target: Any, name: str) -> threading.Thread | None:
    """A started daemon thread running `target`, or None when the interpreter is exiting: a thread
    started during finalisation never runs (and `start()` waits for it for ever), and Python 3.12+
    refuses to start one at exit. Callers that get None do the work in place, within a bound."""
    import sys

    if sys.is_finalizing():
        return None
    thread = threading.Thread(target=target, name=name, daemon=True)
    try:
        thread.start()
    except RuntimeError:  # "can't create new thread at interpreter shutdown"
        return None
    return thread


def warn_unclosed(client: object) -> None:
    warnings.warn(f"unclosed {client!r}: call close() (or use it as a context manager); closed now by the "
                  f"garbage collector", ResourceWarning, stacklevel=2, source=client)


_everywhere: "weakref.WeakSet[Any]" = weakref.WeakSet()  # every client's open streams, for the exit hook
_hook_lock = threading.Lock()
_hooked = False


def _abandon(streams: list[Any]) -> None:
    for stream in streams:
        try:
            stream.abandon()
        except Exception:  # noqa: BLE001 - every other stream must still be ended
            log.exception("llmroute: ending an open stream failed")


def _end_open_streams_at_exit() -> None:
    pid = os.getpid()
    _abandon([s for s in list(_everywhere) if getattr(s, "_opened_in", pid) == pid])


class OpenStreams:
    """A client's streams still open (weakly held): each has `abandon()`, which ends it as
    `abandoned` if it is still open and does nothing otherwise. A forked child never ends its
    parent's streams (their calls, slots and rows are the parent's)."""

    __slots__ = ("_streams", "_pid")

    def __init__(self) -> None:
        self._streams: "weakref.WeakSet[Any]" = weakref.WeakSet()
        self._pid = os.getpid()

    def _mine(self) -> "weakref.WeakSet[Any]":
        if os.getpid() != self._pid:  # a forked child: the parent's streams are not its own
            self._streams, self._pid = weakref.WeakSet(), os.getpid()
        return self._streams

    def add(self, stream: Any) -> None:
        global _hooked
        if not _hooked:
            with _hook_lock:
                if not _hooked:
                    atexit.register(_end_open_streams_at_exit)
                    _hooked = True
        stream._opened_in = os.getpid()
        self._mine().add(stream)
        _everywhere.add(stream)

    def abandon_all(self) -> None:
        """The client is closing: every stream it handed out that is still open ends as `abandoned`."""
        _abandon(list(self._mine()))
