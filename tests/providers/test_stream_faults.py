"""Broken streams through llmroute's client, against the fault server (OpenAI wire format): resets
before and after content, malformed SSE, a body cut before its end marker, mid-stream error events,
and streams that must hand chunks over as they arrive. Before content a failure is an ordinary typed
error (the call may fail over); after content it is `StreamInterruptedError` with `.partial_text`."""

from __future__ import annotations

import json

import pytest

import llmroute as L
from tests.providers.helpers import (
    MESSAGES, TIER, adrain, assert_clean_error, call_error, drain, make_client, make_config, run, with_async_client,
)
from tests.servers.fault import error_event, malformed, reset_before, reset_during
from tests.servers.script import Reply

MODEL = "fault-model"
DEP = f"fault:{MODEL}"
PIECES = ["one", " two", " three", " four"]



def config(server, **deployment):
    return make_config("openai-compatible", server.base_url, MODEL, name="fault", deployment=deployment or None)


@pytest.fixture
def client(fault_server):
    with L.Client(config=config(fault_server)) as c:
        yield c


def chunk(content=None, finish=None):
    delta = {"content": content} if content is not None else {}
    body = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": MODEL,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return f"data: {json.dumps(body)}\n\n"


def test_chunks_reach_the_caller_before_the_stream_ends(make_server):
    # The server holds the last piece back for a long while; the first must arrive before it ends.
    # (A server of its own: `running` counts this stream only.)
    server = make_server("fault")
    server.push(Reply(pieces=["first", " last"], gap_s=1.0))
    with L.Client(config=config(server)) as client:
        stream = client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True)
        for c in stream:
            if c.choices and c.choices[0].delta.content:
                assert server.running == 1, "the first piece came only after the server had finished"
                break
        stream.close()


def test_async_chunks_reach_the_caller_before_the_stream_ends(make_server):
    fault_server = make_server("fault")
    fault_server.push(Reply(pieces=["first", " last"], gap_s=1.0))

    async def body(client):
        stream = await client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True)
        running = None
        async for c in stream:
            if c.choices and c.choices[0].delta.content:
                running = fault_server.running
                break
        await stream.aclose()
        return running

    assert run(with_async_client(config(fault_server), body)) == 1


@pytest.mark.parametrize("stream", [False, True])
def test_reset_before_the_status_line_is_connection_error(client, fault_server, stream):
    fault_server.push(reset_before())
    err = call_error(client, L.APIConnectionError, stream=stream)
    assert_clean_error(err, DEP)


def test_reset_before_content_is_connection_error(client, fault_server):
    fault_server.push(reset_during(0))
    err = call_error(client, L.APIConnectionError, stream=True)
    assert_clean_error(err, DEP)


def test_reset_after_content_is_stream_interrupted_with_partial_text(client, fault_server):
    fault_server.push(reset_during(2, PIECES, gap_s=0.05))
    stream = client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True)
    with pytest.raises(L.StreamInterruptedError) as info:
        drain(stream)
    assert info.value.partial_text == "one two"
    assert isinstance(info.value.__cause__, L.APIConnectionError)
    assert_clean_error(info.value, DEP)


def test_async_reset_after_content_is_stream_interrupted(fault_server):
    fault_server.push(reset_during(3, PIECES, gap_s=0.05))

    async def body(client):
        stream = await client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True)
        with pytest.raises(L.StreamInterruptedError) as info:
            await adrain(stream)
        return info.value

    err = run(with_async_client(config(fault_server), body))
    assert err.partial_text == "one two three"


@pytest.mark.parametrize("at", [0, 2])
def test_a_malformed_sse_event_is_skipped_with_a_warning(client, fault_server, at, caplog):
    # One bad event does not spoil a good answer (issue 10): skipped, on the route, logged.
    fault_server.push(malformed(at, PIECES))
    with client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True) as stream:
        _, text, _ = drain(stream)
    assert text == "".join(PIECES)
    assert [w.startswith(DEP) and "malformed SSE data skipped" in w for w in stream.response.route.warnings] == [True]
    assert any("malformed SSE data skipped" in r.getMessage() and r.levelname == "WARNING" for r in caplog.records)


def test_malformed_plain_body_is_server_error(fault_server):
    fault_server.push(malformed(1, PIECES))
    with L.Client(config=config(fault_server, plain_via_stream=False)) as plain_client:
        err = call_error(plain_client, L.ServerError)
    assert "not JSON" in str(err)


def test_body_cut_before_end_marker_is_not_a_short_answer(client, fault_server):
    # A clean end of body, but neither a finish_reason nor [DONE]: the answer was cut.
    fault_server.push(Reply(body=chunk("partial") + chunk(" answer")))
    stream = client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True)
    with pytest.raises(L.StreamInterruptedError) as info:
        drain(stream)
    assert info.value.partial_text == "partial answer" and isinstance(info.value.__cause__, L.APIConnectionError)


