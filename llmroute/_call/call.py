"""One call, from `create()`'s arguments to a finished response, as a sans-I/O state machine.

`Client` and `AsyncClient` share this: `prepare_call` validates the arguments and resolves the
target (tier, deployment or "auto"); a `CallRun` hands out attempts, takes their outcomes, and
finishes the response with its route, usage and cost; a `StreamState` turns the bytes of one
streamed attempt into chunks, holding them back until content arrives so that a stream can fail
over exactly like a plain call until the caller has seen a token. The shells only move bytes and
sleep. Times are passed in: `now` arguments are monotonic seconds, and the run's `wall` callable
(the shells pass `time.time`) stamps attempt records; nothing here reads a clock or a socket.

A `CallRun` owns everything about its call (target, route, attempts, plan, answer, costs). The
client's shared services (`engine.Engine`: breakers, limits, budgets, prices) answer its questions,
and the `recorder.CallRecorder` (ledger, budget spend, spans) is told about its events; neither
changes the run.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, Generator, Iterable, List, Mapping, Sequence, Union

from llmroute import errors as E
from llmroute.accounting.frozen import Fill
from llmroute.accounting.plausible import implausible_usage
from llmroute.config import Deployment
from llmroute._call.exits import ExitStatus, exit_status
from llmroute.providers import adapter_class
from llmroute.providers.base import (OpenAICompatAdapter, StreamAssembler, StreamDecoder, chunk_has_content, for_caller,
                                     usage_chunks_wanted)
from llmroute._http.request import HttpRequest
from llmroute.providers.prefill import continuation_call
from llmroute.providers.registry import KINDS
from llmroute.resilience.failover import Wait
from llmroute.providers.sendable import check_headers, encode_body
from llmroute._call.prepared import PreparedCall, Target, prepare_call
from llmroute._call.targets import resolve_target
from llmroute._call.answer_bounds import AnswerMeter, asked_max_tokens
from llmroute._http.bounded import DEFAULT_READ_LIMITS, ReadLimits
from llmroute._http.timeouts import Timeouts
from llmroute.accounting.tokens import (cache_write_tokens, count_message_tokens, estimate_usage, explicit_cache,
                                       thinking_requested)
from llmroute.types import Attempt, ChatCompletion, ChatCompletionChunk, CompletionTokensDetails, PromptTokensDetails, Route, Usage

logger = logging.getLogger("llmroute._call.call")
_FILL_TIMEOUTS = Fill(Timeouts)

if TYPE_CHECKING:
    from llmroute.accounting.cost import Cost
    from llmroute._call.engine import Admission, Engine
    from llmroute._http.sse import SSEEvent
    from llmroute.resilience.failover import Exhausted

# Modules the call path uses on every call but `import llmroute` does not load (the resilience package
# loads with the first client, the router's estimate with the first call): bound once by the first
# `CallRun`, so a call does not pay a function-local import each time.
_plan_steps: Any = None  # llmroute.resilience.failover
_classifier: Any = None  # llmroute.routing.token_estimate


def _bind_lazy_modules() -> None:
    global _plan_steps, _classifier
    if _classifier is None:
        from llmroute.resilience import failover  # loaded with the first client
        from llmroute.routing import token_estimate as classifier  # the prompt estimate, not the classifier's tables

        _plan_steps, _classifier = failover, classifier


__all__ = ["PreparedCall", "Target", "prepare_call", "CallRun", "AttemptContext", "StreamState", "Step", "Wait"]

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
    streamed: bool = False  # sent as a stream (every stream, and plain calls read as streams)
    continuation: bool = False  # continues the partial answer of a cut attempt
    hedge: bool = False  # raced against a slow attempt (a hedge is not hedged again)
    replay_of: str | None = None  # a replay: the text the caller saw, to be repeated before anything is delivered
    resume_offset: int = 0  # a continuation: where its text begins in the answer
    partial: Any = None  # the attempt's StreamState, when read as a stream
    unsent: bool = False  # the request could not be built: nothing reached the platform
    reasoned: bool = False  # the answer carried reasoning text (thinking happened, whatever the usage says)

    def not_sent(self) -> None:
        """The transport refused the request before sending it: nothing reached the platform."""
        self.unsent = True

    def connected(self, connect_s: float | None) -> None:
        """The transport's connect time for this attempt (None: a pooled connection was reused)."""
        self.record.connect_s = connect_s

    def correct_request(self, error: E.ProviderError) -> bool:
        """The platform refused a parameter its adapter can drop or rename (`request_after_error`):
        the attempt's request becomes the corrected one (True), to be sent once more."""
        corrected = self.adapter.request_after_error(error, self.request)
        if corrected is None:
            return False
        self.request = corrected
        return True


# What `CallRun.next_step` tells the shells: send this attempt now, or sleep (the plan's own `Wait`,
# with its seconds, deployment and reason); the plan's `Exhausted` is raised as the call's error.
Step = Union[AttemptContext, "Wait"]


