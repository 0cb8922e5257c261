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

NAMES = ["OpenAIError", "APIError", "APIStatusError", "APIConnectionError", "APITimeoutError", "BadRequestError",
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
    # openai's root also holds the errors of `parse()`, as there
    for name in ("LengthFinishReasonError", "ContentFilterFinishReasonError"):
        assert issubclass(getattr(openai, name), openai.OpenAIError)
        assert issubclass(getattr(llmroute, name), llmroute.OpenAIError)


def test_arguments_given_as_openais_not_given_sentinels_are_left_out(openai_server):
    # openai-python code says "leave this out" with NOT_GIVEN / omit (`tools=tools or NOT_GIVEN`): both
    # clients send the same body, without those fields, and answer alike.
    absent = {"temperature": openai.NOT_GIVEN, "tools": openai.omit, "stream_options": openai.NOT_GIVEN,
              "max_tokens": getattr(openai, "not_given", openai.NOT_GIVEN), "timeout": openai.NOT_GIVEN}
    with openai.OpenAI(api_key=KEY, base_url=openai_server.base_url, max_retries=0) as theirs:
        theirs.chat.completions.create(model=MODEL, messages=MESSAGES, **absent)
    sent_by_openai = openai_server.requests[-1].json
    with llmroute.Client(config=loopback(openai_server)) as client:
        answer = client.chat.completions.create(model="chat", messages=MESSAGES, **absent)
        assert answer.choices[0].message.content
        sent = openai_server.requests[-1].json  # a plain call streamed underneath asks for usage itself
        assert not {"temperature", "tools", "max_tokens", "timeout"} & set(sent)
        with client.chat.completions.stream(model="chat", messages=MESSAGES, **absent) as stream:
            assert stream.get_final_completion().choices[0].message.content == answer.choices[0].message.content
        vectors = client.embeddings.create(model="openai:text-embedding-3-small", input="hi",
                                           dimensions=openai.NOT_GIVEN, user=openai.omit)
        assert len(vectors.data[0].embedding) == 1536
        assert "dimensions" not in openai_server.requests[-1].json
    assert not set(absent) & set(sent_by_openai)


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
