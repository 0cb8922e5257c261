"""The fast path that validates a stream chunk straight from its JSON gives the chunk the general path
(json.loads, normalize_chunk, validation) gives, raises what it raises, and leaves the decoder as it
does; anything else it leaves to the general path. No I/O: the adapter decodes SSE events."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmroute import errors as E
from llmroute.config import Config
from llmroute._call.answer_bounds import AnswerMeter
from llmroute._http.bounded import ReadLimits
from llmroute.providers.base import OpenAICompatAdapter, StreamAssembler, StreamDecoder
from llmroute._http.sse import SSEEvent
from llmroute.types import Usage


def _adapter(**provider) -> OpenAICompatAdapter:
    config = Config.from_dict({
        "providers": {"p": {"kind": "openai-compatible", "base_url": "http://127.0.0.1:9/v1", **provider}},
        "tiers": {"t": {"deployments": ["p:the-model"]}},
        "pricing": {"p:*": {"input_per_million": 0, "output_per_million": 0}},
    })
    return OpenAICompatAdapter(config.deployment("p:the-model"))


ADAPTER = _adapter()


PLAIN = _adapter(split_think_tags=False)


def _decode(adapter: OpenAICompatAdapter, events, fast: bool, fused: bool = False):
    """Decode a run of events with one decoder (think tags may span chunks): every outcome, then the decoder's state.
    `fused`: through `StreamDecoder.decode` (the common chunk in one step), as `StreamState` decodes."""
    decoder = StreamDecoder(adapter)
    adapter._chunks_from_json = fast
    outcomes = []
    try:
        for data in events:
            try:
                chunk = decoder.decode(SSEEvent(data)) if fused else adapter.decode_event(SSEEvent(data), decoder)
                outcomes.append(("chunk", chunk.model_dump(), chunk.model_dump(exclude_unset=True),
                                 [c.model_dump(exclude_unset=True) for c in chunk.choices])
                                if chunk is not None else ("none",))
            except (E.LLMRouteError, ValueError, TypeError) as exc:  # TypeError: a delta that is not an object
                outcomes.append(("raised", type(exc).__name__))
    finally:
        adapter._chunks_from_json = True
    return outcomes, decoder.finished, decoder.done, decoder.usage, list(decoder.skipped)


def _same(*payloads) -> None:
    events = [p if isinstance(p, str) else json.dumps(p) for p in payloads]
    for adapter in (ADAPTER, PLAIN):
        general = _decode(adapter, events, fast=False)
        assert _decode(adapter, events, fast=True) == general
        assert _decode(adapter, events, fast=True, fused=True) == general
        _same_answer(adapter, events)


def _assembled(adapter: OpenAICompatAdapter, events, common: bool):
    """Every event through `StreamDecoder.decode`, then into an assembler and an answer meter: the common
    chunk's short way (`add_text`, `AnswerMeter.text`) when `common`, `add` and `chunk` for every chunk if
    not. The answer, the meter's counts and how it ended."""
    decoder = StreamDecoder(adapter)
    assembler = StreamAssembler()
    meter = AnswerMeter(ReadLimits(max_answer_chars=1024), {"max_tokens": 1, "n": 2})
    ended = "end"
    try:
        for data in events:
            try:
                chunk = decoder.decode(SSEEvent(data))
            except (E.LLMRouteError, ValueError, TypeError):
                continue
            if chunk is None:
                continue
            if common and decoder.text is not None:
                delta = chunk.choices[0].delta.model_dump(exclude_none=True)
                assert [c.index for c in chunk.choices] == [0] and delta.pop("role", "assistant") == "assistant"
                assert delta == {"content": decoder.text}
                assert chunk.usage is None and chunk.choices[0].finish_reason is None
                assembler.add_text(chunk, decoder.text)
                meter.text(len(decoder.text))
            else:
                assembler.add(chunk)
                meter.chunk(chunk)
    except E.ResponseTooLargeError as exc:
        ended = exc.limit
    answer = assembler.completion(Usage(), "fallback").model_dump(exclude={"created"})
    return answer, meter.chars, meter.answer_chars, dict(meter.tools), ended


def _same_answer(adapter: OpenAICompatAdapter, events) -> None:
    assert _assembled(adapter, events, common=True) == _assembled(adapter, events, common=False)


CHUNK = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
         "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}]}

