"""No server can hold a call past its timeout or grow the client's memory past the read caps.

The hostile server (tests/servers/hostile.py) is a raw-socket loopback server. Time and memory are
asserted with generous margins (the machine is shared): what matters is the order of magnitude
(3 s, not 40 s; tens of MiB, not GiB)."""

from __future__ import annotations

import asyncio
import resource
import time
import tracemalloc
from typing import Any

import pytest

import llmroute as L
from llmroute._http.sse import SSEDecoder
from tests.resilience.client_helpers import MESSAGES, TIER, tier_config
from tests.servers.hostile import HostileServer

LIMITS = L.ReadLimits(max_response_bytes=4 << 20, max_decoded_bytes=4 << 20, max_sse_line_bytes=1 << 20)


@pytest.fixture
def config(hostile: HostileServer) -> dict[str, Any]:
    hostile.mode = "ok"
    return tier_config({"h": hostile.base_url})


def _last(exc: BaseException) -> BaseException:
    """The attempt's own error: the last one of an AllDeploymentsFailedError, or the error itself."""
    if isinstance(exc, L.AllDeploymentsFailedError):
        return exc.last_error  # type: ignore[return-value]
    if isinstance(exc, L.StreamInterruptedError) and exc.__cause__ is not None:
        return exc.__cause__
    return exc


def _call(config: dict[str, Any], *, stream: bool = False, limits: Any = LIMITS, **kwargs: Any) -> Any:
    with L.Client(config=config, read_limits=limits) as client:
        out = client.chat.completions.create(model=TIER, messages=MESSAGES, stream=stream, **kwargs)
        if stream:
            return out.get_final_completion()
        return out


async def _acall(config: dict[str, Any], transport: str, *, stream: bool = False, **kwargs: Any) -> Any:
    async with L.AsyncClient(config=config, transport=transport, read_limits=LIMITS) as client:
        out = await client.chat.completions.create(model=TIER, messages=MESSAGES, stream=stream, **kwargs)
        if stream:
            return await out.get_final_completion()
        return out


@pytest.mark.parametrize("mode", ["trickle_headers", "trickle_body"])
def test_a_trickle_cannot_hold_a_plain_call_past_its_timeout(config: dict[str, Any], hostile: HostileServer,
                                                             mode: str) -> None:
    hostile.mode = mode
    started = time.monotonic()
    with pytest.raises(L.LLMRouteError) as info:
        _call(config, timeout=2)
    elapsed = time.monotonic() - started
    assert elapsed < 6, elapsed  # was 40 s and counting
    error = _last(info.value)
    assert isinstance(error, L.APITimeoutError) and error.timeout == "total", error


@pytest.mark.parametrize("transport", ["httpx", "aiohttp"])
@pytest.mark.parametrize("mode", ["trickle_headers", "trickle_body"])
def test_a_trickle_cannot_hold_an_async_call(config: dict[str, Any], hostile: HostileServer, mode: str,
                                             transport: str) -> None:
    hostile.mode = mode
    started = time.monotonic()
    with pytest.raises(L.LLMRouteError) as info:
        asyncio.run(_acall(config, transport, timeout=2))
    assert time.monotonic() - started < 6
    error = _last(info.value)
    assert isinstance(error, L.APITimeoutError) and error.timeout == "total", error


@pytest.mark.parametrize("side", ["sync", "httpx", "aiohttp"])
@pytest.mark.parametrize("stream", [False, True])
def test_trickled_headers_are_cut_at_the_first_token_limit_and_the_backup_answers(
        hostile: HostileServer, fault_server: Any, side: str, stream: bool) -> None:
    """A server trickling its headers (each read is quick, so a per-read limit never fires) is cut at
    the first-token limit, as a silent one is, and the backup answers the call (a streamed read: a
    stream, or a plain call read as one, the default). It used to be cut only at the attempt's total,
    and with retries the call's deadline passed before the backup was tried."""
    hostile.mode = "trickle_headers"
    config = tier_config({"h": hostile.base_url, "b": fault_server},
                         providers={"h": {"ttft_timeout_s": 1.0, "timeout_s": 20}})
    started = time.monotonic()
    out = _call(config, stream=stream) if side == "sync" else asyncio.run(_acall(config, side, stream=stream))
    elapsed = time.monotonic() - started
    assert out.choices[0].message.content and out.route.deployment == "b:m"
    first = out.route.attempts[0]
    assert first.deployment == "h:m" and first.error_type == "APITimeoutError", first
    assert "first-token" in (first.error_message or ""), first.error_message
    assert elapsed < 10, elapsed  # about 1 s; was 20 s (the attempt's total)


