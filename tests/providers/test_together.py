"""Together AI through llmroute's client (docs/platforms.md §1, §11): usage on the finish_reason chunk, flat
`usage.cached_tokens`, `delta.reasoning`, `eos`, include_usage for the models that need it, and its
documented errors (402 credits, 403 context, 429 dynamic limits with x-ratelimit-reset, 503)."""

from __future__ import annotations

import pytest

import llmroute as L
from tests.providers.helpers import (
    MESSAGES, SERVER_PROMPT_TOKENS, TIER, adrain, assert_clean_error, call_error, drain, expected_estimate,
    make_client, make_config, run, with_async_client,
)
from tests.servers.script import Reply

MODEL = "meta-llama/Llama-3.3-70B-Instruct-Turbo"
SMALL = "Qwen/Qwen2.5-7B-Instruct-Turbo"  # 32,768-token window
NEEDS_FLAG = "moonshotai/Kimi-K3"  # streams usage only when include_usage is sent (§1)
DEP = f"together:{MODEL}"
TEXT = "Hello from together"


@pytest.fixture
def client(together_server):
    with make_client("together", together_server.base_url, MODEL, api_key=together_server.default_api_key) as c:
        yield c


def test_plain_call_reads_flat_cached_tokens_and_normalises_eos(client, together_server):
    together_server.push(Reply(cached_tokens=3))
    resp = client.chat.completions.create(model=TIER, messages=MESSAGES)
    assert together_server.last_request.json["model"] == MODEL
    assert resp.choices[0].message.content == TEXT
    assert resp.choices[0].finish_reason == "stop"  # the server said "eos"
    assert (resp.usage.prompt_tokens, resp.usage.completion_tokens, resp.usage.total_tokens) == (4, 3, 7)
    assert resp.usage.prompt_tokens_details.cached_tokens == 3  # from usage.cached_tokens (flat)
    assert resp.route.usage_estimated is False and resp.route.deployment == DEP


def test_cached_tokens_in_prompt_tokens_details(make_server):
    server = make_server("together", cached_tokens_in_details=True)
    server.push(Reply(cached_tokens=2))
    with make_client("together", server.base_url, MODEL, api_key=server.default_api_key) as c:
        resp = c.chat.completions.create(model=TIER, messages=MESSAGES)
    assert resp.usage.prompt_tokens_details.cached_tokens == 2


def test_stream_usage_from_finish_chunk_and_reasoning_field(client, together_server):
    together_server.push(Reply(reasoning=["Let me", " think"], cached_tokens=2))
    with client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True) as stream:
        chunks, text, reasoning = drain(stream)
    assert text == TEXT and reasoning == "Let me think"  # `delta.reasoning` -> reasoning_content
    # Together sends no choices:[] chunk: the only usage rides on the finish_reason chunk.
    with_usage = [c for c in chunks if c.usage is not None]
    assert len(with_usage) == 1 and with_usage[0].choices and with_usage[0].choices[0].finish_reason == "stop"
    final = stream.response
    assert final.choices[0].message.content == TEXT
    assert final.choices[0].message.reasoning_content == "Let me think"
    assert final.choices[0].finish_reason == "stop"
    assert (final.usage.prompt_tokens, final.usage.completion_tokens) == (SERVER_PROMPT_TOKENS, 5)
    assert final.usage.prompt_tokens_details.cached_tokens == 2
    assert final.route.usage_estimated is False


def test_request_shape(client, together_server):
    client.chat.completions.create(model=TIER, messages=MESSAGES, max_completion_tokens=7)
    plain = together_server.last_request
    assert plain.bearer == together_server.default_api_key
    assert plain.json["max_tokens"] == 7 and "max_completion_tokens" not in plain.json  # §11.14
    # A plain call is read as a stream by default (first-token and stall limits, recovery).
    assert plain.json["stream"] is True and plain.json["stream_options"] == {"include_usage": True}
    drain(client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True))
    streamed = together_server.last_request.json
    assert streamed["stream"] is True and streamed["stream_options"] == {"include_usage": True}  # §11.1
    with make_client("together", together_server.base_url, MODEL, api_key=together_server.default_api_key,
                     deployment={"plain_via_stream": False}) as c:
        c.chat.completions.create(model=TIER, messages=MESSAGES, max_completion_tokens=7)
    plain = together_server.last_request.json
    assert "stream_options" not in plain and "stream" not in plain


