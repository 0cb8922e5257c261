"""The one place that ends what a call still holds, however the call ended. Sans-I/O.

A call's attempts normally end through `CallRun.succeeded`, `failed` or `cancelled`. Anything else
(the caller's `break` and a dropped stream, a `KeyboardInterrupt`, an asyncio cancellation or
`wait_for` timeout, an error in llmroute's own code) reaches `end_call`, which the shells call on
every exit path, as often as they like:

- every attempt still open gets its ledger row, budget charge and span, with the status saying how
  it ended (`exit_status`), and the prompt billed as an estimate (it was sent);
- the plan gives back every concurrency slot, limit lease and breaker permit it still holds
  (`FailoverPlan.cancel`, which releases each exactly once);
- the call's span ends.

Attempts that already ended are left alone, so a second `end_call` does nothing.

Ledger statuses: `ok` (completed), `error`, `interrupted` (the platform broke a stream after
content), `cancelled` (the caller closed it, a hedge lost, `KeyboardInterrupt`, asyncio
cancellation), `abandoned` (a stream garbage-collected unclosed).
"""

from __future__ import annotations

import logging
from typing import Any, Literal, Mapping, Protocol

ExitStatus = Literal["ok", "error", "interrupted", "cancelled", "abandoned"]  # EXIT_STATUSES, as a type

class SettlingRun(Protocol):
    """What `end_call` needs of a call (`call.CallRun` is one): its open attempts, its plan, its end."""

    @property
    def in_flight(self) -> Mapping[int, Any]: ...

    @property
    def plan(self) -> Any: ...

    def cancelled(self, ctx: Any, now: float, partial: Any = None, why: str = ..., *, status: ExitStatus = ...,
                  error: BaseException | None = None) -> None: ...

    def end(self, completion: Any, error: BaseException | None, now: float) -> None: ...

__all__ = ["end_call", "exit_status", "EXIT_STATUSES", "ExitStatus"]

log = logging.getLogger("llmroute")

EXIT_STATUSES = ("ok", "error", "interrupted", "cancelled", "abandoned")


def exit_status(exc: BaseException | None) -> ExitStatus:
    """How a call that ended with `exc` ended: None is a stream dropped unclosed ("abandoned")."""
    if exc is None:
        return "abandoned"
    if isinstance(exc, (KeyboardInterrupt, GeneratorExit)) or type(exc).__name__ == "CancelledError":
        return "cancelled"
    return "error"


def end_call(run: SettlingRun, status: ExitStatus, error: BaseException | None, now: float) -> None:
    """End every attempt of `run` still in flight as `status`, give back what the plan holds, end the call."""
    what = type(error).__name__ if error is not None else "garbage-collected unclosed"
    for ctx in list(run.in_flight.values()):
        try:
            run.cancelled(ctx, now, partial=ctx.partial, why=f"the call ended ({what})", status=status, error=error)
        except Exception:  # noqa: BLE001 - the releases below must still happen
            log.exception("llmroute: recording an attempt that ended as %s failed", status)
    for deployment_id in run.plan.outstanding:
        run.plan.cancel(deployment_id, now, note=f"{status}: the call ended")
    run.end(None, error, now)
