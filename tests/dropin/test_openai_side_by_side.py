"""llmroute's exceptions beside openai-python's (installed as a dev dependency): the same names with
the same parent relations, and the same attribute values for the same error from the same server
(the loopback OpenAI server on 127.0.0.1; the openai client is pointed at it with max_retries=0)."""

from __future__ import annotations

import itertools

import pytest

import llmroute
from tests.dropin.conftest import KEY, MODEL, loopback
from tests.servers.script import Reply

openai = pytest.importorskip("openai")

NAMES = ["APIError", "APIStatusError", "APIConnectionError", "APITimeoutError", "BadRequestError",
         "AuthenticationError", "PermissionDeniedError", "NotFoundError", "ConflictError",
         "UnprocessableEntityError", "RateLimitError", "InternalServerError"]
# llmroute always called 409 and 422 bad requests: they stay BadRequestErrors (errors.py says so).
DELIBERATE = {("ConflictError", "BadRequestError"), ("UnprocessableEntityError", "BadRequestError")}
MESSAGES = [{"role": "user", "content": "Say hello."}]


def test_the_names_and_their_parents_are_openais():
    for a, b in itertools.product(NAMES, NAMES):
        ours, theirs = issubclass(getattr(llmroute, a), getattr(llmroute, b)), issubclass(getattr(openai, a),
                                                                                         getattr(openai, b))
        if (a, b) in DELIBERATE:
            assert ours and not theirs
        else:
            assert ours == theirs, (a, b)
    for name in NAMES:
        assert name in llmroute.__all__


CASES = {
    "400": (Reply(error="bad_request"), {}),
    "401": (None, {"api_key": "sk-wrong-key-abcdef"}),
    "404": (None, {"model": "gpt-nope"}),
    "409": (Reply(status=409, body={"error": {"message": "conflict", "type": "invalid_request_error",
                                              "param": None, "code": "conflict"}}), {}),
    "422": (Reply(status=422, body={"error": {"message": "bad field", "type": "invalid_request_error",
                                              "param": "messages", "code": None}}), {}),
    "429": (Reply(error="rate_limit"), {}),
    "500": (Reply(error="server"), {}),
    "503": (Reply(error="overloaded"), {}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_same_error_has_the_same_shape(openai_server, case):
    reply, change = CASES[case]
    if reply is not None:
        reply.headers = {"x-request-id": f"req_{case}"}
        for _ in range(2):  # one for each client
            openai_server.push(reply)
    model = change.get("model", MODEL)
    theirs_client = openai.OpenAI(api_key=change.get("api_key", KEY), base_url=openai_server.base_url, max_retries=0)
    with pytest.raises(openai.APIStatusError) as theirs:
        theirs_client.chat.completions.create(model=model, messages=MESSAGES)
    theirs_client.close()

    config = loopback(openai_server, providers={"p": {"api_key": change.get("api_key", KEY)}}, tier=[f"p:{model}"])
    with llmroute.Client(config=config) as client:
        with pytest.raises(llmroute.APIStatusError) as ours:
            client.chat.completions.create(model="chat", messages=MESSAGES)
    o, e = theirs.value, ours.value
    assert isinstance(e, getattr(llmroute, type(o).__name__))  # the same class (or a finer one of it)
    for attribute in ("status_code", "body", "code", "param", "type"):
        assert getattr(e, attribute) == getattr(o, attribute), attribute
    assert e.response.status_code == o.response.status_code
    if reply is not None:
        assert e.request_id == o.request_id == f"req_{case}"
        assert e.response.headers["x-request-id"] == o.response.headers["x-request-id"]
    assert e.message and isinstance(e.message, str)
