"""vLLM through llmroute's client (docs/platforms.md §5, §11): usage on a `choices: []` chunk once a
`stream_options` object is sent, `continuous_usage_stats` (cumulative per chunk: last wins), the
`reasoning` field (and the older `reasoning_content`), optional Bearer key, and errors
`{"error": {..., "code": <int>}}` or the older flat `{"object": "error"}` with its context text."""

from __future__ import annotations

import pytest

import llmroute as L
from tests.providers.helpers import (
    MESSAGES, SERVER_PROMPT_TOKENS, TIER, assert_clean_error, call_error, drain, expected_estimate, make_client,
)
from tests.servers.script import Reply

MODEL = "Qwen/Qwen2.5-7B-Instruct"  # 32,768-token window
DEP = f"vllm:{MODEL}"
TEXT = "Hello from vllm"
KEY = "vllm-local-key-123456"


@pytest.fixture
def client(vllm_server):
    with make_client("vllm", vllm_server.base_url, MODEL) as c:
        yield c


def test_plain_call(client, vllm_server):
    vllm_server.push(Reply(cached_tokens=2))
    resp = client.chat.completions.create(model=TIER, messages=MESSAGES, max_tokens=30)
    sent = vllm_server.last_request
    assert "authorization" not in sent.headers and sent.json["max_tokens"] == 30
    assert resp.choices[0].message.content == TEXT
    assert (resp.usage.prompt_tokens, resp.usage.completion_tokens) == (SERVER_PROMPT_TOKENS, 3)
    assert resp.usage.prompt_tokens_details.cached_tokens == 2 and resp.route.usage_estimated is False


def test_stream_usage_chunk_and_reasoning_field(client, vllm_server):
    vllm_server.push(Reply(reasoning=["so"]))
    with client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True) as stream:
        chunks, text, reasoning = drain(stream)
    assert vllm_server.last_request.json["stream_options"] == {"include_usage": True}
    assert text == TEXT and reasoning == "so"  # `delta.reasoning` -> reasoning_content
    assert all(c.choices for c in chunks)  # the usage chunk was llmroute's request, not the caller's
    assert stream.response.usage.completion_tokens == 4 and stream.response.route.usage_estimated is False
    assert stream.response.choices[0].message.reasoning_content == "so"


def test_continuous_usage_stats_last_wins(client, vllm_server):
    vllm_server.push(Reply(pieces=["a", " b", " c"]))
    with client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True,
                                        stream_options={"continuous_usage_stats": True}) as stream:
        chunks, _, _ = drain(stream)
    sent = vllm_server.last_request.json["stream_options"]
    assert sent == {"continuous_usage_stats": True, "include_usage": True}
    assert sum(1 for c in chunks if c.usage is not None) >= 4
    assert stream.response.usage.completion_tokens == 3
    assert stream.response.usage.total_tokens == SERVER_PROMPT_TOKENS + 3


def test_older_reasoning_content_field(make_server):
    server = make_server("vllm", reasoning_field="reasoning_content")
    server.push(Reply(reasoning=["old", " style"]))
    with make_client("vllm", server.base_url, MODEL) as c:
        resp = c.chat.completions.create(model=TIER, messages=MESSAGES)
    assert resp.choices[0].message.reasoning_content == "old style" and resp.choices[0].message.content == TEXT


def test_missing_usage_is_estimated(client, vllm_server):
    with make_client("vllm", vllm_server.base_url, MODEL, include_usage=False) as c:
        with c.chat.completions.create(model=TIER, messages=MESSAGES, stream=True) as stream:
            drain(stream)
    assert "stream_options" not in vllm_server.last_request.json
    assert stream.response.route.usage_estimated is True
    assert (stream.response.usage.prompt_tokens, stream.response.usage.completion_tokens) == expected_estimate(TEXT)


def test_api_key_sent_and_wrong_key_refused(make_server):
    server = make_server("vllm", api_key=KEY)
    with make_client("vllm", server.base_url, MODEL, api_key=KEY) as c:
        c.chat.completions.create(model=TIER, messages=MESSAGES)
    assert server.last_request.bearer == KEY
    wrong = "vllm-wrong-key-000000"
    with make_client("vllm", server.base_url, MODEL, api_key=wrong) as c:
        err = call_error(c, L.AuthenticationError)
    assert_clean_error(err, DEP, [wrong, KEY])


@pytest.mark.parametrize("legacy", [False, True], ids=["error-object", "flat-object-error"])
def test_context_overflow_in_both_envelopes(make_server, legacy):
    server = make_server("vllm", legacy_errors=legacy)
    with make_client("vllm", server.base_url, MODEL) as c:
        err = call_error(c, L.ContextLengthError, max_tokens=40_000)
    assert err.status == 400 and "maximum context length" in str(err)
    assert_clean_error(err, DEP)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "reply, cls, status",
    [
        (Reply(error="overloaded"), L.OverloadedError, 503),
        (Reply(error="server"), L.ServerError, 500),
        (Reply(error="bad_request"), L.BadRequestError, 400),
        (Reply(status=429, headers={"Retry-After": "2"}), L.RateLimitError, 429),  # a proxy in front
    ],
    ids=["503", "500", "400", "429"],
)
def test_errors(client, vllm_server, reply, cls, status, stream):
    vllm_server.push(reply)
    err = call_error(client, cls, stream=stream)
    assert err.status == status
    assert_clean_error(err, DEP)
    if status == 429:
        assert err.retry_after == 2.0


def test_unknown_model(vllm_server):
    with make_client("vllm", vllm_server.base_url, "Qwen/Other") as c:
        err = call_error(c, L.NotFoundError)
    assert_clean_error(err, "vllm:Qwen/Other")


def test_mid_stream_error_event_interrupts(client, vllm_server):
    vllm_server.push(Reply(pieces=["x", " y", " z"], error_at=2))
    stream = client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True)
    with pytest.raises(L.StreamInterruptedError) as info:
        drain(stream)
    assert info.value.partial_text == "x y" and isinstance(info.value.__cause__, L.ServerError)
