"""What counts against the platform, what is the caller's, and what is fatal."""

from __future__ import annotations

import asyncio

import pytest

from llmroute import errors as E
from llmroute.resilience.outcome import classify_failure, describe_error, is_retryable_here

KW = dict(provider="p", deployment="p:m")


@pytest.mark.parametrize(
    "error,expected",
    [
        (None, "success"),
        (E.ServerError("x", status=500, **KW), "failure"),
        (E.RateLimitError("x", status=429, retry_after=3.0, **KW), "failure"),
        (E.OverloadedError("x", status=503, **KW), "failure"),
        (E.APITimeoutError("x", timeout="ttft", seconds=10, **KW), "failure"),
        (E.APIConnectionError("x", **KW), "failure"),
        (E.StreamInterruptedError("x", partial_text="ab", **KW), "failure"),
        (E.BadRequestError("x", status=400, **KW), "caller"),
        (E.ContextLengthError("x", status=400, **KW), "caller"),
        (E.ContentFilterError("x", status=400, **KW), "caller"),
        (E.AuthenticationError("x", **KW), "fatal"),
        (E.PermissionDeniedError("x", **KW), "fatal"),
        (E.BillingError("x", **KW), "fatal"),
        (E.NotFoundError("x", **KW), "fatal"),
        (E.ProviderError("x", status=502, **KW), "failure"),
        (E.ProviderError("x", status=409, **KW), "caller"),
        (E.ProviderError("x", status=401, **KW), "fatal"),
        (E.ProviderError("x", **KW), "failure"),
        (asyncio.CancelledError(), "caller"),
        (E.BudgetExceededError("x", budget="b", limit=1, spent=2, unit="usd"), "caller"),
        (E.BuiltinConnectionError("reset"), "failure"),
        (E.BuiltinTimeoutError(), "failure"),
        (ValueError("malformed reply"), "failure"),
    ],
)
def test_classify_failure(error, expected):
    assert classify_failure(error) == expected


def test_a_platform_can_mark_a_failure_final():
    assert is_retryable_here(E.ServerError("x", **KW))
    assert not is_retryable_here(E.ServerError("x", retryable=False, **KW))
    assert not is_retryable_here(E.BadRequestError("x", **KW))
    assert not is_retryable_here(E.AuthenticationError("x", **KW))


def test_describe_error_is_short_and_scrubbed():
    err = E.ServerError("Bearer abcdefghijklmnopqrstuvwxyz " + "x" * 500, **KW)
    text = describe_error(err)
    assert text.startswith("ServerError: p:m") and len(text) <= 200
    assert "abcdefghijklmnop" not in text
    assert describe_error(None) is None
