"""The native DashScope protocol through llmroute's client (docs/platforms.md §4b, §11.10): body
`{model, input: {messages}, parameters}`, `X-DashScope-SSE: enable`, `id:`/`event:` framing with a
`:HTTP_STATUS/200` comment and no `[DONE]`, usage `input_tokens/output_tokens` on every event (last
wins), cumulative text unless `incremental_output`, `finish_reason: "null"` mid-stream, flat
`{code, message, request_id}` errors and `event:error` mid-stream."""

from __future__ import annotations

import pytest

import llmroute as L
from tests.providers.helpers import (
    MESSAGES, SERVER_PROMPT_TOKENS, TIER, adrain, assert_clean_error, call_error, drain, make_client, make_config,
    run, with_async_client,
)
from tests.servers.bailian import NATIVE_PATH
from tests.servers.script import Reply

MODEL = "qwen-plus"
DEP = f"bailian:{MODEL}"
TEXT = "Hello from bailian"


@pytest.fixture
def client(bailian_server):
    with make_client("bailian", bailian_server.native_url, MODEL, api_key=bailian_server.default_api_key,
                     protocol="native") as c:
        yield c


def test_plain_call_body_and_usage(bailian_server):
    bailian_server.push(Reply(cached_tokens=2))
    with make_client("bailian", bailian_server.native_url, MODEL, api_key=bailian_server.default_api_key,
                     protocol="native", deployment={"plain_via_stream": False}) as client:
        resp = client.chat.completions.create(model=TIER, messages=MESSAGES, max_tokens=20, temperature=0.1)
    sent = bailian_server.last_request
    assert sent.path == NATIVE_PATH and sent.bearer == bailian_server.default_api_key
    assert "x-dashscope-sse" not in sent.headers
    assert sent.json["model"] == MODEL and sent.json["input"] == {"messages": MESSAGES}
    assert "messages" not in sent.json
    assert sent.json["parameters"]["max_tokens"] == 20 and sent.json["parameters"]["temperature"] == 0.1
    assert sent.json["parameters"]["result_format"] == "message"
    assert resp.choices[0].message.content == TEXT and resp.choices[0].finish_reason == "stop"
    assert (resp.usage.prompt_tokens, resp.usage.completion_tokens, resp.usage.total_tokens) == (4, 3, 7)
    assert resp.usage.prompt_tokens_details.cached_tokens == 2
    assert resp.route.usage_estimated is False


def test_stream_incremental_without_done_marker(client, bailian_server):
    bailian_server.push(Reply(reasoning=["先", "想"], pieces=["你", "好", "！"]))
    with client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True) as stream:
        chunks, text, reasoning = drain(stream)
    sent = bailian_server.last_request
    assert sent.headers["x-dashscope-sse"] == "enable"  # streaming is switched on by the header
    assert sent.json["parameters"]["incremental_output"] is True
    assert "stream" not in sent.json and "stream_options" not in sent.json
    assert text == "你好！" and reasoning == "先想"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][:-1] == [None] * 5  # "null" -> None
    final = stream.response
    assert final.choices[0].finish_reason == "stop" and final.choices[0].message.reasoning_content == "先想"
    # Usage on every event, cumulative: the last one, not a sum.
    assert (final.usage.prompt_tokens, final.usage.completion_tokens) == (SERVER_PROMPT_TOKENS, 5)
    assert final.route.usage_estimated is False


def test_stream_cumulative_text_is_turned_into_deltas(client, bailian_server):
    bailian_server.push(Reply(pieces=["我是", "阿里", "云"]))
    with client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True,
                                        extra_body={"incremental_output": False}) as stream:
        chunks, text, _ = drain(stream)
    assert bailian_server.last_request.json["parameters"]["incremental_output"] is False
    assert [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content] == \
        ["我是", "阿里", "云"]
    assert text == "我是阿里云" and stream.response.choices[0].message.content == "我是阿里云"


def test_missing_usage_is_estimated(client, bailian_server):
    bailian_server.push(Reply(omit_usage=True))
    resp = client.chat.completions.create(model=TIER, messages=MESSAGES)
    assert resp.route.usage_estimated is True and resp.usage.completion_tokens > 0