class CallRun:
    """The attempts of one call. The shells loop: `next_step()`, do the I/O, report back."""

    def __init__(self, engine: "Engine", prepared: PreparedCall, now: float, *, wall: Callable[[], float]) -> None:
        self.engine = engine
        self.recorder = engine.recorder
        self.prepared = prepared
        self.started = now
        self.wall = wall
        routed = prepared.target or resolve_target(engine.config, prepared)
        # Guards and budgets: may refuse (raises), cap the output, or downgrade the tier.
        self.admission: "Admission" = engine.admit(prepared, routed, self.input_tokens, now, wall())
        self.target = self.admitted_target(routed, self.admission.target)
        if self.admission.max_tokens is not None:
            self.apply_output_cap(self.admission.max_tokens)
        target = self.target
        self.route = Route._filled(pool=target.pool or prepared.pool, feature=prepared.feature,
                                   request_id=prepared.request_id, tier=target.tier, reason=target.reason,
                                   score=target.score)
        budget = prepared.timeout_s if prepared.timeout_s is not None else engine.call_deadline_s(target)
        self.deadline = now + budget
        self.plan = engine.plan_for(prepared, target, self.admission, self.input_tokens, self.deadline, now, wall=wall)
        # One record per attempt: the plan writes the route's lines (sends and skips), the run completes
        # the ones it sends (usage, cost, the error's details).
        self.route.attempts = self.plan.attempts
        if self.plan.balance_choice is not None:
            self.route.balance = self.plan.balance_choice.text
        _bind_lazy_modules()
        self._announced = 0  # the route's lines the recorder has been told of (skips: `_announce_skips`)
        self.trace = self.recorder.call_started(self, now)
        self.costs: List["Cost"] = []  # billed attempts' costs
        self._adapters: Dict[str, OpenAICompatAdapter] = {}
        self._ended = False
        self.in_flight: Dict[int, AttemptContext] = {}  # attempts started and not yet ended, by number
        # The answer across attempts: a cut answer finished on another deployment is one answer. The
        # assemblers of the attempts cut after content, joined only when a cut needs it (`answer`).
        self._answer_parts: List[StreamAssembler] = []
        self.earlier_usage: List[Usage] = []  # usage of attempts cut after content (billed)

        if prepared.cache is not None:  # the route (and the span) say what the cache did
            self.route.cache = prepared.cache.outcome
            self.route.cache_similarity = prepared.cache.similarity  # a semantic lookup's best, under the threshold
            self.recorder.cache_outcome(self, prepared.cache.outcome, prepared.cache.similarity)

    @property
    def answer(self) -> StreamAssembler:
        """The answer across the attempts cut after content so far."""
        return StreamAssembler.joined(self._answer_parts)

    def admitted_target(self, routed: Target, admitted: Target) -> Target:
        """The target the call goes to after admission (a budget's downgrade, when it made one)."""
        return admitted

    def apply_output_cap(self, max_tokens: int) -> None:
        """A guard capped the output of a call that asked for no cap."""
        self.prepared.call.params["max_tokens"] = max_tokens

    # -- attempts --------------------------------------------------------------------------------
    def next_step(self, now: float) -> Step:
        step = self.plan.next_step(now)
        self._announce_skips()
        if self.plan.queued_s != self.route.queued_s:  # the time it waited in the client-side queue (rarely any)
            self.route.queued_s = self.plan.queued_s
        if (choice := self.plan.new_choice()) is not None:
            self.route.balance = choice.text  # slow start held the first choice back
        if isinstance(step, Wait):
            return step
        if isinstance(step, _plan_steps.Exhausted):
            raise self._exhausted(step, now)
        return self._begin(step, now)

    def _adapter(self, deployment: Deployment) -> OpenAICompatAdapter:
        adapter = self._adapters.get(deployment.id)
        if adapter is None:
            cls = adapter_class(deployment.provider.kind, deployment.provider.protocol)
            adapter = self._adapters[deployment.id] = cls(deployment)
        return adapter

    def streams(self, deployment: Deployment) -> bool:
        """Is this attempt sent as a stream? Every stream is; a plain call is too (so the first-token
        and stall limits and mid-answer recovery apply to it), unless the deployment's policy says
        `plain_via_stream = false`, or the call asks for logprobs and a deployment it may reach does
        not send them on streamed chunks: a cut answer finished elsewhere is joined from chunks, so
        every attempt of such a call is plain (docs/platforms.md §11.15)."""
        if self.prepared.stream:
            return True
        params = self.prepared.call.params
        if params.get("logprobs") or params.get("top_logprobs") is not None:
            reachable = (*self.target.deployments, *self.target.fallback)
            if not all(KINDS[d.provider.kind].streams_logprobs for d in reachable):
                return False
        return bool(self.engine.policy(deployment.id).plain_via_stream)

    def _begin(self, step: Any, now: float) -> AttemptContext:
        deployment = self.engine.deployment(step.deployment_id)
        adapter = self._adapter(deployment)
        # A continuation is read as a stream whatever the policy: its text is joined to the cut
        # answer chunk by chunk (and every kind that can continue a prefill streams).
        streamed = step.is_continuation or step.is_replay or self.streams(deployment)
        call = self.prepared.call
        cut_text = ""  # a continuation's prefill: the cut answer so far
        if step.is_restart:
            self._answer_parts = []  # the cut answer is dropped: this attempt starts it again
            self.route.recovery = "restarted"
        elif step.is_replay:
            cut_text = self.answer.text(0)  # the same request again; its text is checked against this
        elif step.is_continuation:
            produced = sum(u.completion_tokens for u in self.earlier_usage)
            cut_text = self.answer.text(0)
            call = continuation_call(call, cut_text, self.engine.continue_style(deployment) or "",
                                     produced_tokens=produced)
        try:
            request = adapter.build_request(call, stream=streamed)
            check_headers(request)
            request.content = encode_body(request)
        except (E.ProviderError, E.InvalidRequestError) as error:
            # A parameter this platform cannot take, or a request that cannot be sent: nothing was
            # sent; the caller must change the call. It never counts against the deployment.
            self.plan.record(deployment.id, now, error, latency_s=0.0, unsent=True)  # its line leaves the route
            error.attempts = list(self.route.attempts)  # InvalidRequestError is a ProviderError: it has them too
            self._end(None, error, now)
            raise
        policy = self.engine.policy(deployment.id)
        total = self.prepared.timeout_s if self.prepared.timeout_s is not None else deployment.timeout_s
        total = max(0.001, min(total, step.timeout_s, self.deadline - now))
        # Prefill of a long prompt legitimately takes longer to the first token.
        ttft_s = deployment.ttft_timeout_s + policy.ttft_per_1k_tokens_s * self.rough_input_tokens() / 1000.0
        stall_s = policy.stall_timeout_s
        # The HTTP read timeout cannot change mid-body, so it is the first-token limit for the whole
        # stream: a silent deployment is abandoned then. The stall limit is checked whenever bytes
        # arrive (keep-alive bytes without content do not reset it); a stall with no bytes at all
        # is caught by the read timeout (README: "Timeouts and defaults").
        if streamed and ttft_s < total:
            read_s, read_kind = ttft_s, "ttft"
        else:
            read_s, read_kind = total, "total"
        timeouts = _FILL_TIMEOUTS.make({  # one per attempt: made in one step (frozen.Fill), as Timeouts(...) would
            "connect_s": min(deployment.connect_timeout_s, total), "ttft_s": ttft_s, "total_s": total,
            "read_s": read_s, "read_kind": read_kind, "stall_s": stall_s if streamed else None,
        })
        record = step.record  # the plan made the attempt's line of the route with the step
        ctx = AttemptContext(deployment, adapter, request, timeouts, now, now + total, record, streamed=streamed,
                             continuation=step.is_continuation, replay_of=cut_text if step.is_replay else None,
                             hedge=step.is_hedge)
        if step.is_continuation:
            ctx.resume_offset = len(cut_text)  # route.recovery says "continued" once its text comes
        self.in_flight[record.number] = ctx
        kind = "hedge" if step.is_hedge else "retry" if step.is_retry else "failover" if record.number > 1 else "first"
        ctx.trace = self.recorder.attempt_started(self, ctx, now, kind)
        return ctx

    def failed(self, ctx: AttemptContext, error: BaseException, now: float, *, content_started: bool = False,
               partial: "StreamState" | None = None, recover: bool = True) -> None:
        """Record a failed attempt; the plan decides what happens next (`next_step`).

        After content started, `recover` lets the plan finish the answer on another deployment
        (`recovery_mode`); the caller closing a stream passes `recover=False`."""
        rec = ctx.record
        if self.in_flight.pop(rec.number, None) is None and rec.status == "abandoned":
            return  # already ended when its client closed (`settle`): the read's error says nothing of the deployment
        closed = rec.status == "cancelled"  # the caller closed the stream (`caller_closed`): it stays so
        partial_text = ""
        if partial is not None and partial.content_started:
            self._answer_parts.append(partial.assembler)  # its content is part of the answer
        if partial is not None and (partial.content_started or partial.decoder.usage is not None
                                    or partial.ttft_s is not None):  # a replay produced text the caller never saw
            # A stream that delivered tokens was billed for them, even if it broke afterwards.
            rec.ttft_s = partial.ttft_s
            rec.usage, rec.usage_estimated = partial.usage_so_far()
            rec.billed = True
            partial_text = self.answer.all_text()
        if not rec.billed and isinstance(error, E.ProviderError) and error.usage is not None:
            # The platform said what it billed (usage in an error body), or a cap cut a whole
            # answer that arrived: priced for that.
            rec.usage, rec.usage_estimated = error.usage, error.usage_estimated
            rec.billed = True
        if not rec.billed and may_have_been_billed(error):
            # The request reached the platform, which may have done (and billed) the work: priced
            # by estimate (the prompt, and a generation it may finish after we left), flagged, never 0.
            rec.usage = self._abandoned_usage(rec, abandoned_output_bound(error, self.prepared.call.params))
            rec.usage_estimated = True
            rec.billed = True
        # An answer cut by a read cap is not finished elsewhere: the caller gets the typed error.
        recover = recover and not isinstance(error, E.ResponseTooLargeError)
        mode = self.recovery_mode(ctx, partial) if content_started and recover else None
        if (mode is not None or ctx.replay_of is not None) and rec.billed and rec.usage is not None:
            self.earlier_usage.append(rec.usage)  # billed for this answer: its usage is part of the total
        replay = self.replay_scope(ctx) if mode == "continue_or_replay" else None
        # The plan ends the attempt's line (status, error, duration, what it decides next); the run adds
        # what only it knows, then the recorder is told (the ledger row, the span).
        self.plan.record(ctx.deployment.id, now, error, ttft_s=rec.ttft_s, latency_s=now - ctx.started,
                         content_started=content_started, partial_text=partial_text, recover=mode, replay=replay)
        if closed:
            rec.status = "cancelled"
        rec.error_type = type(error).__name__
        rec.error_message = str(error)
        if isinstance(error, E.ProviderError):
            rec.http_status = error.status
            rec.request_id = error.request_id
            if error.request is None:  # openai-python's `e.request`: the request this error answered
                error.request = E.RequestInfo(ctx.request.method, ctx.request.url)
        self._attempt_ended(ctx, error, now)
        if content_started and self.plan.finished:
            self._end(None, error, now)

    def parse_answer(self, ctx: AttemptContext, headers: Mapping[str, str], content: bytes,
                     limits: ReadLimits) -> tuple[ChatCompletion, bool]:
        """A plain JSON answer -> (ChatCompletion, usage_reported), within the answer caps
        (`answer_bounds`): one past them raises `ResponseTooLargeError` carrying the usage of what
        arrived (the platform's, or an estimate), so the attempt is billed for it."""
        meter = AnswerMeter(limits, self.prepared.call.params, provider=ctx.deployment.provider.name,
                            deployment=ctx.deployment.id)
        meter.body(content)
        completion, reported = ctx.adapter.parse_completion(headers, content)
        try:
            meter.completion(completion, reported)
        except E.ResponseTooLargeError as error:
            error.usage_estimated = not reported
            error.usage = completion.usage if reported else estimate_usage(
                self.prepared.messages, "".join(c.message.content or "" for c in completion.choices),
                prompt_tokens=self.input_tokens())
            raise
        return completion, reported

    def recovery_mode(self, ctx: AttemptContext, partial: "StreamState" | None) -> str | None:
        """How a cut answer may be finished: streams continue it ("continue": `stream_recovery =
        "continue"`; "continue_or_replay": the cut deployment may continue it too, and a replay may
        follow, see `replay_scope`) or raise (None); plain calls continue it or answer again
        ("continue_or_restart"), or only answer again ("restart") when the partial answer cannot be
        continued (tool calls, several choices, no text)."""
        continuable = self.answer.continuable()
        if self.prepared.stream:
            setting = self.engine.policy(ctx.deployment.id).stream_recovery
            if setting == "raise" or not continuable:
                return None
            return "continue" if setting == "continue" else "continue_or_replay"
        return "continue_or_restart" if continuable else "restart"

    def replay_scope(self, ctx: AttemptContext) -> str | None:
        """May a stream cut at `ctx` be replayed where no deployment continues it, and on which
        backups: "family" (the default, for greedy or seeded requests: `temperature = 0` or a
        `seed`), "any" (`stream_recovery = "replay"`: sampled requests too), or None (a sampled
        request under "auto", reasoning the caller saw, or more than `replay_max_chars`)."""
        policy = self.engine.policy(ctx.deployment.id)
        answer = self.answer
        text = answer.text(0)
        if answer.all_reasoning() or not text or len(text) > policy.replay_max_chars:
            return None
        if policy.stream_recovery == "replay":
            return "any"
        params = self.prepared.call.params
        greedy = params.get("temperature") == 0 or params.get("seed") is not None
        return "family" if greedy else None

    def identifying(self, ctx: AttemptContext) -> List[str]:
        """Providers this call may recover on, after a cut at `ctx`, whose server is still being
        identified (the cut waits for them, bounded: `server_probe.CUT_WAIT_S`)."""
        if self.prepared.stream and self.engine.policy(ctx.deployment.id).stream_recovery == "raise":
            return []  # nothing to decide
        return self.engine.identifying([d.id for d in (*self.target.deployments, *self.target.fallback)])

    def replay_caught_up(self, ctx: AttemptContext, offset: int) -> None:
        """A replay repeated the text the caller saw: it carries the whole answer from here (the cut
        attempts' parts are dropped from the answer, their usage stays billed)."""
        self._answer_parts = []
        self.route.recovery = "replayed"
        self.route.resumed_at.append(offset)

    def succeeded(self, ctx: AttemptContext, completion: ChatCompletion, usage_reported: bool, now: float,
                  ttft_s: float | None, attempt_usage: Usage | None = None) -> ChatCompletion:
        """The attempt answered. `attempt_usage` is this attempt's own usage when the completion joins
        several attempts (a recovered answer): its usage is then the sum of theirs."""
        rec = ctx.record
        self.in_flight.pop(rec.number, None)
        # The plan ends the attempt's line (status, duration, first-token time); the run adds the rest.
        self.plan.record(ctx.deployment.id, now, None, ttft_s=ttft_s, latency_s=now - ctx.started, content_started=True)
        doubt = implausible_usage(completion.usage, ctx.deployment.context_window) if usage_reported else None
        if doubt is not None:  # not believed: priced as estimated, and the record says why
            usage_reported = False
            rec.note = ((rec.note + ", ") if rec.note else "") + f"reported usage implausible ({doubt}): estimated"
        if attempt_usage is None and not usage_reported:
            completion.usage = estimate_usage(
                self.prepared.messages,
                "".join((c.message.content or "") for c in completion.choices),
                "".join((c.message.reasoning_content or "") for c in completion.choices),
                prompt_tokens=self.input_tokens(),
            )
        ctx.reasoned = any(c.message.reasoning_content for c in completion.choices)
        usage = attempt_usage if attempt_usage is not None else completion.usage
        rec._set(usage=usage, usage_estimated=not usage_reported, billed=True, http_status=rec.http_status or 200)
        if self.earlier_usage:
            completion.usage = sum_usage([*self.earlier_usage, usage])
        route = self.route
        deployment = ctx.deployment
        route._set(provider=deployment.provider.name, deployment=deployment.id, model=deployment.model,
                   usage_estimated=not usage_reported)
        if rec.tier and rec.tier != route.tier and route.tier is not None:
            route.reason = f"{route.reason}; fell back to tier {rec.tier}"
            route.tier = rec.tier
        if self.earlier_usage:  # a recovered answer is estimated if any part of it was
            route.usage_estimated = not usage_reported or any(
                a.usage_estimated for a in route.attempts if a.billed and a is not rec)
        completion.route = route
        self._attempt_ended(ctx, None, now)
        self._end(completion, None, now)
        return completion

    def cancelled(self, ctx: AttemptContext, now: float, partial: "StreamState" | None = None,
                  why: str = "another attempt answered first", *, status: ExitStatus = "cancelled",
                  error: BaseException | None = None) -> None:
        """A hedge lost the race, or the call ended with this attempt open (`settle`; `status`
        says how). Its prompt was sent, so it may be billed: recorded."""
        rec = ctx.record
        if self.in_flight.pop(rec.number, None) is None and rec.status in ("cancelled", "abandoned"):
            return  # already ended
        self.plan.cancel(ctx.deployment.id, now)  # gives back its slots; the run says how it ended
        rec.status = status
        rec.note = ((rec.note + ", ") if rec.note else "") + f"{status}: {why}"
        rec.duration_s = now - ctx.started
        if error is not None:
            rec.error, rec.error_type, rec.error_message = error, type(error).__name__, str(error)[:300]
        if partial is not None and (partial.content_started or partial.decoder.usage is not None):
            rec.ttft_s = partial.ttft_s
            rec.usage, rec.usage_estimated = partial.usage_so_far()
        elif not ctx.unsent:
            # Left before any content: the platform may generate the answer anyway (a cloud platform
            # does not see the closed connection until it writes): bounded by `max_tokens` if set.
            rec.usage = self._abandoned_usage(rec, asked_max_tokens(self.prepared.call.params))
            rec.usage_estimated = True
        rec.billed = not ctx.unsent
        self._attempt_ended(ctx, error if status == "error" else None, now)

    def _abandoned_usage(self, rec: Attempt, output_bound: int) -> Usage:
        """An attempt abandoned before content: the prompt, counted here, and `output_bound` tokens
        the platform may still generate (noted on the attempt)."""
        usage = estimate_usage(self.prepared.messages, "", prompt_tokens=self.input_tokens())
        if not output_bound:
            return usage
        rec.note = ((rec.note + ", ") if rec.note else "") + f"output bounded by max_tokens ({output_bound}): estimated"
        return Usage(prompt_tokens=usage.prompt_tokens, completion_tokens=output_bound,
                     total_tokens=usage.prompt_tokens + output_bound)

    def caller_closed(self, state: "StreamState", now: float) -> ChatCompletion | None:
        """The caller closed a stream before its end; what had arrived of the last read is taken in
        (and billed). When the caller had already been handed the answer's end (chunks are decoded as
        the caller takes them: the platform's finish reason or end marker was among them; a replay
        only once it caught up), the answer ends as at its end: `ok`, billed with the usage the
        platform reported (estimated when its usage chunk had not arrived yet), and its assembled
        completion returned. Otherwise the attempt is cancelled, billed for what it produced, and
        None returned."""
        decoder = state.decoder
        answered = decoder.complete and decoder.pending_error is None and (
            state.replay_of is None or state.content_started)
        state._drain()
        if answered:
            return state.finish(now)
        state.ctx.record.status = "cancelled"
        error = E.StreamInterruptedError(
            "closed by the caller before the end", partial_text=state.assembler.all_text(),
            deployment=state.ctx.deployment.id, provider=state.ctx.deployment.provider.name, retryable=False,
        )
        self.failed(state.ctx, error, now, content_started=True, partial=state, recover=False)
        return None

    def abandon(self, now: float, error: BaseException) -> None:
        """The caller stopped the call (task cancelled, `wait_for` timeout, KeyboardInterrupt) or it
        failed in our own code: settled (`settle`) with the status `exits.exit_status` gives `error`."""
        self.settle(exit_status(error), error, now)

    def settle(self, status: ExitStatus, error: BaseException | None, now: float) -> None:
        """End whatever the call still holds, however it ended: the one place a call is settled. The
        shells call it on every exit path (the caller's `break` and a dropped stream, a
        `KeyboardInterrupt`, an asyncio cancellation or `wait_for` timeout, an error in llmroute's own
        code), as often as they like:

        - every attempt still open gets its ledger row, budget charge and span, with `status` saying
          how it ended, and the prompt billed as an estimate (it was sent; `cancelled`);
        - the plan gives back every concurrency slot, limit lease and breaker permit it still holds
          (`FailoverPlan.cancel`, which releases each exactly once);
        - the call's span ends (`end`, once).

        Attempts that already ended are left alone, so a second `settle` does nothing."""
        what = type(error).__name__ if error is not None else "garbage-collected unclosed"
        for ctx in list(self.in_flight.values()):
            try:
                self.cancelled(ctx, now, partial=ctx.partial, why=f"the call ended ({what})", status=status,
                               error=error)
            except Exception:  # noqa: BLE001 - the releases below must still happen
                logging.getLogger("llmroute").exception("llmroute: recording an attempt that ended as %s failed",
                                                        status)
        for deployment_id in self.plan.outstanding:
            self.plan.cancel(deployment_id, now, note=f"{status}: the call ended")
        self._end(None, error, now)

    def end(self, completion: ChatCompletion | None, error: BaseException | None, now: float) -> None:
        """End the call's span (once; later calls do nothing)."""
        self._end(completion, error, now)

    def hedge_plan(self, ctx: AttemptContext, now: float) -> Any:
        """When to race a second deployment against this attempt (None: this tier does not hedge)."""
        policy = self.engine.policy(ctx.deployment.id)
        if (policy.hedge_after_ms is None or ctx.hedge or ctx.continuation
                or ctx.replay_of is not None):  # a hedge of a replay would deliver the answer from its start
            return None
        from llmroute.resilience.hedge import HedgePlan  # the resilience package loads with the first client, not at import

        engine = self.engine
        return HedgePlan.start(
            policy, now=now, budget=engine.retry_budgets.hedge(self.target.tier or ctx.deployment.id, policy),
            recent_ttft_s=engine.breakers.breaker(ctx.deployment.id).recent_ttft(),
        )

    def hedge(self, now: float) -> AttemptContext | None:
        """Start the hedge attempt now, if the plan has a candidate for it."""
        step = self.plan.hedge_step(now)
        self._announce_skips()
        return self._begin(step, now) if step is not None else None

    def _announce_skips(self) -> None:
        """Tell the recorder of the deployments the plan skipped (open breakers, limits) since the last
        step: their lines are already the route's (the plan wrote them)."""
        lines = self.route.attempts
        if len(lines) == self._announced:
            return
        for record in lines[self._announced:]:
            if record.status == "skipped":
                self.recorder.attempt_skipped(self, record, self.engine.provider_kind(record.deployment))
        self._announced = len(lines)

    def _attempt_ended(self, ctx: AttemptContext, error: BaseException | None, now: float) -> None:
        """Price the ended attempt (its record keeps the cost) and tell the recorder."""
        rec = ctx.record
        # Thinking is billed when the usage reports reasoning tokens (compute_cost sees them); a request that
        # turned thinking on is billed so too when the usage cannot say (estimated) or the answer carried
        # reasoning the usage did not count. A thinking request with no thinking is billed at the plain rate,
        # as Bailian bills it (docs/pricing.md).
        thinking = (rec.usage_estimated or ctx.reasoned) and thinking_requested(
            self.prepared.call.params, self.prepared.call.extra_body)
        rec.cost = self.engine.price(ctx.deployment, rec.usage if rec.billed else None, estimated=rec.usage_estimated,
                                     thinking=thinking)
        if rec.billed:
            self.costs.append(rec.cost)
        self.recorder.attempt_ended(self, ctx, error, now)

    def _end(self, completion: ChatCompletion | None, error: BaseException | None, now: float) -> None:
        if self._ended:
            return
        self._ended = True
        self.engine.settle(self.admission)
        total = self.engine.total_cost(self.costs)
        if completion is not None:
            completion.cost = total
        self.recorder.call_ended(self, completion, total, error, now)
        if completion is not None and self.prepared.cache is not None:
            self.prepared.cache.completed(self, completion)

    def rough_input_tokens(self) -> int:
        """The prompt's size in tokens, counted if something already counted it, else the router's
        estimate from characters (no tokenizer on the hot path)."""
        if self.prepared.input_tokens is not None:
            return self.prepared.input_tokens
        estimate: int = _classifier.estimate_tokens(self.prepared.messages)
        return estimate

    def input_tokens(self) -> int:
        if self.prepared.input_tokens is None:
            self.prepared.input_tokens = count_message_tokens(self.prepared.messages)
        return self.prepared.input_tokens

    def _exhausted(self, step: Exhausted, now: float) -> BaseException:
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
        error.attempts = list(self.route.attempts)  # type: ignore[attr-defined]  # Exhausted.error is a BaseException
        self._end(None, error, now)
        return error


