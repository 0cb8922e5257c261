"""openai-python streaming programs, run unchanged (but for import and config) against the real
llama.cpp server: the loop that indexes `chunk.choices[0]`, `next(stream)`, `await anext(stream)`,
`stream_options={"include_usage": True}`, and one AsyncClient used from two `asyncio.run` calls."""

from __future__ import annotations

import asyncio

from llmroute import AsyncClient, Client  # openai: from openai import AsyncOpenAI, OpenAI
from tests.dropin.conftest import llama

MESSAGES = [{"role": "user", "content": "Say hello in three words."}]


def test_the_standard_streaming_loop(llama_server, capsys):
    client = Client(config=llama(llama_server))  # openai: OpenAI(base_url=..., api_key=...)
    stream = client.chat.completions.create(model="small", messages=MESSAGES, stream=True, max_tokens=12)
    for chunk in stream:
        print(chunk.choices[0].delta.content or "", end="")  # no IndexError at the end
    printed = capsys.readouterr().out
    # llmroute's own: the assembled answer, with the usage it asked the server for (kept out of the loop)
    assert printed and printed == stream.response.choices[0].message.content
    assert stream.response.usage.completion_tokens > 0 and stream.response.route.usage_estimated is False
    client.close()


def test_next_on_a_stream_and_include_usage(llama_server):
    with Client(config=llama(llama_server)) as client:
        stream = client.chat.completions.create(model="small", messages=MESSAGES, stream=True, max_tokens=6)
        first = next(stream)
        rest = list(stream)  # goes on where next() stopped
        assert first.choices[0].delta.role == "assistant" or first.choices[0].delta.content is not None
        assert all(c.choices for c in [first, *rest])

        asked = client.chat.completions.create(model="small", messages=MESSAGES, stream=True, max_tokens=6,
                                               stream_options={"include_usage": True})
        chunks = list(asked)
    usage_chunks = [c for c in chunks if not c.choices]
    assert len(usage_chunks) == 1 and chunks[-1] is usage_chunks[0]
    assert chunks[-1].usage.completion_tokens == asked.response.usage.completion_tokens > 0


def test_async_client_across_two_asyncio_runs(llama_server):
    client = AsyncClient(config=llama(llama_server))

    async def ask() -> str:
        stream = await client.chat.completions.create(model="small", messages=MESSAGES, stream=True, max_tokens=8)
        first = await anext(stream)
        text = first.choices[0].delta.content or ""
        async for chunk in stream:
            text += chunk.choices[0].delta.content or ""
        plain = await client.chat.completions.create(model="small", messages=MESSAGES, max_tokens=4)
        assert plain.choices[0].message.content
        return text

    first = asyncio.run(ask())
    second = asyncio.run(ask())  # a new event loop: the same client serves it
    assert first and second
    # Each loop's connection pool closed with its loop; breakers and ledger are the client's, shared.
    assert not client._transport._loops
    calls = {r.request_id for r in client._engine.ledger.records if r.status == "ok"}
    assert len(calls) == 4  # one ledger for both loops (a resend on a dropped keep-alive is a row of its own)
    asyncio.run(client.aclose())
