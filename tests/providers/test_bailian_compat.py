"""Alibaba Bailian / DashScope OpenAI-compatible mode through llmroute's client (docs/platforms.md §4a, §11):
`max_completion_tokens`, usage only on a final `choices: []` chunk when include_usage is sent,
`prompt_tokens_details.cached_tokens`, and its errors: data_inspection_failed (also mid-stream),
Arrearage as a 400, invalid_api_key, throttling vs insufficient_quota 429s, "Range of input length"."""

from __future__ import annotations

import pytest

import llmroute as L
from tests.providers.helpers import (
    MESSAGES, SERVER_PROMPT_TOKENS, TIER, adrain, assert_clean_error, call_error, drain, expected_estimate,
    make_client, make_config, run, with_async_client,
)
from tests.servers.script import Reply

MODEL = "qwen-plus"
DEP = f"bailian:{MODEL}"
TEXT = "Hello from bailian"


@pytest.fixture
def client(bailian_server):
    with make_client("bailian", bailian_server.base_url, MODEL, api_key=bailian_server.default_api_key) as c:
        yield c


def test_plain_call_with_cached_tokens(client, bailian_server):
    bailian_server.push(Reply(cached_tokens=3))
    resp = client.chat.completions.create(model=TIER, messages=MESSAGES)
    assert bailian_server.last_request.path == "/compatible-mode/v1/chat/completions"
    assert bailian_server.last_request.bearer == bailian_server.default_api_key
    assert resp.choices[0].message.content == TEXT and resp.choices[0].finish_reason == "stop"
    assert (resp.usage.prompt_tokens, resp.usage.completion_tokens) == (SERVER_PROMPT_TOKENS, 3)
    assert resp.usage.prompt_tokens_details.cached_tokens == 3
    assert resp.route.usage_estimated is False


def test_sends_max_completion_tokens(make_server):
    # After the reported cut-over the server rejects max_tokens (§4a, §11.14).
    server = make_server("bailian", max_tokens_policy="max_completion_tokens")
    with make_client("bailian", server.base_url, MODEL, api_key=server.default_api_key) as c:
        resp = c.chat.completions.create(model=TIER, messages=MESSAGES, max_tokens=2)
    assert server.last_request.json["max_completion_tokens"] == 2 and "max_tokens" not in server.last_request.json
    assert resp.choices[0].finish_reason == "length"


@pytest.mark.parametrize("stream", [False, True])
def test_an_endpoint_refusing_max_completion_tokens_gets_max_tokens(make_server, stream):
    # A region that never got the new name answers 400; the request goes again with max_tokens, once,
    # and later requests to that endpoint send max_tokens from the start.
    server = make_server("bailian", max_tokens_policy="max_tokens")
    with make_client("bailian", server.base_url, MODEL, api_key=server.default_api_key) as c:
        resp = c.chat.completions.create(model=TIER, messages=MESSAGES, max_tokens=2, stream=stream)
        if stream:
            with resp:
                drain(resp)
            resp = resp.response
        again = c.chat.completions.create(model=TIER, messages=MESSAGES, max_tokens=2)
    first, second, third = [r.json for r in server.chat_requests()]
    assert first["max_completion_tokens"] == 2 and "max_tokens" not in first
    assert second["max_tokens"] == 2 and "max_completion_tokens" not in second
    assert third["max_tokens"] == 2 and "max_completion_tokens" not in third
    assert resp.choices[0].finish_reason == "length" and len(resp.route.attempts) == 1
    assert again.choices[0].finish_reason == "length"


def test_a_value_out_of_range_is_the_callers_error_and_changes_nothing(make_server):
    # "Range of max_completion_tokens should be [1, 8192]" names the field but refuses its value:
    # no resend as max_tokens, and later calls still send max_completion_tokens.
    server = make_server("bailian")
    message = "<400> InternalError.Algo.InvalidParameter: Range of max_completion_tokens should be [1, 8192]"
    server.push(Reply(error="bad_request", message=message))
    with make_client("bailian", server.base_url, MODEL, api_key=server.default_api_key) as c:
        with pytest.raises(L.BadRequestError):
            c.chat.completions.create(model=TIER, messages=MESSAGES, max_tokens=100_000)
        c.chat.completions.create(model=TIER, messages=MESSAGES, max_tokens=50)
    first, second = [r.json for r in server.chat_requests()]
    assert first["max_completion_tokens"] == 100_000 and "max_tokens" not in first
    assert second["max_completion_tokens"] == 50 and "max_tokens" not in second


@pytest.mark.parametrize("reasoning", [[], ["想", "一想"]])
def test_a_plain_call_to_a_stream_only_model_is_streamed_and_assembled(make_server, reasoning):
    server = make_server("bailian")
    server.push(Reply(), Reply(pieces=["Hello", " there"], reasoning=reasoning))
    # With plain calls read as plain bodies (plain_via_stream = false); by default they are streams.
    with make_client("bailian", server.base_url, "qwq-plus", api_key=server.default_api_key,
                     deployment={"plain_via_stream": False}) as c:
        resp = c.chat.completions.create(model=TIER, messages=MESSAGES, max_tokens=50)
    plain, streamed = [r.json for r in server.chat_requests()]
    assert "stream" not in plain
    assert streamed["stream"] is True and streamed["stream_options"] == {"include_usage": True}
    assert resp.choices[0].message.content == "Hello there" and resp.choices[0].finish_reason == "stop"
    assert (resp.choices[0].message.reasoning_content or "") == "".join(reasoning)
    assert resp.route.usage_estimated is False and resp.usage.completion_tokens > 0
    assert len(resp.route.attempts) == 1 and resp.cost is not None