# `ProviderError.code` of a connection broken after the request was written whole (the value of
# transport.BROKEN_AFTER_SEND, which this sans-I/O module does not import): the prompt may be billed.
BROKEN_AFTER_SEND = "connection_broken_after_send"

# Chunks without content held back before the first token (the role chunk, keep-alive deltas):
# past this many, further empty ones are dropped (they carry nothing for the caller).
MAX_HELD_CHUNKS = 64


class StreamState:
    """The bytes of one streamed attempt -> chunks for the caller, held back until content arrives."""

    def __init__(self, run: CallRun, ctx: AttemptContext) -> None:
        self.run = run
        self.ctx = ctx
        ctx.partial = self
        self.decoder: StreamDecoder = ctx.adapter.stream_decoder(run.prepared.call)
        self.assembler = StreamAssembler() if run.prepared.cache is None else run.prepared.cache.assembler()
        self.held: List[ChatCompletionChunk] = []
        self.content_started = False
        self.ttft_s: float | None = None
        self.last_content_at: float | None = None
        self.ended = False
        # A replay: the text the caller saw, and how much of it the replay has repeated so far.
        self.replay_of: str | None = ctx.replay_of
        self.replayed = 0
        # The usage-only chunk reaches the caller only when it asked (`stream_options.include_usage`).
        self.usage_wanted = usage_chunks_wanted(run.prepared.call.params)
        self.meter = AnswerMeter(DEFAULT_READ_LIMITS, run.prepared.call.params, provider=ctx.deployment.provider.name,
                                 deployment=ctx.deployment.id)
        self._batch: Generator[ChatCompletionChunk, None, None] | None = None  # the last read's chunks (`feed`)
        # A stream answered with one JSON body (`answered_whole`): its bytes, read as a stream at its end.
        self._whole: List[bytes] | None = None
        self._whole_checked = False  # its first byte was seen to open a JSON object

    def bound(self, limits: ReadLimits) -> None:
        """The client's read caps for this attempt: one SSE line, and the answer across chunks."""
        self.decoder.sse.max_line = limits.max_sse_line_bytes
        if limits is not DEFAULT_READ_LIMITS:
            self.meter = AnswerMeter(limits, self.run.prepared.call.params, **self.meter.where)

    def feed(self, data: bytes, now: float) -> List[ChatCompletionChunk]:
        """Chunks the caller may see now ([] while content has not started). Raises typed errors."""
        return list(self.feed_each(data, now))

    def feed_each(self, data: bytes, now: float) -> Generator[ChatCompletionChunk, None, None]:
        """`feed`, decoded and checked one chunk at a time as the caller takes them. Raises typed
        errors (as it is iterated).

        Lazily, because a read often holds many events (a fast server, a busy client): decoding them
        all first kept every chunk of the read alive at once, and those objects (about ten for the
        garbage collector each) made its collections frequent, long and promoted to the oldest
        generation, up to 40 % of a 64-chunk stream's CPU at concurrency 32 (benchmarks/RESULTS.md,
        "The call core at the transport's cost"). What arrived but was not taken (the caller stopped
        reading) is still counted when the attempt ends (`_drain`)."""
        if self._whole is not None:
            sse = self._gather(data)
            if sse is None:
                return _no_chunks()
            data = sse
        if self._batch is not None:
            self._drain()
        batch = self._batch = self._take(self.decoder.events(data), now)
        return batch

    def answered_whole(self) -> None:
        """The server ignored `stream` and answers with one JSON body: its bytes are gathered (within
        the read caps, as any body's) and, at its end, read as the stream that answer stands for
        (`adapter.whole_answer_as_stream`): the caller gets its chunks, the ledger its usage."""
        self._whole = []

    def _gather(self, data: bytes) -> bytes | None:
        """`feed_each` while one JSON body is expected: None while it is gathered. When its first
        byte does not open a JSON object (a stream sent under a JSON content type), what came so far,
        to be read as the stream it is, from here on."""
        whole = self._whole
        assert whole is not None  # only while one is expected
        whole.append(data)
        if not self._whole_checked:
            head = b"".join(whole).lstrip()[:1]
            if not head:
                return None
            self._whole_checked = True
            if head != b"{":
                self._whole = None
                return b"".join(whole)
        return None

    def take(self, data: bytes, now: float) -> None:
        """`feed_each` taken whole by nobody (a plain call's answer, `get_final_completion`): the
        chunks are assembled, counted and billed as when the caller takes them, one at a time."""
        self.take_rest(self.feed_each(data, now))

    @staticmethod
    def take_rest(chunks: Iterable[ChatCompletionChunk]) -> None:
        """The rest of a read's chunks (`feed_each`), taken by nobody."""
        for _ in chunks:
            pass

    def _drain(self) -> None:
        """Take in the rest of the last read, delivering nothing: the answer so far and its bill count
        everything that arrived, as when a read was decoded whole."""
        batch, self._batch = self._batch, None
        if batch is None or getattr(batch, "gi_running", False):  # not from within itself
            return
        try:
            for _ in batch:
                pass
        except E.LLMRouteError:  # a cap or a limit passed in what was left: nothing more to count
            pass

    def _report_skips(self) -> None:
        """Malformed events the decoder skipped: a warning on the route, a log line, a span event."""
        for text in self.decoder.skipped:
            self.run.route.warnings.append(f"{self.ctx.deployment.id}: {text}")
            logger.warning("%s: %s", self.ctx.deployment.id, text)
            if self.ctx.trace is not None:
                self.ctx.trace.event("llmroute.stream.event_skipped", {"llmroute.reason": text})
        self.decoder.skipped.clear()

    def _take(self, events: Sequence[SSEEvent], now: float) -> Generator[ChatCompletionChunk, None, None]:
        """One read's events -> the chunks the caller may see, decoded, assembled, counted against the
        answer caps and held back until content starts, one at a time. The common chunk (text alone:
        `StreamDecoder.decode`) takes a short way through the assembler and the meter. An error event
        after chunks of the same read ends the read; the next read raises it (`pending_error`)."""
        if self.ttft_s is None and now - self.ctx.started > self.ctx.timeouts.ttft_s:
            raise self._ttft_timeout()  # content that comes after the limit comes too late
        decoder = self.decoder
        if decoder.pending_error is not None:
            error, decoder.pending_error = decoder.pending_error, None
            raise error
        decode = decoder.decode
        assembler = self.assembler
        add_text = assembler.add_text if type(assembler) is StreamAssembler else None  # the cache's records every chunk
        meter = self.meter
        usage_wanted = self.usage_wanted
        took = False
        for event in events:
            try:
                chunk = decode(event)
            except E.ProviderError as error:
                if not took:
                    raise
                # Platforms close the stream after an error event, so the next read (or the end)
                # comes at once and raises it; nothing after the error is decoded.
                decoder.pending_error = error
                break
            if chunk is None:
                continue
            took = True
            text = decoder.text
            if text is not None and add_text is not None:
                add_text(chunk, text)
                if text:
                    meter.text(len(text))  # what arrived is kept (and billed) even when it passes a cap
                    self.last_content_at = now
                    if self.content_started:  # the stream's middle: nothing held, the first token seen
                        yield chunk
                        continue
                elif self.content_started:
                    yield chunk
                    continue
                has_content = bool(text)
            else:
                assembler.add(chunk)
                meter.chunk(chunk)
                has_content = chunk_has_content(chunk)
            if has_content:
                self.last_content_at = now
                if self.ttft_s is None:
                    self.ttft_s = now - self.ctx.started
                    self.note_first_chunk(now)
            if not self.content_started:
                if self.replay_of is not None:
                    passed = self._replay(chunk, has_content)
                    if passed is None:
                        continue  # repeated text the caller already has (or a chunk held with it)
                    chunk, has_content = passed, True
                if not has_content:
                    if len(self.held) < MAX_HELD_CHUNKS or chunk.usage is not None or any(
                            c.finish_reason for c in chunk.choices):
                        self.held.append(chunk)
                    # else: one more chunk without content before the first token (a server sending
                    # empty chunks without end): dropped, so memory stays bounded until the first-token limit
                    continue
                self.content_started = True
                if self.ctx.continuation:
                    self.run.route.recovery = "continued"
                    self.run.route.resumed_at.append(self.ctx.resume_offset)
                if self.ctx.continuation or self.replay_of is not None:
                    chunk.resumed = True
            if self.held:
                held, self.held = self.held, []
                for one in held:
                    if usage_wanted or one.choices or one.usage is None:  # `for_caller`, chunk by chunk
                        yield one
            if usage_wanted or chunk.choices or chunk.usage is None:
                yield chunk
        if self.decoder.skipped:
            self._report_skips()
        if took and self.decoder.usage is not None:
            self.meter.usage(self.decoder.usage)  # a platform's running count (vLLM continuous usage)
        stall_s = self.ctx.timeouts.stall_s
        if (self.ttft_s is not None and stall_s is not None and self.last_content_at is not None
                and now - self.last_content_at > stall_s):
            raise stall_timeout(self.ctx)
        if self.ttft_s is None and now - self.ctx.started > self.ctx.timeouts.ttft_s:
            raise self._ttft_timeout()
        if now > self.ctx.deadline:
            raise E.APITimeoutError(
                f"total timeout: the attempt took longer than its {self.ctx.timeouts.total_s:.3g}s limit", timeout="total",
                seconds=self.ctx.timeouts.total_s, provider=self.ctx.deployment.provider.name,
                deployment=self.ctx.deployment.id,
            )
        self._batch = None  # taken whole: the next read has nothing to drain

    def _ttft_timeout(self) -> E.APITimeoutError:
        return E.APITimeoutError(
            f"time-to-first-token timeout: no content within {self.ctx.timeouts.ttft_s:g}s",
            timeout="ttft", seconds=self.ctx.timeouts.ttft_s,
            provider=self.ctx.deployment.provider.name, deployment=self.ctx.deployment.id,
        )

    def eof(self, now: float) -> List[ChatCompletionChunk]:
        """The body ended. A stream cut before its end marker is an error, not a short answer."""
        self._drain()
        if self._whole is not None:  # a stream answered with one JSON body: its events, now
            body, self._whole = b"".join(self._whole), None
            out = list(self._take(self.decoder.events(self.ctx.adapter.whole_answer_as_stream(body)), now))
        else:
            out = []
        out.extend(self._take(self.decoder.sse.close(), now))
        if not self.decoder.complete:
            raise E.APIConnectionError(
                "stream ended before the platform's end marker (cut mid-way)",
                provider=self.ctx.deployment.provider.name, deployment=self.ctx.deployment.id,
                code=BROKEN_AFTER_SEND,  # the platform answered: it read the prompt
            )
        if self.replay_of is not None and not self.content_started:
            if self.replayed < len(self.replay_of):  # the replayed answer is shorter than what the caller saw
                raise self._diverged("")
            self.content_started = True  # it ended exactly where the cut was: only its end is new
            self.run.replay_caught_up(self.ctx, self.replayed)
        self.ended = True
        if self.held:
            out.extend(for_caller(self.held, self.usage_wanted))
            self.held = []
        return out

    def _replay(self, chunk: ChatCompletionChunk, has_content: bool) -> ChatCompletionChunk | None:
        """A replay's chunk, checked against the text the caller saw (`replay_of`), character for
        character: None while it repeats that text (nothing is delivered), the chunk carrying only
        the new text once it has caught up, `ReplayDivergedError` when it differs. Chunks without
        content (role, usage, finish) are held, and delivered if the replay ends where the cut did."""
        expected = self.replay_of or ""
        if not has_content:
            self.held.append(chunk)
            return None
        choice = chunk.choices[0] if chunk.choices else None
        delta = choice.delta if choice is not None else None
        if delta is None or (choice is not None and choice.index != 0) or delta.tool_calls or (
                getattr(delta, "reasoning_content", None)):
            raise self._diverged("(not text)")
        text = delta.content or ""
        need = expected[self.replayed:]
        if not need.startswith(text[:len(need)]):
            raise self._diverged(text)
        self.replayed += min(len(text), len(need))
        rest = text[len(need):]
        if self.replayed < len(expected) or not rest:
            return None
        self.run.replay_caught_up(self.ctx, len(expected))
        self.held = []  # the role chunk and the like: the caller has them from the first attempt
        assert choice is not None  # a content chunk has its choice
        return chunk.model_copy(update={"choices": [choice.model_copy(update={"delta": delta.model_copy(
            update={"content": rest})})]})

    def _diverged(self, got: str) -> E.ReplayDivergedError:
        expected = self.replay_of or ""
        at = self.replayed
        if got:
            at += next((i for i, (a, b) in enumerate(zip(expected[at:], got)) if a != b), 0)
        return E.ReplayDivergedError(
            f"the replay did not repeat the {len(expected)} characters the caller had seen: it differs at "
            f"character {at} (expected {expected[at:at + 20]!r}, got {got[at - self.replayed:][:20]!r})",
            offset=at, expected=expected[at:at + 20], got=got[at - self.replayed:][:20],
            provider=self.ctx.deployment.provider.name, deployment=self.ctx.deployment.id,
        )

    def usage_so_far(self) -> tuple[Usage, bool]:
        self._drain()
        if self.decoder.usage is not None:
            return self.decoder.usage, False
        return (
            estimate_usage(
                self.run.prepared.messages, self.assembler.all_text() + self.assembler.all_tool_arguments(),
                self.assembler.all_reasoning(), prompt_tokens=self.run.input_tokens(),
            ),
            True,
        )

    def note_first_chunk(self, now: float) -> None:
        self.run.recorder.first_chunk(self.ctx, now)

    def interrupted(self, error: BaseException) -> E.StreamInterruptedError:
        """After content reached the caller: no failover, no replay; say what arrived."""
        self._drain()
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
        run = self.run
        if not run.earlier_usage and run.route.recovery is None:
            completion = self.assembler.completion(usage, self.ctx.deployment.model)
            final = run.succeeded(self.ctx, completion, not estimated, now, self.ttft_s)
        else:  # a recovered answer: the joined text, the usage of every attempt that produced it
            completion = StreamAssembler.joined([*run._answer_parts, self.assembler]).completion(
                usage, self.ctx.deployment.model)
            final = run.succeeded(self.ctx, completion, not estimated, now, self.ttft_s, attempt_usage=usage)
        # The attempt has ended (nothing settles it again): the state and its context no longer hold
        # each other, so the call's objects are freed when the caller lets go of them, not left to the
        # garbage collector (~80 objects a call, a collection every few calls).
        self.ctx.partial = None
        return final