@pytest.mark.parametrize("mode,limit", [("huge_body", "response_bytes"), ("gzip_bomb", "decoded_bytes")])
def test_size_caps_end_an_async_plain_read(config: dict[str, Any], hostile: HostileServer, mode: str,
                                           limit: str) -> None:
    """The aiohttp side reads a plain body in one loop over the response's buffer (`aread_body`), not
    through the streaming reader: the same caps hold there."""
    hostile.mode = mode
    hostile.bomb()
    tracemalloc.start()
    try:
        with pytest.raises(L.LLMRouteError) as info:
            asyncio.run(_acall(config, "aiohttp", timeout=60))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    error = _last(info.value)
    assert isinstance(error, L.ResponseTooLargeError) and error.limit == limit, repr(error)
    assert peak < 64 << 20, f"peak {peak >> 20} MiB with 4 MiB caps"


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.mark.parametrize("mode,limit", [("huge_body", "response_bytes"), ("gzip_bomb", "decoded_bytes"),
                                        ("long_sse_line", "sse_line_bytes"), ("runaway_sse", "response_bytes")])
def test_size_caps_end_the_attempt(config: dict[str, Any], hostile: HostileServer, mode: str, limit: str) -> None:
    hostile.mode = mode
    hostile.bomb()  # built before measuring: it is the server's memory, not the client's
    stream = "sse" in mode
    # A runaway stream is parsed chunk by chunk (slow under tracemalloc): a smaller cap keeps it short.
    limits = L.ReadLimits(max_response_bytes=1 << 20) if mode == "runaway_sse" else LIMITS
    tracemalloc.start()
    started = time.monotonic()
    try:
        with pytest.raises(L.LLMRouteError) as info:
            _call(config, stream=stream, timeout=60, limits=limits)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    elapsed = time.monotonic() - started
    error = _last(info.value)
    assert isinstance(error, L.ResponseTooLargeError), repr(error)
    assert error.limit == limit
    assert peak < 64 << 20, f"peak {peak >> 20} MiB with 4 MiB caps"  # was GiB
    assert elapsed < 30, elapsed


def test_gzipped_stream_is_decoded(config: dict[str, Any], hostile: HostileServer) -> None:
    hostile.mode = "gzip_sse"
    completion = _call(config, stream=True)
    assert completion.choices[0].message.content == "".join(f" tok{i}" for i in range(50))
    assert asyncio.run(_acall(config, "httpx", stream=True)).choices[0].message.content.startswith(" tok0 tok1")
    assert asyncio.run(_acall(config, "aiohttp", stream=True)).choices[0].message.content.endswith("tok49")


def test_sse_line_buffering_is_linear() -> None:
    """A 32 MiB line in 4 KiB pieces: joined once (~0.1 s), not re-copied per piece (~128 GB copied)."""
    decoder = SSEDecoder(max_line=1 << 30)
    piece = b"z" * 4096
    started = time.perf_counter()
    decoder.feed(b"data: ")
    for _ in range((32 << 20) // len(piece)):
        decoder.feed(piece)
    events = decoder.feed(b"\n\n")
    elapsed = time.perf_counter() - started
    assert len(events[0].data) == 32 << 20
    assert elapsed < 5, elapsed


def test_deeply_nested_json_is_a_typed_error(config: dict[str, Any], hostile: HostileServer) -> None:
    hostile.mode = "nested_json"
    with pytest.raises(L.ServerError) as info:
        _call(config)
    assert "nested" in str(info.value)


def test_empty_choices_is_an_error_not_a_billed_success(config: dict[str, Any], hostile: HostileServer) -> None:
    hostile.mode = "empty_choices"
    with L.Client(config=config) as client:
        with pytest.raises(L.ServerError) as info:
            client.chat.completions.create(model=TIER, messages=MESSAGES)
        assert "no choices" in str(info.value)
        assert [r.status for r in client._engine.ledger.records] == ["error"]


@pytest.mark.parametrize("reported", [10**30, -5])
def test_implausible_usage_is_flagged_and_estimated(config: dict[str, Any], hostile: HostileServer,
                                                    reported: int) -> None:
    hostile.mode = f"usage:{reported}"
    with L.Client(config=config) as client:
        out = client.chat.completions.create(model=TIER, messages=MESSAGES)
        record = client._engine.ledger.records[0]
    assert out.route.usage_estimated and record.usage_estimated
    assert 0 < out.usage.prompt_tokens < 100 and 0 < out.usage.completion_tokens < 100
    assert record.input_tokens == out.usage.prompt_tokens


@pytest.mark.parametrize("code", ["301", "307"])
def test_a_redirect_is_not_a_retryable_server_error(config: dict[str, Any], hostile: HostileServer,
                                                    code: str) -> None:
    hostile.mode = f"redirect:{code}"
    before = hostile.requests
    with pytest.raises(L.RedirectError) as info:
        _call(config)
    assert info.value.status == int(code) and not info.value.retryable
    assert info.value.location and "127.0.0.1:9" in info.value.location
    assert hostile.requests - before == 1  # not retried, not followed
