"""What a client writes down about its calls: one ledger record per attempt, budget spend, spans.

`CallRecorder` observes a call through its events (`call_started`, `attempt_skipped`,
`attempt_started`, `first_chunk`, `attempt_ended`, `call_ended`; `cache_outcome` when the response
cache was in play, `cache_hit` for a call it answered). It reads the run's state and never changes
it: the run owns its route, attempts and costs, and hands over what it decided (the attempt's priced
`Cost` is already on its record). The ledger sink does its file and network writes on its own
thread, off the request path.
"""

from __future__ import annotations

import time
from decimal import Decimal
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Protocol, Tuple
from urllib.parse import urlsplit

from llmroute._call.prepared import PreparedCall, Target
from llmroute._http.request import HttpRequest
from llmroute.config import Deployment

if TYPE_CHECKING:
    from llmroute.accounting.cost import Cost
    from llmroute.types import Attempt, Route


class AttemptContext(Protocol):
    """What the recorder reads of an attempt (`call.AttemptContext` is one)."""

    deployment: Deployment
    record: "Attempt"
    request: HttpRequest
    trace: Any


class CallRun(Protocol):
    """What the recorder reads of a call (`call.CallRun` is one)."""

    prepared: PreparedCall
    route: "Route"
    target: Target
    trace: Any

__all__ = ["CallRecorder", "LEDGER_STATUSES"]

# An attempt record's status -> the ledger's status column.
LEDGER_STATUSES = {"ok": "ok", "interrupted": "interrupted", "cancelled": "cancelled", "abandoned": "abandoned"}


@lru_cache(maxsize=256)
def _server(url: str) -> Tuple[str | None, int | None]:
    """A request URL's host and port, for the spans (a deployment's URLs repeat: split once)."""
    parts = urlsplit(url)
    return parts.hostname, parts.port


