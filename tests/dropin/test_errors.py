"""openai-python error-handling programs, run unchanged (but for import and config): `except
BadRequestError`, `except RateLimitError` retry loops, `except APIStatusError` reading status, body and
request id; and what a held deployment raises on the next call (the class that holds it, not sent)."""

from __future__ import annotations

import time

import pytest

# openai: from openai import OpenAI, APIError, APIStatusError, BadRequestError, ...
from llmroute import (APIConnectionError, APIError, APIStatusError, AuthenticationError, BadRequestError, Client,
                      InternalServerError, NotFoundError, RateLimitError)
from llmroute import AllDeploymentsFailedError, InvalidRequestError, RoutingError
from tests.dropin.conftest import MODEL, llama, loopback
from tests.servers.script import Reply

MESSAGES = [{"role": "user", "content": "Say hello."}]


def _sent(server) -> int:
    return len(server.chat_requests())


def test_except_bad_request_catches_local_and_platform_refusals(llama_server):
    client = Client(config=llama(llama_server))
    caught = []
    for kwargs in ({"temperature": 5}, {"messages": []}, {"messages": [{"role": "user", "content": "word " * 5000}]}):
        try:
            client.chat.completions.create(**{"model": "small", "messages": MESSAGES, "max_tokens": 4, **kwargs})
        except BadRequestError as e:
            caught.append((e.status_code, e.param))
    client.close()
    # temperature and messages are checked before sending (status None, param names the argument);
    # the context overflow is llama.cpp's own 400.
    assert caught == [(None, "temperature"), (None, "messages"), (400, None)]


def test_an_unknown_model_is_a_not_found_error(llama_server):
    with Client(config=llama(llama_server)) as client:
        with pytest.raises(NotFoundError) as info:
            client.chat.completions.create(model="gpt-5-nonexistent", messages=MESSAGES)
    assert isinstance(info.value, RoutingError) and info.value.param == "model"
    assert info.value.code == "model_not_found" and info.value.status_code is None


def test_api_status_error_carries_status_body_and_request_id(openai_server):
    openai_server.push(Reply(error="server", headers={"x-request-id": "req_500_a"}))
    with Client(config=loopback(openai_server)) as client:
        try:
            client.chat.completions.create(model="chat", messages=MESSAGES)
        except APIStatusError as e:
            error = e
    assert isinstance(error, InternalServerError) and isinstance(error, APIError)
    assert error.status_code == 500 and error.response.status_code == 500
    assert error.request_id == "req_500_a" and error.response.headers["x-request-id"] == error.request_id
    assert error.body["message"].startswith("The server had an error") and error.type == "server_error"
    assert error.response.json()["error"]["type"] == "server_error"
    assert error.request.method == "POST" and error.request.url.endswith("/v1/chat/completions")
    assert "authorization" not in error.response.headers and error.held is False


def test_a_retry_loop_on_rate_limit_error_keeps_working(openai_server):
    # Two 429s asking for 1 s, then an answer. The program retries on RateLimitError with its own
    # backoff; between its tries the deployment is held (Retry-After), a short hold llmroute waits out.
    for _ in range(2):
        openai_server.push(Reply(error="rate_limit", headers={"retry-after": "1"}))
    client = Client(config=loopback(openai_server))
    errors = []
    for attempt in range(5):
        try:
            response = client.chat.completions.create(model="chat", messages=MESSAGES)
            break
        except RateLimitError as e:
            errors.append(e)
            time.sleep(0.1 * 2 ** attempt)
    client.close()
    assert response.choices[0].message.content == "Hello from openai"
    assert [e.status_code for e in errors] == [429, 429] and _sent(openai_server) == 3
    assert not any(e.held for e in errors)  # each was the platform's own answer


