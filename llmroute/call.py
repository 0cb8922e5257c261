"""One call, from `create()`'s arguments to a finished response, as a sans-I/O state machine.

`Client` and `AsyncClient` share this: `prepare_call` validates the arguments and resolves the
target (tier, deployment or "auto"); a `CallRun` hands out attempts, takes their outcomes, and
finishes the response with its route, usage and cost; a `StreamState` turns the bytes of one
streamed attempt into chunks, holding them back until content arrives so that a stream can fail
over exactly like a plain call until the caller has seen a token. The shells only move bytes and
sleep. Times are `time.monotonic()` values passed in; nothing here reads a clock or a socket.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Union

from . import errors as E
from .accounting.plausible import implausible_usage
from .config import Config, Deployment
from .providers import adapter_class
from .providers.base import CallInput, HttpRequest, OpenAICompatAdapter, StreamAssembler, StreamDecoder, chunk_has_content
from .tokens import count_message_tokens, estimate_usage
from .transport import Timeouts
from .types import Attempt, ChatCompletion, ChatCompletionChunk, Route, Usage
from .validate import check_create_args

if TYPE_CHECKING:
    from .engine import Engine

__all__ = ["PreparedCall", "Target", "prepare_call", "CallRun", "AttemptContext", "StreamState", "Send", "Wait"]

@dataclass
class Target:
    """Where a call may go: the tier (if any), its candidate deployments in order, and why."""

    deployments: List[Deployment]
    tier: Optional[str]
    reason: str
    score: Optional[float] = None
    pool: Optional[str] = None
    fallback: List[Deployment] = field(default_factory=list)
    fallback_tier: Optional[str] = None


@dataclass
class PreparedCall:
    model: str
    call: CallInput
    stream: bool
    feature: Optional[str]
    metadata: Dict[str, str]
    pool: str
    timeout_s: Optional[float]
    request_id: str
    target: Optional[Target] = None
    input_tokens: Optional[int] = None

    @property
    def messages(self) -> List[Dict[str, Any]]:
        return self.call.messages


def prepare_call(config: Config, kwargs: Mapping[str, Any]) -> PreparedCall:
    """Check `create()`'s arguments (`validate.check_create_args`): `InvalidRequestError` naming the
    argument, or `TypeError` for an argument `create()` does not take. Nothing is sent before this."""
    args = check_create_args(kwargs, pools=config.sections.pool_names)
    return PreparedCall(
        model=args.model,
        call=CallInput(messages=args.messages, params=args.params, extra_body=args.extra_body,
                       extra_headers=args.extra_headers, extra_query=args.extra_query),
        stream=args.stream,
        feature=args.feature,
        metadata=args.metadata,
        pool=args.pool,
        timeout_s=args.timeout_s,
        request_id=uuid.uuid4().hex,
    )


@dataclass
class AttemptContext:
    """One attempt in flight: where it goes, what is sent, its limits, and its record in the route."""

    deployment: Deployment
    adapter: OpenAICompatAdapter
    request: HttpRequest
    timeouts: Timeouts
    started: float
    deadline: float
    record: Attempt
    usage_reported: bool = False
    trace: Any = None
    partial: Any = None  # the attempt's StreamState, for a stream
    unsent: bool = False  # the request could not be built: nothing reached the platform


@dataclass(frozen=True)
class Send:
    attempt: AttemptContext


@dataclass(frozen=True)
class Wait:
    seconds: float
    deployment: str


Step = Union[Send, Wait]


class CallRun:
    """The attempts of one call. The shells loop: `next_step()`, do the I/O, report back."""

    def __init__(self, engine: "Engine", prepared: PreparedCall, now: float) -> None:
        self.engine = engine
        self.prepared = prepared
        self.started = now
        self.open_attempts: Dict[int, AttemptContext] = {}  # started, not yet ended (exits.end_call)
        self.extras: Any = None
        self.target = prepared.target or engine.resolve_target(prepared)
        self.route = Route(pool=prepared.pool, feature=prepared.feature, request_id=prepared.request_id)
        engine.admit(self, now)  # guards and budgets: may refuse, or downgrade the tier
        target = self.target
        self.route.tier, self.route.reason, self.route.score = target.tier, target.reason, target.score
        if target.pool:
            self.route.pool = target.pool
        budget = prepared.timeout_s if prepared.timeout_s is not None else engine.call_deadline_s(target)
        self.deadline = now + budget
        self.plan = engine.plan_for(self, now)
        self._adapters: Dict[str, OpenAICompatAdapter] = {}
        self._ended = False

    # -- attempts --------------------------------------------------------------------------------
    def next_step(self, now: float) -> Step:
        from .resilience.failover import Exhausted, Wait as PlanWait

        step = self.plan.next_step(now)
        self.engine.on_plan_progress(self)
        if isinstance(step, PlanWait):
            return Wait(step.seconds, step.deployment_id)
        if isinstance(step, Exhausted):
            raise self._exhausted(step, now)
        return Send(self._begin(step, now))

    def _adapter(self, deployment: Deployment) -> OpenAICompatAdapter:
        adapter = self._adapters.get(deployment.id)
        if adapter is None:
            cls = adapter_class(deployment.provider.kind, deployment.provider.protocol)
            adapter = self._adapters[deployment.id] = cls(deployment)
        return adapter

    def _begin(self, step: Any, now: float) -> AttemptContext:
        deployment = self.engine.deployment(step.deployment_id)
        adapter = self._adapter(deployment)
        try:
            request = adapter.build_request(self.prepared.call, stream=self.prepared.stream)
        except E.ProviderError as error:
            # A parameter this platform cannot take: nothing was sent; the caller must change the call.
            self.plan.record(deployment.id, now, error, latency_s=0.0)
            error.attempts = list(self.route.attempts)
            self._end(None, error, now)
            raise
        total = self.prepared.timeout_s if self.prepared.timeout_s is not None else deployment.timeout_s
        total = max(0.001, min(total, step.timeout_s, self.deadline - now))
        if self.prepared.stream and deployment.ttft_timeout_s < total:
            read_s, read_kind = deployment.ttft_timeout_s, "ttft"
        else:
            read_s, read_kind = total, "total"
        timeouts = Timeouts(
            connect_s=min(deployment.connect_timeout_s, total), ttft_s=deployment.ttft_timeout_s, total_s=total,
            read_s=read_s, read_kind=read_kind,
        )
        notes = [n for n, on in (("retry", step.is_retry), ("fallback tier", step.is_fallback),
                                 ("hedge", step.is_hedge)) if on]
        record = Attempt(
            deployment=deployment.id,
            provider=deployment.provider.name,
            model=deployment.model,
            tier=step.tier or deployment.tier or self.target.tier,
            number=len(self.route.attempts) + 1,
            started_at=time.time(),
            note=", ".join(notes) or None,
        )
        self.route.attempts.append(record)
        ctx = AttemptContext(deployment, adapter, request, timeouts, now, now + total, record)
        self.open_attempts[record.number] = ctx
        kind = "hedge" if step.is_hedge else "retry" if step.is_retry else "failover" if record.number > 1 else "first"
        self.engine.on_attempt_start(self, ctx, now, kind)
        return ctx

    def failed(self, ctx: AttemptContext, error: BaseException, now: float, *, content_started: bool = False,
               partial: Optional["StreamState"] = None) -> None:
        """Record a failed attempt; the plan decides what happens next (`next_step`)."""
        rec = ctx.record
        if rec.status != "cancelled":
            rec.status = "interrupted" if content_started else "error"
        rec.error = error
        rec.error_type = type(error).__name__
        rec.error_message = str(error)
        rec.duration_s = now - ctx.started
        if isinstance(error, E.ProviderError):
            rec.http_status = error.status
            rec.request_id = error.request_id
        partial_text = ""
        if partial is not None:
            rec.ttft_s = partial.ttft_s
            usage, estimated = partial.usage_so_far()
            rec.usage, rec.usage_estimated = usage, estimated
            # A stream that delivered tokens was billed for them, even if it broke afterwards.
            rec.billed = partial.content_started or partial.decoder.usage is not None
            partial_text = partial.assembler.all_text()
        self.engine.on_attempt_end(self, ctx, error, now)
        self.open_attempts.pop(rec.number, None)
        self.plan.record(ctx.deployment.id, now, error, ttft_s=rec.ttft_s, latency_s=rec.duration_s,
                         content_started=content_started, partial_text=partial_text)
        if content_started:
            self._end(None, error, now)

    def succeeded(self, ctx: AttemptContext, completion: ChatCompletion, usage_reported: bool, now: float,
                  ttft_s: Optional[float]) -> ChatCompletion:
        rec = ctx.record
        rec.status = "ok"
        rec.duration_s = now - ctx.started
        rec.ttft_s = ttft_s
        doubt = implausible_usage(completion.usage, ctx.deployment.context_window) if usage_reported else None
        if doubt is not None:  # not believed: priced as estimated, and the record says why
            usage_reported = False
            rec.note = ((rec.note + ", ") if rec.note else "") + f"reported usage implausible ({doubt}): estimated"
        if not usage_reported:
            completion.usage = estimate_usage(
                self.prepared.messages,
                "".join((c.message.content or "") for c in completion.choices),
                "".join((c.message.reasoning_content or "") for c in completion.choices),
                prompt_tokens=self.input_tokens(),
            )
        rec.usage = completion.usage
        rec.usage_estimated = not usage_reported
        rec.billed = True
        rec.http_status = 200
        route = self.route
        route.provider = ctx.deployment.provider.name
        route.deployment = ctx.deployment.id
        route.model = ctx.deployment.model
        route.usage_estimated = not usage_reported
        if rec.tier and rec.tier != route.tier and route.tier is not None:
            route.reason = f"{route.reason}; fell back to tier {rec.tier}"
            route.tier = rec.tier
        completion.route = route
        self.engine.on_attempt_end(self, ctx, None, now)
        self.open_attempts.pop(rec.number, None)
        self.plan.record(ctx.deployment.id, now, None, ttft_s=ttft_s, latency_s=rec.duration_s, content_started=True)
        self._end(completion, None, now)
        return completion

    def cancelled(self, ctx: AttemptContext, now: float, partial: Optional["StreamState"] = None, *,
                  status: str = "cancelled", note: str = "cancelled: another attempt answered first",
                  error: Optional[BaseException] = None) -> None:
        """A hedge lost the race and was closed (or, from `exits.end_call`, the call ended with this
        attempt open: `status` says how). Its prompt was sent, so it may be billed: recorded."""
        rec = ctx.record
        rec.status = status
        rec.note = ((rec.note + ", ") if rec.note else "") + note
        rec.duration_s = now - ctx.started
        if error is not None:
            rec.error, rec.error_type, rec.error_message = error, type(error).__name__, str(error)[:300]
        if partial is not None:
            rec.ttft_s = partial.ttft_s
            rec.usage, rec.usage_estimated = partial.usage_so_far()
        elif not ctx.unsent:
            rec.usage = estimate_usage(self.prepared.messages, "", prompt_tokens=self.input_tokens())
            rec.usage_estimated = True
        rec.billed = not ctx.unsent
        self.engine.on_attempt_end(self, ctx, error if status == "error" else None, now)
        self.open_attempts.pop(rec.number, None)
        self.plan.cancel(ctx.deployment.id, now, note=note)

    def hedge_plan(self, ctx: AttemptContext, now: float) -> Any:
        """When to race a second deployment against this attempt (None: this tier does not hedge)."""
        policy = self.engine.policy(ctx.deployment.id)
        if policy.hedge_after_ms is None or ctx.record.note and "hedge" in ctx.record.note:
            return None
        from .resilience.hedge import HedgePlan

        engine = self.engine
        return HedgePlan.start(
            policy, now=now, budget=engine.retry_budgets.hedge(self.target.tier or ctx.deployment.id, policy),
            recent_ttft_s=engine.breakers.breaker(ctx.deployment.id).recent_ttft(),
        )

    def hedge(self, now: float) -> Optional[AttemptContext]:
        """Start the hedge attempt now, if the plan has a candidate for it."""
        step = self.plan.hedge_step(now)
        self.engine.on_plan_progress(self)
        return self._begin(step, now) if step is not None else None

    def end(self, completion: Optional[ChatCompletion], error: Optional[BaseException], now: float) -> None:
        """End the call's span (once; later calls do nothing)."""
        self._end(completion, error, now)

    def _end(self, completion: Optional[ChatCompletion], error: Optional[BaseException], now: float) -> None:
        if not self._ended:
            self._ended = True
            self.engine.on_call_end(self, completion, error, now)

    def input_tokens(self) -> int:
        if self.prepared.input_tokens is None:
            self.prepared.input_tokens = count_message_tokens(self.prepared.messages)
        return self.prepared.input_tokens

    def _exhausted(self, step: Any, now: float) -> BaseException:
        """The error the caller gets when the plan gives up, carrying the route's attempts."""
        error = step.error
        sent = [a for a in self.route.attempts if a.status not in ("skipped",)]
        if step.reason in ("all_failed", "deadline"):
            deployments = {a.deployment for a in sent}
            last = sent[-1].error if sent else None
            if len(deployments) == 1 and isinstance(last, E.ProviderError):
                # Every try went to one deployment: its own typed error says the most (a 401 stays
                # an AuthenticationError); the attempts ride along.
                error = last
        # The plan's errors (ProviderError, AllDeploymentsFailedError) all carry `.attempts`: the
        # route's, which also show skips, costs and notes.
        error.attempts = list(self.route.attempts)
        self._end(None, error, now)
        return error