class CallRecorder:
    """The ledger sink, the budget book's spend and the telemetry spans, fed from calls' events."""

    def __init__(self, *, ledger: Any, budget_book: Any, telemetry: Any, breakers: Any) -> None:
        from llmroute.accounting.ledger import LedgerRecord  # loaded with the first client: import llmroute stays light
        from llmroute._runtime.telemetry import _NOOP_ATTEMPT, _NOOP_CALL

        self._record = LedgerRecord
        # What `telemetry.start_call` returns when nothing records (no SDK, or telemetry off): the
        # spans' arguments are not gathered for it.
        self._noop_call, self._noop_attempt = _NOOP_CALL, _NOOP_ATTEMPT
        self.ledger = ledger
        self.budget_book = budget_book
        self.telemetry = telemetry
        self.breakers = breakers  # read for the breaker state spans carry

    def call_started(self, run: "CallRun", now: float) -> Any:
        """Open the call's span (returned; the run keeps it)."""
        target = run.target
        deps = target.deployments or target.fallback
        first = deps[0] if deps else None
        prepared = run.prepared
        return self.telemetry.start_call(
            request_model=first.model if first is not None else prepared.model,
            now=now,
            stream=prepared.stream,
            provider_name=first.provider.kind if first is not None else None,
            tier=target.tier,
            feature=prepared.feature,
            pool=run.route.pool,
            route_reason=target.reason,
            requested_model=prepared.model,
            request_params=prepared.call.params,
            messages=prepared.messages,
            operation=prepared.operation,
        )

    def cache_outcome(self, run: "CallRun", outcome: str, similarity: float | None) -> None:
        """The response cache was in play and missed (or was bypassed): the call's span says so."""
        if hasattr(run.trace, "set_cache"):
            run.trace.set_cache(outcome, similarity)

    def attempt_skipped(self, run: "CallRun", attempt: "Attempt", provider_kind: str | None) -> None:
        if run.trace is self._noop_call:
            return
        run.trace.skip(deployment=attempt.deployment, reason=attempt.note or "skipped", provider_name=provider_kind,
                       breaker_state=self.breakers.breaker(attempt.deployment).state)

    def attempt_started(self, run: "CallRun", ctx: "AttemptContext", now: float, kind: str) -> Any:
        """Open the attempt's span (returned; the attempt keeps it)."""
        if run.trace is self._noop_call:
            return self._noop_attempt
        host, port = _server(ctx.request.url)
        return run.trace.start_attempt(
            now=now, attempt_number=ctx.record.number, provider_name=ctx.deployment.provider.kind,
            deployment=ctx.deployment.id, request_model=ctx.deployment.model, server_address=host,
            server_port=port, breaker_state=self.breakers.breaker(ctx.deployment.id).state, kind=kind,
        )

    def first_chunk(self, ctx: "AttemptContext", now: float) -> None:
        if ctx.trace is not None:
            ctx.trace.first_chunk(now)

    def attempt_ended(self, run: "CallRun", ctx: "AttemptContext", error: BaseException | None, now: float) -> None:
        """The attempt's ledger record (priced: `ctx.record.cost`), its budget spend, its span's end."""
        rec = ctx.record
        usage = rec.usage if rec.billed else None
        assert rec.cost is not None  # CallRun._attempt_ended prices the attempt before it calls this
        record = self._record.from_cost(
            rec.cost,
            ts=time.time(),
            request_id=run.prepared.request_id,
            attempt=rec.number,
            feature=run.prepared.feature,
            metadata=dict(run.prepared.metadata),
            tier=rec.tier,
            pool=run.route.pool,
            provider=ctx.deployment.provider.name,
            provider_kind=ctx.deployment.provider.kind,
            deployment=ctx.deployment.id,
            model=ctx.deployment.model,
            status=LEDGER_STATUSES.get(rec.status, "error"),
            error_type=type(error).__name__ if error is not None else None,
            ttft_ms=rec.ttft_s * 1000 if rec.ttft_s is not None else None,
            latency_ms=rec.duration_s * 1000,
            router_score=run.route.score,
            usage_estimated=rec.usage_estimated,
            cache=run.route.cache,
            recovery=rec.recovery,
            queued_ms=run.route.queued_s * 1000 if run.route.queued_s else None,
            cost_saved=None,  # every column named: the record is made from these values as they are
        )
        if self.ledger is not None:
            self.ledger.write(record)
        if self.budget_book is not None:
            self.budget_book.record_ledger(record)
        if ctx.trace is not None and ctx.trace is not self._noop_attempt:
            ctx.trace.end(now=now, response_model=ctx.deployment.model,
                          input_tokens=usage.prompt_tokens if usage else None,
                          output_tokens=usage.completion_tokens if usage else None, error=error,
                          cancelled=rec.status in ("cancelled", "abandoned"))

    def cache_hit(self, prepared: "PreparedCall", route: "Route", completion: Any, entry: Any, *, outcome: str | None,
                  similarity: float | None, started_at: float, now: float) -> None:
        """A call answered from the response cache: one ledger row (cost 0, `cost_saved`) and one span."""
        latency_s = now - started_at
        priced = entry.cost is not None
        zero = Decimal(0) if priced else None
        if self.ledger is not None:
            self.ledger.write(self._record(
                ts=time.time(), request_id=prepared.request_id, attempt=1, feature=prepared.feature,
                metadata=dict(prepared.metadata), tier=route.tier, pool=route.pool, provider=entry.provider,
                provider_kind=entry.provider_kind, deployment=entry.deployment, model=entry.model,
                cost=zero, currency=entry.currency, priced=priced, status="ok",
                latency_ms=latency_s * 1000, ttft_ms=latency_s * 1000 if prepared.stream else None,
                router_score=route.score, cache=outcome, cost_saved=entry.cost,
            ))
        trace = self.telemetry.start_call(
            request_model=entry.model or prepared.model, now=started_at, stream=prepared.stream,
            provider_name=entry.provider_kind, tier=route.tier, feature=prepared.feature, pool=route.pool,
            route_reason=route.reason, requested_model=prepared.model, request_params=prepared.call.params,
            messages=prepared.messages,
        )
        if hasattr(trace, "set_cache"):
            trace.set_cache(outcome, similarity)
        trace.end(now=now, response_model=entry.model, input_tokens=0, output_tokens=0, cost=zero,
                  currency=entry.currency, finish_reasons=[c.finish_reason for c in completion.choices if c.finish_reason],
                  response_id=completion.id, output_messages=[c.message for c in completion.choices])

    def call_ended(self, run: "CallRun", completion: Any, total: "Cost" | None, error: BaseException | None,
                   now: float) -> None:
        """End the call's span with what the call produced and cost."""
        if run.trace is self._noop_call:
            return
        usage = completion.usage if completion is not None else None
        run.trace.end(
            now=now,
            response_model=run.route.model,
            input_tokens=usage.prompt_tokens if usage else None,
            output_tokens=usage.completion_tokens if usage else None,
            cache_read_input_tokens=usage.prompt_tokens_details.cached_tokens if usage else None,
            reasoning_output_tokens=usage.completion_tokens_details.reasoning_tokens if usage else None,
            cost=total.amount if total is not None else None,
            currency=total.currency if total is not None else None,
            cost_estimated=total.estimated if total is not None else None,
            error=error,
            finish_reasons=[c.finish_reason for c in completion.choices if c.finish_reason] if completion else None,
            response_id=completion.id if completion is not None else None,
            output_messages=[c.message for c in completion.choices] if completion is not None else None,
        )
