"""What a call's ending says about the platform: success, a platform failure, the caller's fault, or fatal.

The breaker, the retry decision and the failover planner all read an error through
`classify_failure`, so "what counts" is decided once. Pure functions: no I/O, no state.

- "failure": the platform's side is unwell: 5xx, 429, overload, timeouts, connection errors,
  streams cut mid-way. Counted by the breaker; retried and failed over.
- "caller": the request itself is wrong (400/422, context length, content filter) or the caller
  cancelled it. Never counted by the breaker, never retried unchanged.
- "fatal": a configuration fault (401, 403, 402/billing, 404 unknown model). The deployment leaves
  rotation at once, loudly; the call moves to the next deployment.

404 is fatal, not the caller's: callers name tiers, so an unknown model means the configured model
id is wrong or was retired. Every request to that deployment would fail the same way, and the other
deployments of the tier can still serve the call.
"""

from __future__ import annotations

import builtins
import math
from typing import Literal

from llmroute import errors as E
from llmroute._runtime.secrets import scrub

__all__ = ["Outcome", "classify_failure", "is_retryable_here", "describe_error", "retry_after_of"]

Outcome = Literal["success", "failure", "caller", "fatal"]

_FATAL = (E.AuthenticationError, E.PermissionDeniedError, E.BillingError, E.NotFoundError)
_FAILURE = (
    E.RateLimitError,
    E.OverloadedError,
    E.ServerError,
    E.APITimeoutError,
    E.APIConnectionError,
    E.StreamInterruptedError,
)


def classify_failure(error: BaseException | None) -> Outcome:
    """Classify how a call ended. `None` is a success."""
    if error is None:
        return "success"
    if isinstance(error, _FATAL):
        return "fatal"
    if isinstance(error, E.BadRequestError):  # includes ContextLengthError and ContentFilterError
        return "caller"
    if isinstance(error, _FAILURE):
        return "failure"
    if isinstance(error, E.ProviderError):
        # An error the adapter could not map more precisely: go by the status it saw.
        status = error.status
        if status is not None:
            if status in (401, 403, 402, 404):
                return "fatal"
            if status == 429 or status >= 500 or status == 408:
                return "failure"
            if 400 <= status < 500:
                return "caller"
        return "failure"
    if not isinstance(error, Exception):
        # CancelledError, KeyboardInterrupt, GeneratorExit: the caller stopped, the platform did nothing wrong.
        return "caller"
    if isinstance(error, E.LLMRouteError):
        # Our own refusals (budget, guard, routing) happen before a platform is involved.
        return "caller"
    if isinstance(error, (builtins.TimeoutError, builtins.ConnectionError, OSError)):
        return "failure"
    # An unmapped exception from the transport or a malformed reply: assume the platform's side.
    return "failure"


def is_retryable_here(error: BaseException) -> bool:
    """Whether retrying the same deployment can help (a failure the platform did not mark final)."""
    if classify_failure(error) != "failure":
        return False
    if isinstance(error, E.ProviderError):
        return bool(error.retryable)
    return True


def describe_error(error: BaseException | None, *, limit: int = 200) -> str | None:
    """A short, scrubbed one-line description for health tables and logs."""
    if error is None:
        return None
    text = scrub(f"{type(error).__name__}: {error}").replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def retry_after_of(error: BaseException | None) -> float | None:
    """The platform's Retry-After on this very error, in seconds (finite, >= 0), or None."""
    value = getattr(error, "retry_after", None)
    if value is None:
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(value) or value < 0:
        return None
    return value
