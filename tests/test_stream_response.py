"""`Stream.response` / `AsyncStream.response` behave alike: before the end of the stream (before the
loop, inside it, or after an early close) they raise `StreamNotFinishedError`, a clear typed error,
and the loop goes on unharmed; `get_final_completion()` reads the rest in both."""

from __future__ import annotations

import asyncio
import gc
import weakref

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


def test_an_async_stream_read_on_another_loop_raises_and_stays_readable_on_its_own(vllm_server):
    """The loop check (once per `async for` or `anext`): another loop gets `EventLoopError` before any
    chunk is taken, and the stream goes on where it was on the loop that opened it."""
    vllm_server.push(Reply(pieces=PIECES))
    own, other = asyncio.new_event_loop(), asyncio.new_event_loop()
    try:
        client = L.AsyncClient(_config(vllm_server))
        stream = own.run_until_complete(client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True))

        async def first_text():
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    return chunk.choices[0].delta.content
            return None

        async def read_there():
            with pytest.raises(L.EventLoopError, match="another event loop"):
                async for _ in stream:
                    pass
            with pytest.raises(L.EventLoopError):
                await anext(stream)

        async def the_rest():
            texts = [chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices]
            await stream.aclose()
            await client.aclose()
            return texts

        first = own.run_until_complete(first_text())  # a loop left part-way: the next goes on from there
        other.run_until_complete(read_there())
        rest = own.run_until_complete(the_rest())
    finally:
        own.close()
        other.close()
    assert first + "".join(rest) == "one two three"
    assert stream.response.choices[0].message.content == "one two three"


def test_get_final_completion_after_chunks_were_taken_assembles_and_bills_them_all(vllm_server):
    """The chunks `get_final_completion` reads are not handed to anyone, yet the answer and its usage
    count every one of them, with those the caller took before."""
    pieces = [f" w{i}" for i in range(40)]
    vllm_server.push(Reply(pieces=pieces))

    async def main():
        async with L.AsyncClient({**_config(vllm_server), "ledger": {"sink": "memory"}}) as client:
            stream = await client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True)
            taken = []
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    taken.append(chunk.choices[0].delta.content)
                    if len(taken) == 3:
                        break
            final = await stream.get_final_completion()
            return taken, final, [r for r in client._engine.ledger.records if r.status == "ok"]

    taken, final, records = asyncio.run(main())
    assert taken == pieces[:3]
    assert final.choices[0].message.content == "".join(pieces) and final.usage.completion_tokens == 40
    assert [r.output_tokens for r in records] == [40]


@pytest.mark.parametrize("how", ["to its end", "closed early"])
def test_a_streamed_call_leaves_no_reference_cycle(vllm_server, how):
    """A stream read to its end (or closed after a chunk) lets go of its call at once: with the garbage
    collector off, the `CallRun` is freed as soon as the caller drops the stream (a cycle between the
    attempt's state and its context left ~80 objects a call to the collector)."""
    vllm_server.push(Reply(pieces=PIECES), Reply(pieces=PIECES))
    with L.Client(_config(vllm_server)) as client:
        client.chat.completions.create(model=TIER, messages=MESSAGES)  # the client's first-call work, done
        gc.collect()
        gc.disable()
        try:
            with client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True) as stream:
                run = weakref.ref(stream._run)
                for _ in stream:
                    if how == "closed early":
                        break
            del stream
            freed = run() is None
        finally:
            gc.enable()
    assert freed


def test_an_async_streamed_call_leaves_no_reference_cycle(vllm_server):
    vllm_server.push(Reply(pieces=PIECES))

    async def main():
        async with L.AsyncClient(_config(vllm_server)) as client:
            stream = await client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True)
            async with stream:
                async for _ in stream:
                    pass
            run = weakref.ref(stream._run)
            del stream
            return run() is None

    gc.collect()
    gc.disable()
    try:
        freed = asyncio.run(main())
    finally:
        gc.enable()
    assert freed
