"""SGLang through llmroute's client (docs/platforms.md §6, §11): include_usage defaults to off on the
server (llmroute sends it), top-level `usage.reasoning_tokens`, `reasoning_content`, the
`finish_reason: "abort"` that must surface as an error, and the flat `{"object": "error"}` body."""

from __future__ import annotations

import pytest

import llmroute as L
from tests.providers.helpers import (
    MESSAGES, SERVER_PROMPT_TOKENS, TIER, adrain, assert_clean_error, call_error, drain, make_client, make_config,
    run, with_async_client,
)
from tests.servers.script import Reply

MODEL = "Qwen/Qwen2.5-7B-Instruct"
DEP = f"sglang:{MODEL}"
TEXT = "Hello from sglang"


@pytest.fixture
def client(sglang_server):
    with make_client("sglang", sglang_server.base_url, MODEL) as c:
        yield c


def test_plain_call_with_top_level_reasoning_tokens(client, sglang_server):
    sglang_server.push(Reply(reasoning=["a", "b"], cached_tokens=1))
    resp = client.chat.completions.create(model=TIER, messages=MESSAGES)
    assert resp.choices[0].message.content == TEXT and resp.choices[0].message.reasoning_content == "ab"
    assert (resp.usage.prompt_tokens, resp.usage.completion_tokens) == (SERVER_PROMPT_TOKENS, 5)
    assert resp.usage.completion_tokens_details.reasoning_tokens == 2  # usage.reasoning_tokens (top level)
    assert resp.usage.prompt_tokens_details.cached_tokens == 1 and resp.route.usage_estimated is False


def test_stream_sends_include_usage_and_reads_usage_chunk(client, sglang_server):
    sglang_server.push(Reply(reasoning=["think"]))
    with client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True) as stream:
        chunks, text, reasoning = drain(stream)
    assert sglang_server.last_request.json["stream_options"] == {"include_usage": True}
    assert text == TEXT and reasoning == "think"
    assert stream.response.usage.completion_tokens == 4 and stream.response.route.usage_estimated is False


def test_abort_in_a_plain_response_is_an_error(client, sglang_server):
    sglang_server.push(Reply(finish_reason="abort"))
    err = call_error(client, L.ServerError)
    assert "abort" in str(err)
    assert_clean_error(err, DEP)


def test_abort_before_content_is_an_error(client, sglang_server):
    sglang_server.push(Reply(pieces=[], finish_reason="abort"))
    err = call_error(client, L.ServerError, stream=True)
    assert "abort" in str(err)


def test_abort_after_content_interrupts(client, sglang_server):
    sglang_server.push(Reply(pieces=["half", " an"], finish_reason="abort"))
    stream = client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True)
    with pytest.raises(L.StreamInterruptedError) as info:
        drain(stream)
    assert info.value.partial_text == "half an" and "abort" in str(info.value)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "reply, cls, status",
    [
        (Reply(error="context"), L.ContextLengthError, 400),
        (Reply(error="bad_request"), L.BadRequestError, 400),
        (Reply(error="overloaded"), L.OverloadedError, 503),
        (Reply(error="server"), L.ServerError, 500),
    ],
    ids=["context", "400", "503", "500"],
)
def test_flat_errors(client, sglang_server, reply, cls, status, stream):
    sglang_server.push(reply)
    err = call_error(client, cls, stream=stream)
    assert err.status == status and err.message  # read from the flat body
    assert_clean_error(err, DEP)


def test_context_error_keeps_the_platforms_message_and_request_id(client, sglang_server):
    sglang_server.push(Reply(error="context", headers={"x-request-id": "req-ctx-1"}))
    err = call_error(client, L.ContextLengthError)
    assert err.provider_message and err.request_id == "req-ctx-1"


def test_context_overflow_from_the_server(client):
    err = call_error(client, L.ContextLengthError, max_tokens=40_000)
    assert err.status == 400


def test_auth_and_not_found(make_server):
    key = "sglang-key-abcdef12"
    server = make_server("sglang", api_key=key)
    wrong = "sglang-wrong-key-9876"
    with make_client("sglang", server.base_url, MODEL, api_key=wrong) as c:
        err = call_error(c, L.AuthenticationError)
    assert_clean_error(err, DEP, [wrong, key])
    with make_client("sglang", server.base_url, "nope/model", api_key=key) as c:
        err = call_error(c, L.NotFoundError)
    assert server.last_request.bearer == key
    assert_clean_error(err, "sglang:nope/model", [key])


def test_async_abort_after_content(sglang_server):
    sglang_server.push(Reply(pieces=["x", "y"], finish_reason="abort"))

    async def body(client):
        stream = await client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True)
        with pytest.raises(L.StreamInterruptedError) as info:
            await adrain(stream)
        return info.value

    err = run(with_async_client(make_config("sglang", sglang_server.base_url, MODEL), body))
    assert err.partial_text == "xy"
