"""HuggingFace TGI through llmroute's client (docs/platforms.md §7, §11): no auth, usage only on a
`choices: []` chunk when include_usage is sent (no cached details), and the non-OpenAI error body
`{"error": str, "error_type": str}`: 422 validation / context, 429 = queue full (overloaded, not a
rate limit), 424 generation error, and the same JSON as a `data:` event mid-stream."""

from __future__ import annotations

import pytest

import llmroute as L
from tests.providers.helpers import (
    MESSAGES, SERVER_PROMPT_TOKENS, TIER, assert_clean_error, call_error, drain, expected_estimate, make_client,
)
from tests.servers.script import Reply

MODEL = "tgi"
DEP = f"tgi:{MODEL}"
TEXT = "Hello from tgi"


@pytest.fixture
def client(tgi_server):
    with make_client("tgi", tgi_server.base_url, MODEL) as c:
        yield c


def test_plain_call_without_auth(client, tgi_server):
    resp = client.chat.completions.create(model=TIER, messages=MESSAGES)
    assert "authorization" not in tgi_server.last_request.headers
    assert resp.choices[0].message.content == TEXT and resp.choices[0].finish_reason == "stop"
    assert (resp.usage.prompt_tokens, resp.usage.completion_tokens) == (SERVER_PROMPT_TOKENS, 3)
    assert resp.usage.prompt_tokens_details.cached_tokens == 0 and resp.route.usage_estimated is False


def test_stream_usage_chunk(client, tgi_server):
    with client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True,
                                        stream_options={"include_usage": True}) as stream:
        chunks, text, _ = drain(stream)
    assert tgi_server.last_request.json["stream_options"] == {"include_usage": True}
    assert text == TEXT and chunks[-1].choices == []
    assert stream.response.usage.completion_tokens == 3 and stream.response.route.usage_estimated is False


def test_no_usage_without_include_usage_is_estimated(tgi_server):
    with make_client("tgi", tgi_server.base_url, MODEL, include_usage=False) as c:
        with c.chat.completions.create(model=TIER, messages=MESSAGES, stream=True) as stream:
            drain(stream)
    assert stream.response.route.usage_estimated is True
    assert (stream.response.usage.prompt_tokens, stream.response.usage.completion_tokens) == expected_estimate(TEXT)


def test_context_overflow_is_a_422(client):
    err = call_error(client, L.ContextLengthError, max_tokens=5000)
    assert err.status == 422 and "max_new_tokens" in str(err)
    assert_clean_error(err, DEP)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "reply, cls, status",
    [
        (Reply(error="overloaded"), L.OverloadedError, 429),  # TGI's 429 is its queue being full
        (Reply(error="validation"), L.UnprocessableEntityError, 422),
        (Reply(error="template"), L.UnprocessableEntityError, 422),
        (Reply(error="generation"), L.ServerError, 424),
        (Reply(error="server"), L.ServerError, 500),
    ],
    ids=["429-queue-full", "422-validation", "422-template", "424-generation", "500"],
)
def test_errors(client, tgi_server, reply, cls, status, stream):
    tgi_server.push(reply)
    err = call_error(client, cls, stream=stream)
    assert err.status == status and err.provider_message
    assert_clean_error(err, DEP)


def test_mid_stream_error_event_before_content(client, tgi_server):
    tgi_server.push(Reply(error_at=0))
    err = call_error(client, L.ServerError, stream=True)
    assert "generation" in str(err).lower()


def test_mid_stream_error_event_after_content(client, tgi_server):
    tgi_server.push(Reply(pieces=["p", " q"], error_at=1))
    stream = client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True)
    with pytest.raises(L.StreamInterruptedError) as info:
        drain(stream)
    assert info.value.partial_text == "p" and isinstance(info.value.__cause__, L.ServerError)
