"""`providers/sendable.check_headers`: headers checked before anything is sent; what passed once is
remembered (a deployment's headers repeat every call), never a credential."""

from __future__ import annotations

import pytest

import llmroute as L
from llmroute._http.request import HttpRequest
from llmroute.providers import sendable


def _request(headers: dict[str, object]) -> HttpRequest:
    return HttpRequest("POST", "http://127.0.0.1:9/v1/chat/completions", headers, {"a": 1}, False)  # type: ignore[arg-type]


def test_headers_that_passed_are_remembered_but_never_a_credential() -> None:
    request = _request({"X-Trace": "abc", "Authorization": "Bearer sk-not-a-real-key-123", "X-Api-Key": "k-456"})
    sendable.check_headers(request)
    sendable.check_headers(request)  # from the memory this time: still passes
    assert ("X-Trace", "abc") in sendable._PASSED
    remembered = {value for _, value in sendable._PASSED}
    assert "Bearer sk-not-a-real-key-123" not in remembered and "k-456" not in remembered


@pytest.mark.parametrize("value,words", [("a\r\nInjected: 1", "line break"), ("café ✓", "latin-1"),
                                         (5, "must be a string")])
def test_a_bad_value_is_refused_every_time(value: object, words: str) -> None:
    sendable.check_headers(_request({"X-Ok": "fine"}))
    for _ in range(2):
        with pytest.raises(L.InvalidRequestError) as info:
            sendable.check_headers(_request({"X-Ok": "fine", "X-Bad": value}))
        assert words in str(info.value)
