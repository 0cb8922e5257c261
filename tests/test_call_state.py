"""The call state machine (`CallRun`, `StreamState`) driven by hand: a fake clock, no sockets.

The shells (`Client`, `AsyncClient`) only move bytes between the transport and these objects; here the
test plays the shell: it asks `next_step`, feeds SSE bytes or reports failures, and reads the route.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from llmroute import errors as E
from llmroute._call.call import AttemptContext, CallRun, StreamState, prepare_call
from llmroute.config import Config
from llmroute._call.engine import Engine

MESSAGES = [{"role": "user", "content": "say hello"}]


def config(**tier: Any) -> Config:
    return Config.from_dict({
        "providers": {"a": {"kind": "vllm", "base_url": "http://127.0.0.1:9/v1"},
                      "b": {"kind": "vllm", "base_url": "http://127.0.0.1:9/v1"},
                      "c": {"kind": "openai-compatible", "base_url": "http://127.0.0.1:9/v1"}},
        "tiers": {"t": {"deployments": ["a:m", "b:m"], **tier}, "u": {"deployments": ["a:m", "c:m"]}},
        "pricing": {f"{p}:*": {"input_per_million": 0, "output_per_million": 0} for p in "abc"},
        "ledger": {"sink": "memory"},
    })


def start(cfg: Config, now: float = 100.0, **kwargs: Any) -> CallRun:
    kwargs.setdefault("model", "t")
    kwargs.setdefault("messages", MESSAGES)
    return CallRun(Engine(cfg), prepare_call(cfg, kwargs), now, wall=lambda: 1.7e9)


def sse(*pieces: str, finish: bool = True) -> bytes:
    out = b""
    for piece in pieces:
        body = {"id": "x", "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
        out += b"data: " + json.dumps(body).encode() + b"\n\n"
    if finish:
        body = {"id": "x", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        out += b"data: " + json.dumps(body).encode() + b"\n\ndata: [DONE]\n\n"
    return out


def send(run: CallRun, now: float) -> Any:
    step = run.next_step(now)
    assert isinstance(step, AttemptContext)
    return step


def timeout(dep: str) -> E.APITimeoutError:
    return E.APITimeoutError("no first token", timeout="ttft", seconds=10, provider=dep.split(":")[0], deployment=dep)


def test_a_plain_call_is_sent_as_a_stream_unless_it_asks_for_logprobs_the_kind_does_not_stream() -> None:
    run = start(config())
    ctx = send(run, 100.0)
    assert ctx.streamed and ctx.request.json["stream"] is True
    assert ctx.timeouts.read_kind == "ttft" and ctx.timeouts.stall_s == 10.0
    vllm = send(start(config(), logprobs=True, top_logprobs=2), 100.0)  # vLLM streams logprobs
    assert vllm.streamed and vllm.request.json["logprobs"] is True
    other = send(start(config(), model="c:m", logprobs=True), 100.0)  # an unknown server: read plain
    assert not other.streamed and "stream" not in other.request.json
    mixed = send(start(config(), model="u", logprobs=True), 100.0)  # a:m streams them, its backup c:m not
    assert mixed.deployment.id == "a:m"
    assert not mixed.streamed  # one call is read one way: a cut answer could not be joined otherwise


def test_the_first_token_limit_grows_with_the_prompt() -> None:
    short = send(start(config()), 100.0).timeouts.ttft_s
    long_ = send(start(config(), messages=[{"role": "user", "content": "word " * 30_000}]), 100.0).timeouts.ttft_s
    assert short == pytest.approx(10.0, abs=0.05)
    assert long_ > short + 5  # 150,000 characters: about 50,000 tokens, 0.2 s per 1,000


def test_a_timeout_moves_to_the_backup_at_once() -> None:
    run = start(config())
    first = send(run, 100.0)
    run.failed(first, timeout("a:m"), 110.0, partial=StreamState(run, first))
    second = send(run, 110.0)  # no Wait: a silent deployment is not retried when a backup exists
    assert second.deployment.id == "b:m"
    assert [(a.deployment, a.status) for a in run.route.attempts] == [("a:m", "error"), ("b:m", "ok")]
    assert run.route.attempts[0].billed and run.route.attempts[0].usage_estimated  # the platform was working


def test_a_cut_answer_is_continued_with_the_partial_answer_as_a_prefill() -> None:
    run = start(config(), max_tokens=50)
    first = send(run, 100.0)
    state = StreamState(run, first)
    assert [c.choices[0].delta.content for c in state.feed(sse("one", " two", finish=False), 100.5)] == ["one", " two"]
    run.failed(first, E.APIConnectionError("reset", provider="a", deployment="a:m"), 101.0, content_started=True,
               partial=state)
    assert not run.plan.finished
    second = send(run, 101.0)
    assert second.continuation and second.deployment.id == "b:m"
    body = second.request.json
    assert body["messages"][-1] == {"role": "assistant", "content": "one two"}
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    assert body["max_tokens"] < 50
    rest = StreamState(run, second)
    chunks = rest.feed(sse(" three"), 101.5) + rest.eof(101.6)
    assert chunks[0].resumed
    completion = rest.finish(101.7)
    assert completion.choices[0].message.content == "one two three"
    assert completion.route.recovery == "continued" and completion.route.resumed_at == [len("one two")]
    usages = [a.usage for a in completion.route.attempts]
    assert completion.usage.completion_tokens == sum(u.completion_tokens for u in usages)


def test_a_stream_stalled_where_no_backup_can_continue_ends_in_the_cut() -> None:
    # a:m (vLLM) could continue its own answer, but it stalled: a silent deployment stays silent.
    run = start(config(), model="u", stream=True)
    first = send(run, 100.0)
    state = StreamState(run, first)
    state.feed(sse("one", finish=False), 100.5)
    stall = E.APITimeoutError("stall", timeout="stall", seconds=10.0, provider="a", deployment="a:m")
    run.failed(first, stall, 111.0, content_started=True, partial=state)
    with pytest.raises(E.StreamInterruptedError) as info:
        run.next_step(111.0)
    assert info.value.partial_text == "one"
    assert [(a.deployment, a.status) for a in info.value.attempts] == [("a:m", "interrupted"), ("c:m", "skipped")]


def test_a_stream_cut_where_no_backup_can_continue_is_continued_on_the_same_deployment() -> None:
    run = start(config(), model="u", stream=True)
    first = send(run, 100.0)
    state = StreamState(run, first)
    state.feed(sse("one", finish=False), 100.5)
    cut = E.APIConnectionError("reset", provider="a", deployment="a:m")
    run.failed(first, cut, 101.0, content_started=True, partial=state)
    again = send(run, 101.0)
    assert again.deployment.id == "a:m" and again.continuation and again.record.number == 2
    assert again.record.recovery == "continued" and "retry" in (again.record.note or "")
    assert again.request.json["messages"][-1] == {"role": "assistant", "content": "one"}


def test_a_plain_cut_where_no_backup_can_continue_is_answered_again() -> None:
    run = start(config(), model="u")
    first = send(run, 100.0)
    state = StreamState(run, first)
    state.feed(sse("one", finish=False), 100.5)
    run.failed(first, E.APIConnectionError("reset", provider="a", deployment="a:m"), 101.0, content_started=True,
               partial=state)
    second = send(run, 101.0)
    assert second.deployment.id == "c:m" and not second.continuation
    assert second.request.json["messages"] == MESSAGES and run.route.recovery == "restarted"


def test_abandoning_a_call_gives_back_the_probe_permit_and_records_the_attempt() -> None:
    cfg = config(consecutive_failures=1, open_s=5, open_max_s=5, open_jitter=0, half_open_probes=1)
    engine = Engine(cfg)
    tripping = CallRun(engine, prepare_call(cfg, {"model": "t", "messages": MESSAGES}), 100.0, wall=lambda: 1.7e9)
    first = send(tripping, 100.0)
    tripping.failed(first, E.ServerError("boom", provider="a", deployment="a:m", status=500), 100.1)
    assert engine.health(100.2)["a:m"].state == "open"
    probe_call = CallRun(engine, prepare_call(cfg, {"model": "t", "messages": MESSAGES}), 106.0, wall=lambda: 1.7e9)
    probe = send(probe_call, 106.0)
    assert probe.deployment.id == "a:m" and engine.health(106.0)["a:m"].probes_in_flight == 1
    probe_call.abandon(106.5, KeyboardInterrupt())  # the caller gave up: nothing reported the outcome
    assert engine.health(106.5)["a:m"].probes_in_flight == 0
    assert probe.record.status == "cancelled" and probe.record.billed
    statuses = [r.status for r in engine.ledger.records]  # the memory sink keeps every record
    assert statuses[-1] == "cancelled"


def test_the_call_deadline_ends_the_plan() -> None:
    run = start(config(), timeout=5)
    first = send(run, 100.0)
    run.failed(first, timeout("a:m"), 104.0)
    with pytest.raises(E.LLMRouteError):
        run.next_step(106.0)  # past the 5 s the call was given


def test_a_malformed_event_is_skipped_and_counted_on_the_route() -> None:
    run = start(config(), stream=True)
    ctx = send(run, 100.0)
    state = StreamState(run, ctx)
    chunks = state.feed(b"data: {not json\n\n" + sse("one", " two"), 100.5)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "one two"
    assert len(run.route.warnings) == 1 and "malformed SSE data skipped" in run.route.warnings[0]


def test_a_read_of_many_events_is_decoded_one_chunk_at_a_time_and_all_of_it_is_billed_when_closed() -> None:
    # One read holding a whole answer: the chunks are made as the caller takes them (so a fast server
    # does not make a busy client hold every chunk of the read at once), and a caller that stops
    # early is billed for everything that arrived, not only for what it took.
    run = start(config(), stream=True)
    ctx = send(run, 100.0)
    state = StreamState(run, ctx)
    batch = state.feed_each(sse("one", " two", " three", finish=False), 100.5)
    first = next(batch)
    assert first.choices[0].delta.content == "one"
    assert state.assembler.all_text() == "one"  # " two" and " three" are not decoded yet
    assert next(batch).choices[0].delta.content == " two"
    run.caller_closed(state, 100.6)  # the caller closed the stream after two chunks
    assert state.assembler.all_text() == "one two three"
    assert ctx.record.status == "cancelled" and ctx.record.usage_estimated
    assert ctx.record.usage.completion_tokens >= 3
    assert list(batch) == []  # taken in by the close: nothing is handed out after it
