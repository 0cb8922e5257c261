"""`Stream.response` / `AsyncStream.response` behave alike: before the end of the stream (before the
loop, inside it, or after an early close) they raise `StreamNotFinishedError`, a clear typed error,
and the loop goes on unharmed; `get_final_completion()` reads the rest in both."""

from __future__ import annotations

import asyncio

import pytest

import llmroute as L
from tests.providers.helpers import MESSAGES, TIER, make_config
from tests.servers.script import Reply

PIECES = ["one", " two", " three"]


def _config(server) -> dict:
    return make_config("vllm", server.base_url, "Qwen/Qwen2.5-7B-Instruct")


def test_sync_response_inside_the_loop_raises_and_the_loop_finishes(vllm_server):
    vllm_server.push(Reply(pieces=PIECES))
    with L.Client(_config(vllm_server)) as client:
        stream = client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True)
        with pytest.raises(L.StreamNotFinishedError, match="before it|ended"):
            stream.response  # before the loop
        texts, errors = [], []
        for chunk in stream:
            texts.append(chunk.choices[0].delta.content or "" if chunk.choices else "")
            try:
                stream.response
            except L.StreamNotFinishedError as exc:
                errors.append(exc)
        final = stream.response
    assert "".join(texts) == "one two three" and final.choices[0].message.content == "one two three"
    assert errors and all(isinstance(e, RuntimeError) and isinstance(e, L.LLMRouteError) for e in errors)
    assert final.route.attempts[-1].status == "ok" and len(final.route.attempts) == 1


def test_async_response_inside_the_loop_raises_the_same_error(vllm_server):
    vllm_server.push(Reply(pieces=PIECES))

    async def main():
        async with L.AsyncClient(_config(vllm_server)) as client:
            stream = await client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True)
            with pytest.raises(L.StreamNotFinishedError):
                stream.response
            seen = 0
            async for _ in stream:
                with pytest.raises(L.StreamNotFinishedError):
                    stream.response
                seen += 1
            return seen, stream.response

    seen, final = asyncio.run(main())
    assert seen > 0 and final.choices[0].message.content == "one two three"


def test_get_final_completion_reads_the_rest_in_both(vllm_server):
    vllm_server.push(Reply(pieces=PIECES), Reply(pieces=PIECES))
    with L.Client(_config(vllm_server)) as client:
        stream = client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True)
        next(iter(stream))
        final = stream.get_final_completion()
    assert final.choices[0].message.content == "one two three" and final.usage.completion_tokens == 3

    async def main():
        async with L.AsyncClient(_config(vllm_server)) as client:
            stream = await client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True)
            return await stream.get_final_completion()

    assert asyncio.run(main()).choices[0].message.content == "one two three"


def test_response_after_an_early_close_says_so(vllm_server):
    vllm_server.push(Reply(pieces=PIECES))
    with L.Client(_config(vllm_server)) as client:
        with client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True) as stream:
            next(iter(stream))
        with pytest.raises(L.StreamNotFinishedError, match="closed before it finished"):
            stream.response
        with pytest.raises(L.StreamNotFinishedError, match="closed"):
            stream.get_final_completion()
