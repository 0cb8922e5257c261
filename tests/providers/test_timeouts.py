"""The three timeouts through llmroute's client, over loopback: connect (a listening socket whose
accept queue is full, so the handshake never completes), time-to-first-token (slow first piece, or
bytes that carry no content) and total (slow headers on a plain call, a slow stream after content,
the per-call `timeout=`). Each error says which limit fired (`APITimeoutError.timeout`) and its seconds."""

from __future__ import annotations

import socket

import pytest

import llmroute as L
from tests.providers.helpers import (
    MESSAGES, TIER, adrain, assert_clean_error, call_error, drain, make_config, run, with_async_client,
)
from tests.servers.fault import slow_headers, slow_ttft
from tests.servers.script import Reply

MODEL = "fault-model"
DEP = f"fault:{MODEL}"


def config(base_url, **deployment):
    return make_config("openai-compatible", base_url, MODEL, name="fault", deployment=deployment)


def client(server, **deployment):
    return L.Client(config=config(server.base_url, **deployment))


@pytest.fixture
def full_listener():
    """A socket that listens but never accepts, its accept queue filled: new connects hang in SYN-SENT."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    fillers = []
    for _ in range(4):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(listener.getsockname())
        fillers.append(s)
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    for s in fillers:
        s.close()
    listener.close()


def test_connect_timeout(full_listener):
    with L.Client(config=config(full_listener, connect_timeout_s=0.2)) as c:
        err = call_error(c, L.APITimeoutError)
    assert err.timeout == "connect" and err.seconds == 0.2
    assert_clean_error(err, DEP)


def test_ttft_timeout_when_the_first_piece_is_late(fault_server):
    fault_server.push(slow_ttft(2.0))
    with client(fault_server, ttft_timeout_s=0.3) as c:
        err = call_error(c, L.APITimeoutError, stream=True)
    # The limit grows by resilience.ttft_per_1k_tokens_s per 1,000 prompt tokens (a few here).
    assert err.timeout == "ttft" and err.seconds == pytest.approx(0.3, abs=0.01)
    assert_clean_error(err, DEP)


def test_ttft_timeout_when_bytes_arrive_but_no_content(fault_server):
    # Each read is quick (keep-alive chunks with empty content), but no token comes within the limit.
    fault_server.push(Reply(pieces=[""] * 8 + ["late"], gap_s=0.1))
    with client(fault_server, ttft_timeout_s=0.3) as c:
        err = call_error(c, L.APITimeoutError, stream=True)
    assert err.timeout == "ttft"


def test_fast_first_token_is_not_a_ttft_timeout(fault_server):
    fault_server.push(Reply(pieces=["a", " b", " c"], gap_s=0.1))
    with client(fault_server, ttft_timeout_s=2.0) as c:
        with c.chat.completions.create(model=TIER, messages=MESSAGES, stream=True) as stream:
            _, text, _ = drain(stream)
    assert text == "a b c"


def test_total_timeout_on_slow_headers(fault_server):
    fault_server.push(slow_headers(2.0))
    with client(fault_server, timeout_s=0.3) as c:
        err = call_error(c, L.APITimeoutError)
    assert err.timeout == "total" and err.seconds == 0.3
    assert_clean_error(err, DEP)


def test_per_call_timeout_argument(fault_server):
    fault_server.push(slow_headers(2.0))
    with client(fault_server) as c:
        err = call_error(c, L.APITimeoutError, timeout=0.3)
    assert err.timeout == "total"


def test_total_timeout_after_content_interrupts_the_stream(fault_server):
    fault_server.push(Reply(pieces=["t"] * 20, gap_s=0.1))
    with client(fault_server, ttft_timeout_s=0.3, timeout_s=0.5) as c:
        stream = c.chat.completions.create(model=TIER, messages=MESSAGES, stream=True)
        with pytest.raises(L.StreamInterruptedError) as info:
            drain(stream)
    cause = info.value.__cause__
    assert isinstance(cause, L.APITimeoutError) and cause.timeout == "total"
    assert 0 < len(info.value.partial_text) < 20


def test_async_ttft_timeout(fault_server):
    fault_server.push(slow_ttft(2.0))

    async def body(c):
        with pytest.raises(L.APITimeoutError) as info:
            await adrain(await c.chat.completions.create(model=TIER, messages=MESSAGES, stream=True))
        return info.value

    err = run(with_async_client(config(fault_server.base_url, ttft_timeout_s=0.3), body))
    assert err.timeout == "ttft" and err.deployment == DEP


def test_async_total_timeout(fault_server):
    fault_server.push(slow_headers(2.0))

    async def body(c):
        with pytest.raises(L.APITimeoutError) as info:
            await c.chat.completions.create(model=TIER, messages=MESSAGES)
        return info.value

    err = run(with_async_client(config(fault_server.base_url, timeout_s=0.3), body))
    assert err.timeout == "total"


def test_async_connect_timeout(full_listener):
    async def body(c):
        with pytest.raises(L.APITimeoutError) as info:
            await c.chat.completions.create(model=TIER, messages=MESSAGES)
        return info.value

    err = run(with_async_client(config(full_listener, connect_timeout_s=0.2), body))
    assert err.timeout == "connect"
