"""Programs written for openai-python, run unchanged (but for the client line) against llmroute and
openai-python side by side, on the real llama.cpp server."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest
from pydantic import BaseModel

import llmroute
from tests.openai_compat.conftest import make
from tests.servers.llamacpp import MODEL_ALIAS as MODEL

MESSAGES = [{"role": "user", "content": "Say hello."}]


class City(BaseModel):
    name: str
    country: str


@pytest.fixture
def client(sdk, llama_server):
    c = make(sdk, llama_server.base_url, MODEL, max_retries=0)
    yield c
    c.close()


def test_plain_call_and_its_fields(sdk, client):
    resp = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=8, temperature=0)
    message = resp.choices[0].message
    assert message.content and message.role == "assistant"
    assert message.refusal is None and message.function_call is None and message.audio is None
    assert message.annotations in (None, [])
    assert resp.service_tier is None or isinstance(resp.service_tier, str)
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens > 0
    assert resp.to_dict()["choices"][0]["message"]["content"] == message.content
    assert json.loads(resp.to_json())["model"] == resp.model
    assert "timings" in resp.model_extra  # llama.cpp's own field, kept by both


def test_the_same_greedy_answer_from_both(llama_server):
    from tests.openai_compat.conftest import _sdk

    answers = []
    for name in ("openai", "llmroute"):
        with make(_sdk(name), llama_server.base_url, MODEL) as c:
            resp = c.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=8, temperature=0, seed=1)
            answers.append((resp.choices[0].message.content, resp.usage.completion_tokens))
    assert answers[0] == answers[1]


def test_streaming_loop(client):
    stream = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=8, stream=True)
    text = ""
    for chunk in stream:  # openai-python's loop: no usage-only chunk unless stream_options asked for one
        text += chunk.choices[0].delta.content or ""
    assert text


def test_with_options_and_timeout_forms(sdk, client, llama_server):
    quick = client.with_options(timeout=30.0, max_retries=1)
    assert quick.max_retries == 1
    resp = quick.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4)
    assert resp.choices[0].message.content is not None
    with make(sdk, llama_server.base_url, MODEL, timeout=sdk.Timeout(30.0, connect=5.0)) as c:
        assert c.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4, timeout=20).choices
    assert str(client.base_url) == llama_server.base_url + "/"


def test_models_list_ids_are_callable(client):
    ids = [m.id for m in client.models.list()]
    assert MODEL in ids
    assert client.chat.completions.create(model=ids[0], messages=MESSAGES, max_tokens=2).choices


def test_with_raw_response(client):
    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=MESSAGES, max_tokens=4)
    assert raw.status_code == 200 and raw.headers.get("server") == "llama.cpp"
    completion = raw.parse()
    assert completion.choices[0].message.content is not None


def test_with_streaming_response(client):
    with client.chat.completions.with_streaming_response.create(model=MODEL, messages=MESSAGES,
                                                                max_tokens=4) as response:
        assert response.status_code == 200
        completion = response.parse()
    assert completion.choices[0].message.content is not None


def test_parse_into_a_pydantic_model(client):
    completion = client.chat.completions.parse(
        model=MODEL, messages=[{"role": "user", "content": "Name a city in France, as JSON."}],
        response_format=City, max_tokens=200, temperature=0)
    parsed = completion.choices[0].message.parsed
    assert isinstance(parsed, City) and parsed.name


def test_a_cut_answer_cannot_be_parsed(sdk, client):
    with pytest.raises(sdk.module.LengthFinishReasonError):
        client.chat.completions.parse(model=MODEL, messages=[{"role": "user", "content": "A city, as JSON."}],
                                      response_format=City, max_tokens=3)


def test_stream_helper_events(client):
    text = ""
    with client.chat.completions.stream(model=MODEL, messages=MESSAGES, max_tokens=100, stop=["."],
                                        temperature=0) as stream:
        for event in stream:
            if event.type == "content.delta":
                text += event.delta
        final = stream.get_final_completion()
    assert text and final.choices[0].message.content == text


def test_async_program(sdk, llama_server):
    async def main():
        client = make(sdk, llama_server.base_url, MODEL, is_async=True)
        try:
            resp = await client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4)
            raw = await client.chat.completions.with_raw_response.create(model=MODEL, messages=MESSAGES, max_tokens=4)
            async with client.chat.completions.with_streaming_response.create(
                    model=MODEL, messages=MESSAGES, max_tokens=4) as response:
                streamed = await response.parse()
            parsed = await client.chat.completions.parse(
                model=MODEL, messages=[{"role": "user", "content": "A city in Spain, as JSON."}],
                response_format=City, max_tokens=200, temperature=0)
            return resp, raw.parse(), streamed, parsed
        finally:
            await client.close()

    resp, raw, streamed, parsed = asyncio.run(main())
    assert resp.choices and raw.choices and streamed.choices
    assert isinstance(parsed.choices[0].message.parsed, City)


def test_a_refused_connection_is_api_connection_error(sdk):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with make(sdk, f"http://127.0.0.1:{port}/v1", MODEL, max_retries=0) as c:
        with pytest.raises(sdk.module.APIConnectionError):
            c.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2)


def test_openai_dumps_validate_as_llmroute_types(llama_server):
    openai = pytest.importorskip("openai")
    with openai.OpenAI(base_url=llama_server.base_url, api_key="x") as c:
        resp = c.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4)
    dump = resp.model_dump()
    dump["usage"]["completion_tokens_details"] = None  # as openai-python dumps a platform that sent none
    ours = llmroute.ChatCompletion.model_validate(dump)
    assert ours.choices[0].message.content == resp.choices[0].message.content
    assert ours.usage.completion_tokens_details.reasoning_tokens == 0 and ours.model_extra.get("timings")
    chunk = llmroute.ChatCompletionChunk.model_validate(
        {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": MODEL, "service_tier": None,
         "choices": [{"index": 0, "delta": {"content": "", "function_call": None, "refusal": None,
                                            "role": "assistant", "tool_calls": None}, "finish_reason": None}],
         "usage": None})
    assert chunk.choices[0].delta.content == "" and chunk.choices[0].delta.function_call is None


def _fields(model_cls) -> set:
    return set(model_cls.model_fields)


def test_every_field_openai_declares_is_declared_here():
    openai = pytest.importorskip("openai")
    from openai.types import completion_usage as ou
    from openai.types.chat import chat_completion as oc, chat_completion_chunk as ocs

    from llmroute import types as T

    pairs = [(oc.ChatCompletion, T.ChatCompletion), (oc.Choice, T.Choice),
             (openai.types.chat.ChatCompletionMessage, T.ChatCompletionMessage), (ou.CompletionUsage, T.Usage),
             (ou.CompletionTokensDetails, T.CompletionTokensDetails), (ou.PromptTokensDetails, T.PromptTokensDetails),
             (ocs.ChatCompletionChunk, T.ChatCompletionChunk), (ocs.Choice, T.ChunkChoice),
             (ocs.ChoiceDelta, T.ChoiceDelta), (ocs.ChoiceDeltaToolCall, T.ToolCallDelta)]
    for theirs, ours in pairs:
        assert _fields(theirs) <= _fields(ours), (theirs.__name__, _fields(theirs) - _fields(ours))
