"""Ollama's OpenAI route through llmroute's client (docs/platforms.md §9, §11.12): the parameters it
ignores are refused (or dropped when harmless) before anything is sent, usage only with
include_usage, the `reasoning` field on message and delta, and its errors (404 model not found,
400 "The prompt is too long", 503)."""

from __future__ import annotations

import pytest

import llmroute as L
from tests.providers.helpers import (
    MESSAGES, SERVER_PROMPT_TOKENS, TIER, assert_clean_error, call_error, drain, expected_estimate, make_client,
)
from tests.servers.script import Reply

MODEL = "qwen2.5:7b"  # a colon in the model id
DEP = f"ollama:{MODEL}"
TEXT = "Hello from ollama"


@pytest.fixture
def client(ollama_server):
    with make_client("ollama", ollama_server.base_url, MODEL) as c:
        yield c


def test_plain_call_with_reasoning_field(client, ollama_server):
    ollama_server.push(Reply(reasoning=["hm", "m"]))
    resp = client.chat.completions.create(model=TIER, messages=MESSAGES)
    assert ollama_server.last_request.json["model"] == MODEL
    assert resp.choices[0].message.content == TEXT and resp.choices[0].message.reasoning_content == "hmm"
    assert (resp.usage.prompt_tokens, resp.usage.completion_tokens) == (SERVER_PROMPT_TOKENS, 5)
    assert resp.route.usage_estimated is False and resp.route.deployment == DEP


def test_stream_usage_needs_include_usage(client, ollama_server):
    ollama_server.push(Reply(reasoning=["r"]))
    with client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True) as stream:
        _, text, reasoning = drain(stream)
    assert ollama_server.last_request.json["stream_options"] == {"include_usage": True}
    assert (text, reasoning) == (TEXT, "r")
    assert stream.response.usage.completion_tokens == 4 and stream.response.route.usage_estimated is False


def test_without_include_usage_usage_is_estimated(ollama_server):
    with make_client("ollama", ollama_server.base_url, MODEL, include_usage=False) as c:
        with c.chat.completions.create(model=TIER, messages=MESSAGES, stream=True) as stream:
            drain(stream)
    assert stream.response.route.usage_estimated is True
    assert (stream.response.usage.prompt_tokens, stream.response.usage.completion_tokens) == expected_estimate(TEXT)


@pytest.mark.parametrize("params", [{"n": 2}, {"logit_bias": {"42": 5}}, {"tool_choice": "required"}],
                         ids=["n", "logit_bias", "tool_choice"])
def test_ignored_parameters_are_refused_before_sending(client, ollama_server, params):
    before = len(ollama_server.chat_requests())
    err = call_error(client, L.BadRequestError, **params)
    assert next(iter(params)) in str(err) and len(ollama_server.chat_requests()) == before
    assert_clean_error(err, DEP)


def test_harmless_parameters_are_dropped(client, ollama_server):
    client.chat.completions.create(model=TIER, messages=MESSAGES, n=1, user="u-1", tool_choice="auto")
    sent = ollama_server.last_request.json
    assert not {"n", "user", "tool_choice", "logit_bias"} & sent.keys()


def test_unknown_model_is_not_found(ollama_server):
    with make_client("ollama", ollama_server.base_url, "llama9:1b") as c:
        err = call_error(c, L.NotFoundError)
    assert "not found" in str(err)
    assert_clean_error(err, "ollama:llama9:1b")


def test_prompt_too_long(make_server):
    server = make_server("ollama", models={"tiny:1b": 3})
    with make_client("ollama", server.base_url, "tiny:1b") as c:
        err = call_error(c, L.ContextLengthError)
    assert err.status == 400


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("reply, cls, status", [
    (Reply(error="overloaded"), L.OverloadedError, 503),
    (Reply(error="server"), L.ServerError, 500),
    (Reply(error="bad_request"), L.BadRequestError, 400),
], ids=["503", "500", "400"])
def test_errors(client, ollama_server, reply, cls, status, stream):
    ollama_server.push(reply)
    err = call_error(client, cls, stream=stream)
    assert err.status == status
    assert_clean_error(err, DEP)