def test_body_cut_before_any_content_is_connection_error(client, fault_server):
    fault_server.push(Reply(body=chunk("")))
    call_error(client, L.APIConnectionError, stream=True)


def test_finish_reason_without_done_is_a_complete_stream(client, fault_server):
    fault_server.push(Reply(body=chunk("whole") + chunk(None, "stop")))
    with client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True) as stream:
        _, text, _ = drain(stream)
    assert text == "whole" and stream.response.choices[0].finish_reason == "stop"


def test_error_event_before_content_is_typed(client, fault_server):
    fault_server.push(error_event(0, PIECES, message="engine failed"))
    err = call_error(client, L.ServerError, stream=True)
    assert "engine failed" in str(err)


def test_error_event_after_content_interrupts(client, fault_server):
    fault_server.push(error_event(1, PIECES, message="engine failed"))
    stream = client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True)
    with pytest.raises(L.StreamInterruptedError) as info:
        drain(stream)
    assert info.value.partial_text == "one" and "engine failed" in str(info.value)


def test_closing_an_interrupted_stream_is_quiet(client, fault_server):
    fault_server.push(error_event(1, PIECES))
    with pytest.raises(L.StreamInterruptedError):
        with client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True) as stream:
            drain(stream)


def test_async_closing_an_interrupted_stream_is_quiet(fault_server):
    fault_server.push(error_event(1, PIECES))

    async def body(client):
        stream = await client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True)
        async with stream:
            await adrain(stream)

    with pytest.raises(L.StreamInterruptedError):
        run(with_async_client(config(fault_server), body))


def test_stream_closed_early_by_the_caller_keeps_its_text(client, fault_server):
    fault_server.push(Reply(pieces=PIECES))
    with client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True) as stream:
        first = next(c for c in stream if c.choices and c.choices[0].delta.content)
    assert first.choices[0].delta.content == "one"
    assert stream.route.attempts[-1].status == "cancelled"


def test_refused_connection(fault_server):
    with make_client("openai-compatible", "http://127.0.0.1:9/v1", MODEL, name="fault") as c:
        err = call_error(c, L.APIConnectionError)
    assert_clean_error(err, DEP)


def test_a_stream_answered_with_one_json_body_is_read_as_the_stream_it_stands_for(client, fault_server):
    # A server that ignores `stream` (a proxy, an old self-hosted server) answers with one JSON body:
    # the caller still gets the answer as chunks, and the ledger its reported usage. It was an
    # APIConnectionError "stream ended before the platform's end marker", failed over as a platform fault.
    fault_server.push(Reply(stream=False, pieces=["Hello", " world"], usage={"prompt_tokens": 7, "completion_tokens": 2}))
    with client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True,
                                        stream_options={"include_usage": True}) as stream:
        chunks = list(stream)
    assert fault_server.last_request.json["stream"] is True
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello world"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 2
    final = stream.response
    assert final.choices[0].message.content == "Hello world" and final.usage.prompt_tokens == 7
    assert [a.status for a in final.route.attempts] == ["ok"] and not final.route.usage_estimated


def test_async_stream_answered_with_one_json_body(fault_server):
    fault_server.push(Reply(stream=False, pieces=["Hi", "!"]))

    async def body(client):
        stream = await client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True)
        async with stream:
            return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices]), stream.response

    text, final = run(with_async_client(config(fault_server), body))
    assert text == "Hi!" and final.choices[0].message.content == "Hi!" and final.usage.completion_tokens > 0


def test_a_stream_answered_with_a_json_error_body_raises_its_typed_error(client, fault_server):
    # 200 with an error object instead of a stream: the platform's error, not "cut mid-way".
    fault_server.push(Reply(stream=False, body={"error": {"message": "model overloaded", "type": "server_error",
                                                          "code": "overloaded"}}))
    with pytest.raises(L.ProviderError) as info:
        drain(client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True))
    assert "model overloaded" in str(info.value) and "end marker" not in str(info.value)


@pytest.mark.parametrize("stream", [True, False])
def test_an_html_page_is_named_as_such_not_as_a_cut_stream(client, fault_server, stream):
    # A base_url pointing at a website (or a proxy's page) answers 200 with HTML: the error says so and
    # where to look, instead of "stream ended before the platform's end marker (cut mid-way)".
    fault_server.push(Reply(body="<!doctype html><html><body>Welcome</body></html>",
                            headers={"Content-Type": "text/html; charset=utf-8"}))
    with pytest.raises(L.ServerError) as info:
        out = client.chat.completions.create(model=TIER, messages=MESSAGES, stream=stream)
        if stream:
            drain(out)
    message = str(info.value)
    assert "HTML page" in message and "base_url" in message and "end marker" not in message, message
    assert_clean_error(info.value, DEP)