def test_a_held_deployment_raises_the_error_that_holds_it(openai_server):
    openai_server.push(Reply(error="rate_limit", headers={"retry-after": "60", "x-request-id": "req_429_a"}))
    with Client(config=loopback(openai_server)) as client:
        with pytest.raises(RateLimitError) as first:
            client.chat.completions.create(model="chat", messages=MESSAGES)
        with pytest.raises(RateLimitError) as second:  # the same class again, nothing sent
            client.chat.completions.create(model="chat", messages=MESSAGES)
    assert _sent(openai_server) == 1
    held = second.value
    assert held.held is True and first.value.held is False
    assert (held.status_code, held.request_id, held.message) == (429, "req_429_a", first.value.message)
    assert 20 < held.retry_after <= 30  # the time left on the hold (capped at open_max_s: then a probe)
    assert [a.status for a in held.attempts] == ["skipped"]


@pytest.mark.parametrize("wrong", ["key", "model"])
def test_a_refused_key_or_unknown_model_stays_the_same_error(openai_server, wrong):
    config = loopback(openai_server, providers={"bad": {"api_key": "sk-wrong-key-123456"}},
                      tier=["bad:" + MODEL] if wrong == "key" else ["openai:gpt-nope"])
    expected = AuthenticationError if wrong == "key" else NotFoundError
    with Client(config=config) as client:
        for _ in range(3):
            with pytest.raises(expected) as info:
                client.chat.completions.create(model="chat", messages=MESSAGES)
            assert info.value.status_code == (401 if wrong == "key" else 404)
        health = client.health()
    assert info.value.held is True and _sent(openai_server) == 1
    dep = "bad:" + MODEL if wrong == "key" else "openai:gpt-nope"
    if wrong == "key":
        assert "back when the key changes" in health[dep].disabled_reason
    assert "sk-wrong-key-123456" not in str(info.value) + repr(info.value.body)


def test_mixed_holds_keep_the_exhausted_error_with_every_cause(openai_server):
    config = loopback(openai_server, providers={"bad": {"api_key": "sk-wrong-key-123456"}},
                      tier=["bad:" + MODEL, "openai:gpt-nope"])
    with Client(config=config) as client:
        with pytest.raises(APIError) as first:
            client.chat.completions.create(model="chat", messages=MESSAGES)
        with pytest.raises(APIError) as second:
            client.chat.completions.create(model="chat", messages=MESSAGES)
    for info in (first, second):
        assert type(info.value) is AllDeploymentsFailedError
        assert {type(c) for c in info.value.causes} == {AuthenticationError, NotFoundError}
    assert [a.status for a in second.value.attempts] == ["skipped", "skipped"] and _sent(openai_server) == 2
    assert second.value.status_code == 404


def test_connection_errors_and_timeouts(openai_server):
    config = loopback(openai_server)
    config["providers"]["openai"]["base_url"] = "http://127.0.0.1:9/v1"  # nothing listens there
    with Client(config=config) as client:
        with pytest.raises(APIConnectionError) as info:
            client.chat.completions.create(model="chat", messages=MESSAGES)
    assert not isinstance(info.value, APIStatusError) and info.value.status_code is None


def test_local_argument_errors_keep_their_llmroute_name():
    assert issubclass(InvalidRequestError, BadRequestError) and issubclass(RoutingError, NotFoundError)


def test_a_deployment_refused_for_its_key_comes_back_when_the_key_changes(openai_server):
    from llmroute._runtime.secrets import SecretStr

    config = loopback(openai_server, providers={"bad": {"api_key": "sk-wrong-key-123456"}}, tier=["bad:" + MODEL])
    with Client(config=config) as client:
        with pytest.raises(AuthenticationError):
            client.chat.completions.create(model="chat", messages=MESSAGES)
        with pytest.raises(AuthenticationError) as held:
            client.chat.completions.create(model="chat", messages=MESSAGES)
        assert held.value.held and _sent(openai_server) == 1
        # The key is rotated in place (what a with_options(api_key=...) client or a reload shares the
        # breakers with): the provider is frozen, so the test sets the new key the way a reload would.
        object.__setattr__(client.config.providers["bad"], "api_key", SecretStr("sk-test-openai"))
        response = client.chat.completions.create(model="chat", messages=MESSAGES)
        health = client.health()["bad:" + MODEL]
    assert response.choices[0].message.content == "Hello from openai" and _sent(openai_server) == 2
    assert health.state == "closed" and not health.disabled
