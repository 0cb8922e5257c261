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
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Optional

from llmroute import errors as E

__all__ = ["ClientLife", "warn_unclosed"]


class ClientLife:
    __slots__ = ("name", "pid", "closed", "loop")

    def __init__(self, name: str) -> None:
        self.name = name
        self.pid = os.getpid()
        self.closed = False
        self.loop: Any = None

    def check(self, loop: Optional[Any] = None) -> bool:
        """Raise if the client may not make a call now; True if this is a forked child's first call."""
        if self.closed:
            raise E.ClientClosedError(f"this {self.name} is closed: create a new one to make more calls")
        forked = os.getpid() != self.pid
        if forked:  # the parent's event loop does not run here: bind to the child's
            self.pid, self.loop = os.getpid(), None
        if loop is not None:
            self.loop = loop  # the loop of the latest call (any loop may call: pools are per loop)
        return forked


def warn_unclosed(client: object) -> None:
    warnings.warn(f"unclosed {client!r}: call close() (or use it as a context manager); closed now by the "
                  f"garbage collector", ResourceWarning, stacklevel=2, source=client)
