"""Fireworks AI through llmroute's client (docs/platforms.md §2, §11): usage on the last (finish_reason) chunk
with no stream_options, `context_length_exceeded_behavior="error"` instead of silent truncation, one
output cap (max_tokens and max_completion_tokens are mutually exclusive), `reasoning_content` or
inline `<think>`, `perf_metrics` cached tokens, and its errors (NOT_FOUND, 402, 412, 429, 503)."""

from __future__ import annotations

import json

import pytest

import llmroute as L
from tests.providers.helpers import (
    MESSAGES, SERVER_PROMPT_TOKENS, TIER, assert_clean_error, call_error, drain, expected_estimate, make_client,
)
from tests.servers.script import Reply

MODEL = "accounts/fireworks/models/llama-v3p1-8b-instruct"  # 131,072-token window
DEP = f"fireworks:{MODEL}"
TEXT = "Hello from fireworks"


@pytest.fixture
def client(fireworks_server):
    with make_client("fireworks", fireworks_server.base_url, MODEL, api_key=fireworks_server.default_api_key) as c:
        yield c


def test_plain_call(client, fireworks_server):
    fireworks_server.push(Reply(cached_tokens=2))
    resp = client.chat.completions.create(model=TIER, messages=MESSAGES)
    assert fireworks_server.last_request.path == "/inference/v1/chat/completions"
    assert resp.choices[0].message.content == TEXT and resp.choices[0].finish_reason == "stop"
    assert (resp.usage.prompt_tokens, resp.usage.completion_tokens, resp.usage.total_tokens) == (4, 3, 7)
    assert resp.usage.prompt_tokens_details.cached_tokens == 2
    assert resp.route.usage_estimated is False


def test_stream_usage_on_last_chunk_without_include_usage(client, fireworks_server):
    fireworks_server.push(Reply(reasoning=["plan", " it"], cached_tokens=1))
    with client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True) as stream:
        chunks, text, reasoning = drain(stream)
    sent = fireworks_server.last_request.json
    assert "stream_options" not in sent  # §11.1: not in Fireworks' spec, and not needed
    assert text == TEXT and reasoning == "plan it"
    usage_chunks = [c for c in chunks if c.usage is not None]
    assert len(usage_chunks) == 1 and usage_chunks[0].choices[0].finish_reason == "stop"
    final = stream.response
    assert final.choices[0].message.reasoning_content == "plan it"
    assert (final.usage.prompt_tokens, final.usage.completion_tokens) == (SERVER_PROMPT_TOKENS, 5)
    assert final.usage.prompt_tokens_details.cached_tokens == 1
    assert final.route.usage_estimated is False


def test_sends_context_length_exceeded_behavior_error_and_raises(client, fireworks_server):
    # By default Fireworks would silently lower max_tokens and answer: llmroute asks it to fail.
    err = call_error(client, L.ContextLengthError, max_tokens=131_070)
    assert fireworks_server.last_request.json["context_length_exceeded_behavior"] == "error"
    assert err.status == 400 and "too long" in str(err)
    assert_clean_error(err, DEP, [fireworks_server.default_api_key])


def test_users_own_truncate_setting_wins(client, fireworks_server):
    resp = client.chat.completions.create(model=TIER, messages=MESSAGES, max_tokens=131_070,
                                          extra_body={"context_length_exceeded_behavior": "truncate"})
    assert fireworks_server.last_request.json["context_length_exceeded_behavior"] == "truncate"
    assert resp.choices[0].message.content == TEXT


def test_one_output_cap_is_sent(client, fireworks_server):
    # The server rejects a body with both; the caller may pass both names.
    resp = client.chat.completions.create(model=TIER, messages=MESSAGES, max_tokens=9, max_completion_tokens=2)
    sent = fireworks_server.last_request.json
    assert sent["max_tokens"] == 2 and "max_completion_tokens" not in sent
    assert resp.choices[0].finish_reason == "length" and resp.choices[0].message.content == "Hello from"


def test_auth_header(client, fireworks_server):
    client.chat.completions.create(model=TIER, messages=MESSAGES)
    assert fireworks_server.last_request.headers["authorization"] == f"Bearer {fireworks_server.default_api_key}"


@pytest.mark.parametrize("stream", [False, True])
def test_inline_think_tags_become_reasoning_content(make_server, stream):
    server = make_server("fireworks", inline_think_models=frozenset({MODEL}))
    server.push(Reply(reasoning=["step", " one"], pieces=["The", " answer"]))
    with make_client("fireworks", server.base_url, MODEL, api_key=server.default_api_key) as c:
        out = c.chat.completions.create(model=TIER, messages=MESSAGES, stream=stream)
        if stream:
            _, text, reasoning = drain(out)
            assert (text, reasoning) == ("The answer", "step one")
            out = out.response
    assert out.choices[0].message.content == "The answer"
    assert out.choices[0].message.reasoning_content == "step one"


def test_cached_tokens_from_perf_metrics(fireworks_server, client):
    # A usage object without prompt_tokens_details: the cached count is only in perf_metrics (§11.3).
    chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": MODEL,
             "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}],
             "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
             "perf_metrics": {"cached-prompt-tokens": 6}}
    fireworks_server.push(Reply(body=f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n"))
    with client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True,
                                        extra_body={"perf_metrics_in_response": True}) as stream:
        drain(stream)
    assert stream.response.usage.prompt_tokens_details.cached_tokens == 6


@pytest.mark.parametrize("stream", [False, True])
def test_missing_usage_is_estimated(client, fireworks_server, stream):
    fireworks_server.push(Reply(omit_usage=True))
    out = client.chat.completions.create(model=TIER, messages=MESSAGES, stream=stream)
    if stream:
        drain(out)
        out = out.response
    assert out.route.usage_estimated is True
    assert (out.usage.prompt_tokens, out.usage.completion_tokens) == expected_estimate(TEXT)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "reply, cls, status",
    [
        (Reply(error="credits"), L.BillingError, 402),
        (Reply(error="suspended"), L.PermissionDeniedError, 412),
        (Reply(error="forbidden"), L.PermissionDeniedError, 403),
        (Reply(error="rate_limit", headers={"Retry-After": "3"}), L.RateLimitError, 429),
        (Reply(error="overloaded"), L.OverloadedError, 503),
        (Reply(error="server"), L.ServerError, 500),
    ],
    ids=["402", "412", "403", "429", "503", "500"],
)
def test_documented_errors(client, fireworks_server, reply, cls, status, stream):
    fireworks_server.push(reply)
    err = call_error(client, cls, stream=stream)
    assert err.status == status
    assert_clean_error(err, DEP, [fireworks_server.default_api_key])
    if cls is L.RateLimitError:
        assert err.retry_after == 3.0


def test_unknown_model_not_found(fireworks_server):
    model = "accounts/fireworks/models/llama-v3p3-70b-gone"
    with make_client("fireworks", fireworks_server.base_url, model, api_key=fireworks_server.default_api_key) as c:
        err = call_error(c, L.NotFoundError)
    assert err.status == 404 and err.code == "NOT_FOUND"
    assert_clean_error(err, f"fireworks:{model}", [fireworks_server.default_api_key])


def test_wrong_key(fireworks_server):
    wrong = "fw-wrong-key-abcdefgh"
    with make_client("fireworks", fireworks_server.base_url, MODEL, api_key=wrong) as c:
        err = call_error(c, L.AuthenticationError)
    assert_clean_error(err, DEP, [wrong])
