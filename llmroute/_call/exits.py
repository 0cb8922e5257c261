"""How a call ended, as a status: the names the ledger, the spans and `CallRun.settle` use. Sans-I/O.

A call's attempts normally end through `CallRun.succeeded`, `failed` or `cancelled`. Anything else
(the caller's `break` and a dropped stream, a `KeyboardInterrupt`, an asyncio cancellation or
`wait_for` timeout, an error in llmroute's own code) ends the call through `CallRun.settle`, the one
place a call is settled, which the shells call on every exit path, as often as they like; this module
only names the ways a call can end (`exit_status` says which one an exception was).

Ledger statuses: `ok` (completed), `error`, `interrupted` (the platform broke a stream after
content), `cancelled` (the caller closed it, a hedge lost, `KeyboardInterrupt`, asyncio
cancellation), `abandoned` (a stream garbage-collected unclosed, a call whose client was closed
while it ran).
"""

from __future__ import annotations

from typing import Literal

from llmroute import errors as E

ExitStatus = Literal["ok", "error", "interrupted", "cancelled", "abandoned"]  # EXIT_STATUSES, as a type

__all__ = ["exit_status", "EXIT_STATUSES", "ExitStatus"]

EXIT_STATUSES = ("ok", "error", "interrupted", "cancelled", "abandoned")


def exit_status(exc: BaseException | None) -> ExitStatus:
    """How a call that ended with `exc` ended: None is a stream dropped unclosed ("abandoned")."""
    if exc is None or isinstance(exc, E.ClientClosedError):  # dropped unclosed, or its client closed mid-call
        return "abandoned"
    if isinstance(exc, (KeyboardInterrupt, GeneratorExit)) or type(exc).__name__ == "CancelledError":
        return "cancelled"
    return "error"
