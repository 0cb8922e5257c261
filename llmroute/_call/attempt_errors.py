"""What a transport's exception means for one attempt, for the sync and async shells (`client.py`,
`embeddings.py`, `models.py`): which exceptions the transports raise, and the typed error each becomes."""

from __future__ import annotations

import time
from typing import Any, Optional, Tuple

from llmroute import errors as E
from llmroute._call.call import AttemptContext, StreamState, stall_timeout
from llmroute._http.transport import map_transport_error

__all__ = ["transport_error", "sync_network_errors", "network_errors"]


def transport_error(exc: Exception, ctx: AttemptContext, state: Optional[StreamState] = None) -> E.ProviderError:
    """The attempt's typed error for what its transport raised: a read cut at the attempt's deadline is
    the total timeout, a read timeout after content a stall."""
    error = map_transport_error(
        exc, provider=ctx.deployment.provider.name, deployment=ctx.deployment.id, timeouts=ctx.timeouts,
        url=ctx.request.url,
    )
    if isinstance(error, E.APITimeoutError) and error.timeout != "connect" and time.monotonic() >= ctx.deadline - 0.01:
        # The read was cut at the attempt's deadline (transport.py): that is the total timeout.
        return E.APITimeoutError(f"total timeout: the call took longer than {ctx.timeouts.total_s:g}s",
                                 timeout="total", seconds=ctx.timeouts.total_s, provider=error.provider,
                                 deployment=error.deployment)
    if isinstance(error, E.APITimeoutError) and state is not None and state.content_started and ctx.timeouts.stall_s:
        return stall_timeout(ctx)  # the read timeout fired after content: a stall, not a slow first token
    return error


_NETWORK_ERRORS: Optional[Tuple[Any, ...]] = None
_ASYNC_NETWORK_ERRORS: Optional[Tuple[Any, ...]] = None


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