def test_model_that_needs_include_usage_still_reports_usage(together_server):
    with make_client("together", together_server.base_url, NEEDS_FLAG, api_key=together_server.default_api_key) as c:
        with c.chat.completions.create(model=TIER, messages=MESSAGES, stream=True) as stream:
            drain(stream)
    assert stream.response.route.usage_estimated is False
    assert stream.response.usage.completion_tokens == 3


@pytest.mark.parametrize("stream", [False, True])
def test_missing_usage_is_estimated_with_tiktoken(client, together_server, stream):
    together_server.push(Reply(omit_usage=True, reasoning=["hmm"]))
    out = client.chat.completions.create(model=TIER, messages=MESSAGES, stream=stream)
    resp = out if not stream else (drain(out), out.response)[1]
    prompt, completion = expected_estimate(TEXT, "hmm")
    assert resp.route.usage_estimated is True
    assert (resp.usage.prompt_tokens, resp.usage.completion_tokens) == (prompt, completion)
    assert resp.usage.completion_tokens_details.reasoning_tokens == expected_estimate("", "hmm")[1]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "reply, cls, status",
    [
        (Reply(error="credits"), L.BillingError, 402),
        (Reply(error="rate_limit"), L.RateLimitError, 429),
        (Reply(error="token_limit"), L.RateLimitError, 429),
        (Reply(error="overloaded"), L.OverloadedError, 503),
        (Reply(error="server"), L.ServerError, 500),
        (Reply(error="bad_request"), L.BadRequestError, 400),
    ],
    ids=["402-credits", "429-requests", "429-tokens", "503", "500", "400"],
)
def test_documented_errors(client, together_server, reply, cls, status, stream):
    together_server.push(reply)
    err = call_error(client, cls, stream=stream)
    assert err.status == status
    assert_clean_error(err, DEP, [together_server.default_api_key])


def test_rate_limit_retry_after_from_x_ratelimit_reset(client, together_server):
    together_server.push(Reply(error="rate_limit"))
    err = call_error(client, L.RateLimitError)
    assert err.retry_after == 1.0  # x-ratelimit-reset: "the suggested retry interval"
    assert err.retryable is True


def test_retry_after_header_wins(client, together_server):
    together_server.push(Reply(error="rate_limit", headers={"Retry-After": "7"}))
    assert call_error(client, L.RateLimitError).retry_after == 7.0


def test_wrong_key_is_authentication_error_without_the_key(together_server):
    wrong = "together-wrong-key-0123456789"
    with make_client("together", together_server.base_url, MODEL, api_key=wrong) as c:
        err = call_error(c, L.AuthenticationError)
    assert err.status == 401 and err.status_code == 401 and together_server.last_request.bearer == wrong
    assert_clean_error(err, DEP, [wrong])


def test_key_echoed_by_the_platform_is_scrubbed(client, together_server):
    key = together_server.default_api_key
    together_server.push(Reply(error="auth", message=f"Invalid API key provided: {key}"))
    err = call_error(client, L.AuthenticationError)
    assert_clean_error(err, DEP, [key])


def test_unknown_model_is_not_found(together_server):
    with make_client("together", together_server.base_url, "meta-llama/No-Such-Model",
                     api_key=together_server.default_api_key) as c:
        err = call_error(c, L.NotFoundError)
    assert err.status == 404
    assert_clean_error(err, "together:meta-llama/No-Such-Model", [together_server.default_api_key])


def test_context_overflow_403_is_context_length_error(together_server):
    with make_client("together", together_server.base_url, SMALL, api_key=together_server.default_api_key) as c:
        err = call_error(c, L.ContextLengthError, max_tokens=40_000)
    assert err.status == 403  # Together's documented status for it (§1)
    assert_clean_error(err, f"together:{SMALL}", [together_server.default_api_key])


def test_async_plain_and_stream(together_server):
    together_server.push(Reply(cached_tokens=1), Reply(reasoning=["r"]))
    cfg = make_config("together", together_server.base_url, MODEL, api_key=together_server.default_api_key)

    async def body(client):
        plain = await client.chat.completions.create(model=TIER, messages=MESSAGES)
        stream = await client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True)
        async with stream:
            _, text, reasoning = await adrain(stream)
        return plain, stream.response, text, reasoning

    plain, final, text, reasoning = run(with_async_client(cfg, body))
    assert plain.choices[0].finish_reason == "stop" and plain.usage.prompt_tokens_details.cached_tokens == 1
    assert text == TEXT and reasoning == "r"
    assert final.usage.completion_tokens == 4 and final.route.usage_estimated is False