def test_stream_usage_from_empty_choices_chunk(client, bailian_server):
    bailian_server.push(Reply(reasoning=["想", "一想"], cached_tokens=2))
    with client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True) as stream:
        chunks, text, reasoning = drain(stream)
    assert bailian_server.last_request.json["stream_options"] == {"include_usage": True}
    assert text == TEXT and reasoning == "想一想"
    # Asked for by llmroute, not by the caller: the usage-only chunk stays out of its loop (openai-python's way).
    assert all(c.choices for c in chunks)
    final = stream.response
    assert (final.usage.prompt_tokens, final.usage.completion_tokens) == (SERVER_PROMPT_TOKENS, 5)
    assert final.usage.prompt_tokens_details.cached_tokens == 2
    assert final.choices[0].message.reasoning_content == "想一想"
    assert final.route.usage_estimated is False


def test_usage_chunk_reaches_a_caller_that_asked(client, bailian_server):
    with client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True,
                                        stream_options={"include_usage": True}) as stream:
        chunks, text, _ = drain(stream)
    assert text == TEXT
    last = chunks[-1]
    assert last.choices == [] and last.usage.prompt_tokens == SERVER_PROMPT_TOKENS
    assert all(c.choices for c in chunks[:-1])


def test_include_usage_turned_off_means_estimated(bailian_server):
    with make_client("bailian", bailian_server.base_url, MODEL, api_key=bailian_server.default_api_key,
                     include_usage=False) as c:
        with c.chat.completions.create(model=TIER, messages=MESSAGES, stream=True) as stream:
            drain(stream)
    assert "stream_options" not in bailian_server.last_request.json
    assert stream.response.route.usage_estimated is True
    assert (stream.response.usage.prompt_tokens, stream.response.usage.completion_tokens) == expected_estimate(TEXT)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "reply, cls, status",
    [
        (Reply(error="content_filter"), L.ContentFilterError, 400),
        (Reply(error="arrearage"), L.BillingError, 400),
        (Reply(error="rate_limit", headers={"Retry-After": "4"}), L.RateLimitError, 429),
        (Reply(error="burst"), L.RateLimitError, 429),
        (Reply(error="access_denied"), L.PermissionDeniedError, 403),
        (Reply(error="overloaded"), L.OverloadedError, 503),
        (Reply(error="context"), L.ContextLengthError, 400),
        (Reply(error="bad_request"), L.BadRequestError, 400),
    ],
    ids=["400-data-inspection", "400-arrearage", "429-throttling", "429-burst", "403", "503",
         "400-input-length", "400"],
)
def test_documented_errors(client, bailian_server, reply, cls, status, stream):
    bailian_server.push(reply)
    err = call_error(client, cls, stream=stream)
    assert err.status == status
    assert_clean_error(err, DEP, [bailian_server.default_api_key])
    if reply.headers:
        assert err.retry_after == 4.0
    if cls is L.BillingError:
        assert err.retryable is False  # §11.8: never retry Arrearage or an exhausted quota


def test_unknown_model_and_wrong_key(bailian_server):
    with make_client("bailian", bailian_server.base_url, "qwen-nope", api_key=bailian_server.default_api_key) as c:
        err = call_error(c, L.NotFoundError)
    assert_clean_error(err, "bailian:qwen-nope", [bailian_server.default_api_key])
    wrong = "sk-dashscope-wrong-region-key"
    with make_client("bailian", bailian_server.base_url, MODEL, api_key=wrong) as c:
        err = call_error(c, L.AuthenticationError)
    assert err.status == 401 and "region" in str(err)  # region-bound keys: the hint matters
    assert_clean_error(err, DEP, [wrong])


def test_output_moderation_before_content_is_content_filter_error(client, bailian_server):
    bailian_server.push(Reply(error_at=0))
    err = call_error(client, L.ContentFilterError, stream=True)
    assert "inappropriate" in str(err)
    assert_clean_error(err, DEP, [bailian_server.default_api_key])


# gap 0: the content and the error event arrive in one read; 0.05: in separate reads.
@pytest.mark.parametrize("gap_s", [0.0, 0.05], ids=["same-read", "separate-reads"])
def test_output_moderation_mid_stream_interrupts_with_partial_text(client, bailian_server, gap_s):
    bailian_server.push(Reply(pieces=["Some", " text", " more"], error_at=2, gap_s=gap_s))
    stream = client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True)
    seen = []
    with pytest.raises(L.StreamInterruptedError) as info:
        for chunk in stream:
            seen.append(chunk)
    err = info.value
    assert err.partial_text == "Some text"
    assert isinstance(err.__cause__, L.ContentFilterError)  # what broke it, for the caller to inspect
    assert_clean_error(err, DEP, [bailian_server.default_api_key])
    assert stream.route.attempts[-1].status == "interrupted"


def test_async_mid_stream_moderation(bailian_server):
    bailian_server.push(Reply(pieces=["一", "二", "三"], error_at=1))
    cfg = make_config("bailian", bailian_server.base_url, MODEL, api_key=bailian_server.default_api_key)

    async def body(client):
        stream = await client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True)
        # (closing an interrupted stream is covered in test_stream_faults)
        with pytest.raises(L.StreamInterruptedError) as info:
            await adrain(stream)
        return info.value

    err = run(with_async_client(cfg, body))
    assert err.partial_text == "一" and isinstance(err.__cause__, L.ContentFilterError)