def test_parameter_without_native_equivalent_is_refused_before_sending(client, bailian_server):
    before = len(bailian_server.chat_requests())
    err = call_error(client, L.BadRequestError, logit_bias={"1": 2})
    assert "logit_bias" in str(err) and len(bailian_server.chat_requests()) == before
    assert_clean_error(err, DEP, [bailian_server.default_api_key])


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "reply, cls, status",
    [
        (Reply(error="arrearage"), L.BillingError, 400),
        (Reply(error="content_filter"), L.ContentFilterError, 400),
        (Reply(error="context"), L.ContextLengthError, 400),
        (Reply(error="rate_limit", headers={"Retry-After": "5"}), L.RateLimitError, 429),
        # §4 Rate limits: "Allocated quota exceeded" is the TPM limit, back within about a minute.
        (Reply(error="quota"), L.RateLimitError, 429),
        (Reply(error="overloaded"), L.OverloadedError, 503),
        (Reply(error="not_found"), L.NotFoundError, 404),
    ],
    ids=["Arrearage", "DataInspectionFailed", "input-length", "Throttling.RateQuota", "AllocationQuota", "503",
         "ModelNotFound"],
)
@pytest.mark.parametrize("sse_errors", [False, True], ids=["json", "sse-framed"])
def test_flat_native_errors(client, bailian_server, reply, cls, status, stream, sse_errors, monkeypatch):
    # A streamed call's refusal may come as an SSE frame with the error status: the same error,
    # code and request id are read from its data line.
    monkeypatch.setattr(bailian_server, "sse_errors", sse_errors)
    bailian_server.push(reply)
    err = call_error(client, cls, stream=stream)
    assert err.status == status
    if cls is not L.ContextLengthError:  # (the engine re-words that one and drops the id)
        assert err.request_id  # the native body carries request_id
    assert_clean_error(err, DEP, [bailian_server.default_api_key])
    if reply.headers:
        assert err.retry_after == 5.0


def test_invalid_api_key(bailian_server):
    wrong = "sk-dashscope-intl-key-used-in-beijing"
    with make_client("bailian", bailian_server.native_url, MODEL, api_key=wrong, protocol="native") as c:
        err = call_error(c, L.AuthenticationError)
    assert err.code == "InvalidApiKey"
    assert_clean_error(err, DEP, [wrong])


def test_error_event_before_content(client, bailian_server):
    bailian_server.push(Reply(error_at=0, error="content_filter"))
    err = call_error(client, L.ContentFilterError, stream=True)
    assert_clean_error(err, DEP, [bailian_server.default_api_key])


@pytest.mark.parametrize("kind, cls", [
    ("access_denied", L.PermissionDeniedError), ("not_found", L.NotFoundError), ("bad_request", L.BadRequestError),
    ("server", L.ServerError), ("rate_limit", L.RateLimitError),
])
def test_an_error_event_is_classified_by_its_http_status_line(client, bailian_server, kind, cls):
    # event:error carries ":HTTP_STATUS/403": without it AccessDenied or ModelNotFound looked like
    # a retryable server error.
    bailian_server.push(Reply(pieces=["一", "二"], error_at=1, error=kind))
    stream = client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True)
    with pytest.raises(L.StreamInterruptedError) as info:
        drain(stream)
    assert type(info.value.__cause__) is cls
    assert info.value.__cause__.status == bailian_server.native_errors[kind].status


def test_error_event_after_content_interrupts(client, bailian_server):
    bailian_server.push(Reply(pieces=["一", "二", "三"], error_at=2))
    stream = client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True)
    with pytest.raises(L.StreamInterruptedError) as info:
        drain(stream)
    assert info.value.partial_text == "一二"
    assert isinstance(info.value.__cause__, L.ContentFilterError)  # output moderation (DataInspectionFailed)
    assert_clean_error(info.value, DEP, [bailian_server.default_api_key])


def test_async_native_stream(bailian_server):
    bailian_server.push(Reply(pieces=["a", "b"]))
    cfg = make_config("bailian", bailian_server.native_url, MODEL, api_key=bailian_server.default_api_key,
                      protocol="native")

    async def body(client):
        stream = await client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True)
        async with stream:
            _, text, _ = await adrain(stream)
        return text, stream.response

    text, final = run(with_async_client(cfg, body))
    assert text == "ab" and final.usage.completion_tokens == 2 and final.route.usage_estimated is False