CASES = [
    CHUNK,
    {**CHUNK, "model": ""},  # the deployment's model fills in
    {k: v for k, v in CHUNK.items() if k != "model"},
    {**CHUNK, "usage": None, "system_fingerprint": "fp", "x_extra": [1, {"a": None}]},
    {**CHUNK, "choices": [{"index": 0, "delta": {}, "finish_reason": "eos"}]},  # normalised to "stop"
    {**CHUNK, "choices": [{"index": 0, "delta": {}, "finish_reason": "abort"}]},  # raises ServerError
    {**CHUNK, "choices": [{"index": 0, "delta": {}, "finish_reason": ""}]},  # no finish reason: not finished
    {**CHUNK, "choices": [{"index": 0, "delta": {"reasoning": "hm"}}]},  # moved to reasoning_content
    {**CHUNK, "choices": [{"index": 0, "delta": {"reasoning_content": "hm", "role": "assistant"}}]},
    {**CHUNK, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "t", "function": {"name": "f"}}]}}]},
    {**CHUNK, "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}},
    {**CHUNK, "usage": {"input_tokens": 3, "output_tokens": 2}},
    # Usage counts, read from the platform's names (and the fields beside them) on either path:
    {**CHUNK, "choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 1}, "timings": {"cache_n": 1}},
    {**CHUNK, "usage": {"input_tokens": 3, "output_tokens": 2, "output_tokens_details": {"reasoning_tokens": 1}}},
    {**CHUNK, "choices": [{"index": 0, "delta": {}, "finish_reason": "eos"}], "usage": {"prompt_tokens": 2}},
    {**CHUNK, "choices": [], "usage": {"prompt_tokens": 4, "cached_tokens": 3, "perf_metrics": None},
     "perf_metrics": {"cached-prompt-tokens": 2}},
    {"choices": [], "usage": {"prompt_tokens": 1}, "error": {"message": "overloaded"}},
    {**CHUNK, "choices": [], "usage": "junk"},
    {**CHUNK, "choices": [{"index": 0, "delta": None}]},
    {**CHUNK, "choices": ["junk", {"index": 0, "delta": {"content": "x"}}]},
    {**CHUNK, "created": "12"},
    {**CHUNK, "created": 1.5},
    {"error": {"message": "overloaded", "code": 503}},
    {"object": "error", "message": "bad", "code": 400},
    [1, 2],
    "not json",
    '{"choices": [{"delta": {"content": NaN}}]}',
]


@pytest.mark.parametrize("payload", CASES)
def test_the_fast_path_decodes_as_the_general_path(payload):
    _same(payload)


def test_the_common_chunk_takes_the_fast_path():
    decoder = StreamDecoder(ADAPTER)
    assert ADAPTER._chunk_from_json(json.dumps(CHUNK), decoder) is not None
    assert ADAPTER._chunk_from_json(json.dumps({"error": {"message": "overloaded"}, "choices": []}), decoder) is None
    # A usage count is read from the platform's own names, on the validated chunk (not parsed twice).
    usage_chunk = ADAPTER._chunk_from_json(json.dumps({**CHUNK, "choices": [], "usage": {"input_tokens": 3}}), decoder)
    assert usage_chunk is not None and usage_chunk.usage.prompt_tokens == 3 and decoder.usage == usage_chunk.usage


def test_only_text_alone_is_the_common_chunk():
    """`StreamDecoder.decode` marks (`.text`) a chunk of one choice at index 0 whose delta is text alone,
    with no finish reason, usage or think tags still to split; any other chunk is left unmarked."""
    decoder = StreamDecoder(PLAIN)
    marked = {}
    for name, payload in {
        "text": CHUNK,
        "empty text": _content(""),
        "role": {**CHUNK, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        "other role": {**CHUNK, "choices": [{"index": 0, "delta": {"role": "tool", "content": "x"}}]},
        "nulls": {**CHUNK, "choices": [{"index": 0, "delta": {"content": "x", "role": None, "tool_calls": None,
                                                              "reasoning_content": None, "refusal": None}}]},
        "finish": _content("x", "stop"),
        "usage": {**CHUNK, "usage": {"prompt_tokens": 1}},
        "second choice": {**CHUNK, "choices": [{"index": 1, "delta": {"content": "x"}}]},
        "two choices": {**CHUNK, "choices": [CHUNK["choices"][0], {"index": 1, "delta": {"content": "x"}}]},
        "no content": {**CHUNK, "choices": [{"index": 0, "delta": {}}]},
        "refusal": {**CHUNK, "choices": [{"index": 0, "delta": {"content": "x", "refusal": "no"}}]},
        "logprobs": {**CHUNK, "choices": [{"index": 0, "delta": {"content": "x"}, "logprobs": {"content": []}}]},
    }.items():
        decoder.decode(SSEEvent(json.dumps(payload)))
        marked[name] = decoder.text
    assert marked == {"text": "hi", "empty text": "", "role": "", "other role": None, "nulls": "x",
                      "finish": None, "usage": None,
                      "second choice": None, "two choices": None, "no content": None, "refusal": None,
                      "logprobs": None}
    # With think tags split: text once the reasoning is past, not before (the splitter has work to do).
    decoder = StreamDecoder(ADAPTER)
    seen = []
    for text in ("<think>plan", " more", "</think>answer", " and more"):
        decoder.decode(SSEEvent(json.dumps(_content(text))))
        seen.append(decoder.text)
    assert seen == [None, None, None, " and more"]
    # An answer that opens without a tag is text from its first chunk on; one that may open with a tag waits.
    for first, marked_first in ((" Hello", " Hello"), ("  <thi", None), ("\n", None)):
        decoder = StreamDecoder(ADAPTER)
        decoder.decode(SSEEvent(json.dumps(_content(first))))
        assert decoder.text == marked_first


def test_an_answer_without_think_tags_splits_as_on_the_general_path():
    _same(_content(" Hello"), _content(" world"), _content("", "stop"))
    _same(_content(" Hello"), _content("<think>x</think>"), _content("", "stop"))  # a tag later is text
    _same(_content("\n"), _content("<think>x</think>y"), _content(" z", "stop"))
    _same(_content("Hi <think>"), _content("</think>"), _content("", "stop"))


def test_a_role_named_on_every_chunk_assembles_as_on_the_general_path():
    """Ollama names the assistant's role on every chunk; a stream that named another role first keeps
    the general path's outcome (the last role named wins)."""
    def piece(text, role):
        return json.dumps({**CHUNK, "choices": [{"index": 0, "delta": {"role": role, "content": text}}]})

    for roles in (["assistant"] * 3, ["tool", "assistant", "assistant"], ["tool", None, "assistant"]):
        events = [piece(t, r) for t, r in zip(["a", "b", "c"], roles)]
        assert _assembled(PLAIN, events, common=True) == _assembled(PLAIN, events, common=False)
        assert _assembled(PLAIN, events, common=True)[0]["choices"][0]["message"]["role"] == next(
            r for r in reversed(roles) if r)


def test_a_runaway_of_common_chunks_is_cut_as_any_other():
    """The answer caps hold on the common chunk's short way: the same cap, at the same chunk."""
    events = [json.dumps(_content("abcd" * 30))] * 10
    assert _assembled(PLAIN, events, common=True)[-1] == "answer_chars"
    assert _assembled(PLAIN, events, common=True)[1] == 9 * 120  # counted up to the chunk that passed the cap
    assert _assembled(PLAIN, events, common=True) == _assembled(PLAIN, events, common=False)


def _content(text, finish=None):
    return {**CHUNK, "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}


def test_think_tags_cut_across_chunks_split_as_on_the_general_path():
    _same(_content("<thi"), _content("nk>plan"), _content(" more</th"), _content("ink>\n\nanswer"), _content(" end", "stop"))
    _same(_content("  <think>never closed"), _content("", "length"))
    _same(_content("<th"), _content("", "stop"))  # a held tag prefix comes out at the finish


_scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=False, allow_infinity=False),
                     st.sampled_from(["", "stop", "length", "eos", "abort", "tool_calls", "hi", "<think>", "<th",
                                      "ink>a", " </think>", "\n"]))
_delta = st.dictionaries(st.sampled_from(["role", "content", "reasoning", "reasoning_content", "refusal", "x"]),
                         _scalars, max_size=3)
_choice = st.fixed_dictionaries({}, optional={"index": _scalars, "delta": st.one_of(_delta, _scalars),
                                              "finish_reason": _scalars, "logprobs": _scalars, "y": _scalars})
_chunk = st.fixed_dictionaries({"choices": st.lists(_choice, max_size=2)},
                               optional={"id": _scalars, "object": _scalars, "created": _scalars, "model": _scalars,
                                         "usage": st.one_of(st.none(), st.just({"prompt_tokens": 2}), st.sampled_from([
                                             {"input_tokens": 3, "output_tokens": 1,
                                              "output_tokens_details": {"reasoning_tokens": 1}},
                                             {"prompt_tokens": 5, "completion_tokens": 2,
                                              "prompt_tokens_details": {"cached_tokens": 9}},
                                             {"prompt_tokens": 4, "cached_tokens": 1, "reasoning_tokens": None},
                                             "junk", []])),
                                         "timings": st.sampled_from([{"cache_n": 2}, None]),
                                         "error": st.sampled_from([{"message": "overloaded"}, None]),
                                         "system_fingerprint": _scalars, "z": _scalars})


@settings(max_examples=600, deadline=None)
@given(st.lists(_chunk, min_size=1, max_size=3))
def test_any_chunks_decode_as_the_general_path_decodes_them(payloads):
    _same(*payloads)
