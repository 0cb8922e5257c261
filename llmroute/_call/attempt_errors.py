"""What a transport's exception means for one attempt of a call, for the sync and async shells
(`client.py`, `embeddings.py`): the typed error it becomes, stalls included. Which exceptions the
transports raise is `_http/exchange.py`'s to say (re-exported here)."""

from __future__ import annotations


from llmroute import errors as E
from llmroute._call.call import AttemptContext, StreamState, stall_timeout
from llmroute._http.exchange import at_deadline, network_errors, sync_network_errors
from llmroute._http.transport import map_transport_error

__all__ = ["transport_error", "sync_network_errors", "network_errors"]


def transport_error(exc: Exception, ctx: AttemptContext, state: StreamState | None = None) -> E.ProviderError:
    """The attempt's typed error for what its transport raised: a read cut at the attempt's deadline is
    the total timeout (`exchange.at_deadline`), a read timeout after content a stall."""
    error = map_transport_error(exc, provider=ctx.deployment.provider.name, deployment=ctx.deployment.id,
                                timeouts=ctx.timeouts, url=ctx.request.url)
    total = at_deadline(error, ctx.timeouts, ctx.deadline)
    if total is not error:  # cut at the deadline: the total timeout, content or not
        return total
    if isinstance(error, E.APITimeoutError) and state is not None and state.content_started and ctx.timeouts.stall_s:
        return stall_timeout(ctx)  # the read timeout fired after content: a stall, not a slow first token
    return error
