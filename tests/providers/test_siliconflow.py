"""SiliconFlow through llmroute's client (docs/platforms.md §3, §11): cumulative usage on every stream chunk
(the last wins, never a sum), `reasoning_content`, `system_fingerprint: ""`, and the non-OpenAI error
body `{"code": int, "message", "data"}` (20012 model missing, 403 real-name, 429 naming TPM/RPM, 503)."""

from __future__ import annotations

import pytest

import llmroute as L
from tests.providers.helpers import (
    MESSAGES, SERVER_PROMPT_TOKENS, TIER, assert_clean_error, call_error, drain, expected_estimate, make_client,
)
from tests.servers.script import Reply

MODEL = "Qwen/Qwen2.5-7B-Instruct"  # 32,768-token window
DEP = f"siliconflow:{MODEL}"
TEXT = "Hello from siliconflow"


@pytest.fixture
def client(siliconflow_server):
    with make_client("siliconflow", siliconflow_server.base_url, MODEL,
                     api_key=siliconflow_server.default_api_key) as c:
        yield c


def test_plain_call(client, siliconflow_server):
    siliconflow_server.push(Reply(cached_tokens=1))
    resp = client.chat.completions.create(model=TIER, messages=MESSAGES, max_tokens=50)
    sent = siliconflow_server.last_request
    assert sent.bearer == siliconflow_server.default_api_key and sent.json["max_tokens"] == 50
    assert resp.choices[0].message.content == TEXT and resp.choices[0].finish_reason == "stop"
    assert (resp.usage.prompt_tokens, resp.usage.completion_tokens) == (SERVER_PROMPT_TOKENS, 3)
    assert resp.usage.prompt_tokens_details.cached_tokens == 1
    assert resp.route.usage_estimated is False


def test_stream_cumulative_usage_last_wins_never_summed(client, siliconflow_server):
    pieces = ["a", " b", " c", " d", " e"]
    siliconflow_server.push(Reply(pieces=pieces, reasoning=["why"]))
    with client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True) as stream:
        chunks, text, reasoning = drain(stream)
    assert siliconflow_server.last_request.json["stream_options"] == {"include_usage": True}
    assert text == "a b c d e" and reasoning == "why"
    seen = [c.usage.completion_tokens for c in chunks if c.usage is not None]
    assert len(seen) >= 6 and seen == sorted(seen)  # cumulative on every chunk
    final = stream.response
    assert final.usage.completion_tokens == 6 and final.usage.prompt_tokens == SERVER_PROMPT_TOKENS
    assert final.usage.total_tokens == SERVER_PROMPT_TOKENS + 6  # a sum over chunks would be far larger
    assert final.choices[0].message.reasoning_content == "why"
    assert final.route.usage_estimated is False


def test_missing_usage_is_estimated(client, siliconflow_server):
    siliconflow_server.push(Reply(omit_usage=True))
    with client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True) as stream:
        drain(stream)
    assert stream.response.route.usage_estimated is True
    assert (stream.response.usage.prompt_tokens, stream.response.usage.completion_tokens) == expected_estimate(TEXT)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "reply, cls, status",
    [
        (Reply(error="real_name"), L.PermissionDeniedError, 403),
        (Reply(error="forbidden"), L.BillingError, 403),  # "your account balance is insufficient"
        (Reply(error="rate_limit"), L.RateLimitError, 429),
        (Reply(error="rate_limit_rpm", headers={"Retry-After": "2"}), L.RateLimitError, 429),
        (Reply(error="overloaded"), L.OverloadedError, 503),
        (Reply(error="server"), L.ServerError, 500),
        (Reply(error="bad_request"), L.BadRequestError, 400),
    ],
    ids=["403-real-name", "403-balance", "429-tpm", "429-rpm", "503", "500", "400"],
)
def test_documented_errors(client, siliconflow_server, reply, cls, status, stream):
    siliconflow_server.push(reply)
    err = call_error(client, cls, stream=stream)
    assert err.status == status and err.provider_message  # read from the {"code","message"} body
    assert_clean_error(err, DEP, [siliconflow_server.default_api_key])
    if reply.error == "rate_limit_rpm":
        assert err.retry_after == 2.0 and "RPM" in str(err)


def test_model_does_not_exist_20012_is_not_found(siliconflow_server):
    with make_client("siliconflow", siliconflow_server.base_url, "Qwen/Nope",
                     api_key=siliconflow_server.default_api_key) as c:
        err = call_error(c, L.NotFoundError)
    assert err.status == 400 and err.code == "20012"  # a 400 by status, a missing model by its code
    assert_clean_error(err, "siliconflow:Qwen/Nope", [siliconflow_server.default_api_key])


def test_context_overflow(client, siliconflow_server):
    err = call_error(client, L.ContextLengthError, max_tokens=40_000)
    assert err.status == 400
    assert_clean_error(err, DEP, [siliconflow_server.default_api_key])


def test_wrong_key(siliconflow_server):
    wrong = "sk-siliconflow-wrong-000000"
    with make_client("siliconflow", siliconflow_server.base_url, MODEL, api_key=wrong) as c:
        err = call_error(c, L.AuthenticationError)
    assert err.status == 401
    assert_clean_error(err, DEP, [wrong])
