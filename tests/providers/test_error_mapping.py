"""Every platform's error envelope and status -> the right typed error, with retry_after and request id."""

from __future__ import annotations

import json

import pytest

from llmroute import errors as E
from llmroute.providers.error_mapping import error_from_response, parse_error_body, retry_after_from_headers


def err(status, body, headers=None, kind="openai-compatible"):
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return error_from_response(status, headers or {}, content, provider="p", deployment="p:m", kind=kind)


@pytest.mark.parametrize(
    "status, body, kind, cls",
    [
        (401, {"error": {"message": "Invalid API key", "type": "invalid_request_error", "code": "invalid_api_key"}}, "together", E.AuthenticationError),
        (402, {"error": {"message": "Credits exhausted", "type": "payment_required"}}, "together", E.BillingError),
        (403, {"error": {"message": "Input validation error: input token count + max_tokens must be less than the context length"}}, "together", E.ContextLengthError),
        (429, {"error": {"message": "rate limited", "type": "dynamic_request_limited"}}, "together", E.RateLimitError),
        (503, {"error": {"message": "The server is overloaded", "type": "server_error"}}, "together", E.OverloadedError),
        (404, {"error": {"message": "Model not found, inaccessible, and/or not deployed", "param": "model", "code": "NOT_FOUND"}}, "fireworks", E.NotFoundError),
        (412, {"error": {"message": "Account suspended"}}, "fireworks", E.PermissionDeniedError),
        (400, {"code": 20012, "message": "Model does not exist. Please check it carefully.", "data": None}, "siliconflow", E.NotFoundError),
        (403, {"code": 30001, "message": "Sorry, your account requires real-name verification", "data": None}, "siliconflow", E.PermissionDeniedError),
        (429, {"code": 50603, "message": "System is too busy now. TPM limit reached.", "data": None}, "siliconflow", E.RateLimitError),
        (400, {"error": {"code": "data_inspection_failed", "param": None, "message": "Input data may contain inappropriate content.", "type": "data_inspection_failed"}, "id": "chatcmpl-1"}, "bailian", E.ContentFilterError),
        (400, {"error": {"code": "Arrearage", "message": "Access denied, please make sure your account is in good standing."}}, "bailian", E.BillingError),
        (400, {"code": "InvalidParameter", "message": "Range of input length should be [1, 30720]", "request_id": "r-1"}, "bailian", E.ContextLengthError),
        (401, {"code": "InvalidApiKey", "message": "Invalid API-key provided.", "request_id": "r-2"}, "bailian", E.AuthenticationError),
        (429, {"code": "Throttling.RateQuota", "message": "Requests rate limit exceeded", "request_id": "r-3"}, "bailian", E.RateLimitError),
        (429, {"error": {"message": "You exceeded your current quota", "code": "insufficient_quota"}}, "bailian", E.RateLimitError),
        (429, {"error": {"message": "You exceeded your current quota", "code": "insufficient_quota"}}, "openai-compatible", E.BillingError),
        (400, {"error": {"message": "Input length (5000) exceeds model's maximum context length (4096).", "type": "BadRequestError", "code": 400}}, "vllm", E.ContextLengthError),
        (400, {"object": "error", "message": "bad json", "type": "BadRequestError", "param": None, "code": 400}, "sglang", E.BadRequestError),
        (422, {"error": "`inputs` tokens + `max_new_tokens` must be <= 4096. Given: 5000", "error_type": "validation"}, "tgi", E.ContextLengthError),
        (429, {"error": "Model is overloaded", "error_type": "overloaded"}, "tgi", E.OverloadedError),
        (424, {"error": "generation failed", "error_type": "generation"}, "tgi", E.ServerError),
        (404, {"error": {"message": "model 'x' not found", "type": "not_found_error"}}, "ollama", E.NotFoundError),
        (400, {"error": {"code": 400, "message": "request (5024 tokens) exceeds the available context size (2048 tokens)", "type": "exceed_context_size_error"}}, "llamacpp", E.ContextLengthError),
        (500, b"<html>oops</html>", "vllm", E.ServerError),
        (502, b"", "vllm", E.ServerError),
    ],
)
def test_classification(status, body, kind, cls):
    error = err(status, body, kind=kind)
    assert type(error) is cls
    assert error.status == status and error.deployment == "p:m"
    assert error.status_code == status  # openai-python's name for the same value
    assert "p:m" in str(error)


def test_status_code_is_status():
    error = E.ServerError("x", status=502)
    assert (error.status, error.status_code) == (502, 502)
    error.status_code = 503  # one value under two names
    assert error.status == 503
    error.status = 504
    assert error.status_code == 504
    assert E.APIConnectionError("refused").status_code is None  # no response, no status


def test_retryable_flags():
    assert err(429, {"error": {"message": "x"}}).retryable
    assert err(503, {"error": {"message": "x"}}).retryable
    assert not err(401, {"error": {"message": "x"}}).retryable
    assert not err(400, {"error": {"message": "x"}}).retryable


def test_request_id_from_body_or_headers():
    assert err(400, {"code": "InvalidParameter", "message": "x", "request_id": "abc"}).request_id == "abc"
    assert err(500, {"error": {"message": "x"}}, {"x-request-id": "hdr-1"}).request_id == "hdr-1"
    assert err(500, {"code": 1, "message": "x"}, {"x-siliconcloud-trace-id": "sf-1"}).request_id == "sf-1"


@pytest.mark.parametrize(
    "headers, expected",
    [
        ({"retry-after": "7"}, 7.0),
        ({"retry-after-ms": "1500"}, 1.5),
        ({"x-ratelimit-reset": "2"}, 2.0),
        ({"x-ratelimit-reset-requests": "12ms", "x-ratelimit-reset-tokens": "6m0s"}, 360.0),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0.0),
        ({}, None),
        ({"retry-after": "soon"}, None),
    ],
)
def test_retry_after(headers, expected):
    assert retry_after_from_headers(headers, now=1e10) == expected


def test_retry_after_reaches_the_error():
    assert err(429, {"error": {"message": "slow down"}}, {"retry-after": "3"}).retry_after == 3.0


def test_key_echoed_by_platform_is_scrubbed():
    from llmroute._runtime.secrets import SecretStr

    SecretStr("sk-live-abcdef0123456789")
    error = err(401, {"error": {"message": "Incorrect API key provided: sk-live-abcdef0123456789"}})
    assert "abcdef0123456789" not in str(error) + repr(error) + (error.provider_message or "")


def test_parse_error_body_returns_none_for_non_errors():
    assert parse_error_body({"choices": []}) is None
    assert parse_error_body([1, 2]) is None