def _no_chunks() -> Generator[ChatCompletionChunk, None, None]:
    """`feed_each`'s chunks while a whole JSON answer is gathered: none."""
    yield from ()


def stall_timeout(ctx: AttemptContext) -> E.APITimeoutError:
    seconds = ctx.timeouts.stall_s
    return E.APITimeoutError(
        f"stall timeout: no content for {seconds:g}s after content had started", timeout="stall", seconds=seconds,
        provider=ctx.deployment.provider.name, deployment=ctx.deployment.id,
    )


def may_have_been_billed(error: BaseException) -> bool:
    """Did the request reach a platform that may have done the work? A read timeout: the platform
    was still working on it; a connection broken after the request was written whole: it read the
    prompt. A connect timeout, a refused connection, an HTTP error status and a keep-alive
    connection closed before any reply mean nothing was produced (docs/failover.md, docs/ledger.md)."""
    if isinstance(error, E.APITimeoutError):  # a subclass of APIConnectionError, as in openai-python
        return error.timeout != "connect"
    return isinstance(error, E.APIConnectionError) and error.code == BROKEN_AFTER_SEND


def abandoned_output_bound(error: BaseException, params: Mapping[str, Any]) -> int:
    """Output tokens a platform may still generate for an attempt abandoned on a timeout before any
    content (it does not know we left): the call's `max_tokens` when it set one, else 0 (unknown;
    docs/ledger.md says how to cap it)."""
    if not isinstance(error, E.APITimeoutError) or error.timeout in ("connect", "platform"):
        return 0
    return asked_max_tokens(params)



def sum_usage(usages: Sequence[Usage]) -> Usage:
    """The usage of several attempts that produced one answer."""
    return Usage(
        prompt_tokens=sum(u.prompt_tokens for u in usages),
        completion_tokens=sum(u.completion_tokens for u in usages),
        total_tokens=sum(u.total_tokens or u.prompt_tokens + u.completion_tokens for u in usages),
        prompt_tokens_details=PromptTokensDetails(cached_tokens=sum(u.cached_tokens for u in usages),
                                                  **_cache_writes(usages)),
        completion_tokens_details=CompletionTokensDetails(reasoning_tokens=sum(u.reasoning_tokens for u in usages)),
    )


def _cache_writes(usages: Sequence[Usage]) -> Dict[str, Any]:
    """The explicit context-cache fields of several usages, summed (none when none reported any)."""
    written = sum(cache_write_tokens(u) for u in usages)
    out: Dict[str, Any] = {"cache_creation_input_tokens": written} if written else {}
    if any(explicit_cache(u) for u in usages):
        out["cache_type"] = "ephemeral"
    return out