class StreamState:
    """The bytes of one streamed attempt -> chunks for the caller, held back until content arrives."""

    def __init__(self, run: CallRun, ctx: AttemptContext) -> None:
        self.run = run
        self.ctx = ctx
        ctx.partial = self
        self.decoder: StreamDecoder = ctx.adapter.stream_decoder(run.prepared.call)
        self.assembler = StreamAssembler()
        self.held: List[ChatCompletionChunk] = []
        self.content_started = False
        self.ttft_s: Optional[float] = None
        self.ended = False

    def feed(self, data: bytes, now: float) -> List[ChatCompletionChunk]:
        """Chunks the caller may see now ([] while content has not started). Raises typed errors."""
        chunks = self.decoder.feed(data)
        return self._take(chunks, now)

    def _take(self, chunks: Sequence[ChatCompletionChunk], now: float) -> List[ChatCompletionChunk]:
        out: List[ChatCompletionChunk] = []
        for chunk in chunks:
            self.assembler.add(chunk)
            if not self.content_started and chunk_has_content(chunk):
                self.content_started = True
                self.ttft_s = now - self.ctx.started
                self.note_first_chunk(now)
            if self.content_started:
                if self.held:
                    out.extend(self.held)
                    self.held = []
                out.append(chunk)
            else:
                self.held.append(chunk)
        if not self.content_started and now - self.ctx.started > self.ctx.timeouts.ttft_s:
            raise E.TimeoutError(
                f"time-to-first-token timeout: no content within {self.ctx.timeouts.ttft_s:g}s",
                timeout="ttft", seconds=self.ctx.timeouts.ttft_s,
                provider=self.ctx.deployment.provider.name, deployment=self.ctx.deployment.id,
            )
        if now > self.ctx.deadline:
            raise E.TimeoutError(
                f"total timeout: the call took longer than {self.ctx.timeouts.total_s:g}s", timeout="total",
                seconds=self.ctx.timeouts.total_s, provider=self.ctx.deployment.provider.name,
                deployment=self.ctx.deployment.id,
            )
        return out

    def eof(self, now: float) -> List[ChatCompletionChunk]:
        """The body ended. A stream cut before its end marker is an error, not a short answer."""
        out = self._take(self.decoder.close(), now)
        if not self.decoder.complete:
            raise E.ConnectionError(
                "stream ended before the platform's end marker (cut mid-way)",
                provider=self.ctx.deployment.provider.name, deployment=self.ctx.deployment.id,
            )
        self.ended = True
        if self.held:
            out.extend(self.held)
            self.held = []
        return out

    def usage_so_far(self) -> tuple[Usage, bool]:
        if self.decoder.usage is not None:
            return self.decoder.usage, False
        return (
            estimate_usage(
                self.run.prepared.messages, self.assembler.all_text(), self.assembler.all_reasoning(),
                prompt_tokens=self.run.input_tokens(),
            ),
            True,
        )

    def note_first_chunk(self, now: float) -> None:
        self.run.engine.on_first_chunk(self.ctx, now)

    def interrupted(self, error: BaseException) -> E.StreamInterruptedError:
        """After content reached the caller: no failover, no replay; say what arrived."""
        cause = f"{type(error).__name__}: {error}"
        status = getattr(error, "status", None)
        return E.StreamInterruptedError(
            f"stream interrupted after content had started ({cause})",
            partial_text=self.assembler.all_text(),
            attempts=self.run.route.attempts,
            provider=self.ctx.deployment.provider.name,
            deployment=self.ctx.deployment.id,
            status=status,
            request_id=getattr(error, "request_id", None),
        )

    def finish(self, now: float) -> ChatCompletion:
        usage, estimated = self.usage_so_far()
        completion = self.assembler.completion(usage, self.ctx.deployment.model)
        return self.run.succeeded(self.ctx, completion, not estimated, now, self.ttft_s)
