"""Bounds on what a server sends, across chunks: an answer's size, its tokens against `max_tokens`,
its choices against `n`, a tool call's arguments; and memory per delivered character close to the
text's own size. Against the hostile loopback server (tests/servers/hostile.py); every answer cut
is a `ResponseTooLargeError` naming the cap, billed for what arrived, and flagged."""

from __future__ import annotations

import asyncio
import tracemalloc
from typing import Any

import pytest

import llmroute as L
from llmroute._call.answer_bounds import AnswerMeter
from llmroute.accounting.tokens import count_text_tokens
from llmroute.types import ChatCompletionChunk
from tests.resilience.client_helpers import MESSAGES, TIER, tier_config
from tests.servers.hostile import HostileServer

BIG = {"max_response_bytes": 1 << 30, "max_decoded_bytes": 1 << 30}  # the byte caps out of the way


@pytest.fixture
def config(hostile: HostileServer) -> dict[str, Any]:
    hostile.mode = "ok"
    config = tier_config({"h": hostile.base_url})
    config["pricing"] = {"h:*": {"input_per_million": 1, "output_per_million": 2}}
    return config


def _cut(config: dict[str, Any], *, limits: L.ReadLimits, stream: bool = False,
         **kwargs: Any) -> tuple[BaseException, list[Any]]:
    with L.Client(config=config, read_limits=limits) as client:
        with pytest.raises(L.LLMRouteError) as info:
            out = client.chat.completions.create(model=TIER, messages=MESSAGES, stream=stream, **kwargs)
            if stream:
                out.get_final_completion()
        return info.value, list(client._engine.ledger.records)


def _too_large(error: BaseException) -> L.ResponseTooLargeError:
    cause = error.__cause__ if isinstance(error, L.StreamInterruptedError) else error
    assert isinstance(cause, L.ResponseTooLargeError), repr(error)
    return cause


def test_a_runaway_stream_is_cut_at_max_tokens_and_billed_for_what_arrived(config: dict[str, Any],
                                                                        hostile: HostileServer) -> None:
    hostile.mode = "runaway_sse"
    error, records = _cut(config, limits=L.ReadLimits(**BIG), max_tokens=100)
    assert isinstance(error, L.ResponseTooLargeError)  # a plain call gets the typed error itself
    assert error.limit == "answer_tokens" and error.max_bytes == 2 * 100 + 64
    [record] = records
    assert record.error_type == "ResponseTooLargeError" and record.status == "interrupted"
    assert record.estimated and record.usage_estimated  # flagged: counted here, not by the platform
    assert 264 <= record.output_tokens < 264 * 16 + 2048  # what arrived, about the cut
    assert record.cost is not None and record.cost > 0


def test_a_runaway_stream_without_max_tokens_is_cut_at_the_answer_cap(config: dict[str, Any],
                                                                    hostile: HostileServer) -> None:
    hostile.mode = "runaway_sse"
    error, records = _cut(config, limits=L.ReadLimits(max_answer_chars=256 << 10, **BIG), stream=True)
    cut = _too_large(error)
    assert cut.limit == "answer_chars" and cut.max_bytes == 256 << 10
    assert isinstance(error, L.StreamInterruptedError) and len(error.partial_text) > 200_000
    assert records[0].output_tokens > 0 and records[0].estimated


@pytest.mark.parametrize("choices", [3, 200_000])
def test_more_choices_than_n_is_refused(config: dict[str, Any], hostile: HostileServer, choices: int) -> None:
    hostile.mode = f"choices:{choices}"
    config["tiers"][TIER]["deployments"] = [{"id": "h:m", "ttft_timeout_s": 120}]  # slow under tracemalloc
    tracemalloc.start()
    try:
        error, records = _cut(config, limits=L.ReadLimits(**BIG))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    cut = _too_large(error.last_error if isinstance(error, L.AllDeploymentsFailedError) else error)
    assert cut.limit == "choices" and cut.max_bytes == 1
    # The body itself (about 17 MB for 200,000 choices) is read; it is never parsed into 200,000
    # choices (510 MB of RSS before the cap).
    assert peak < 128 << 20, f"peak {peak >> 20} MiB"
    # Priced for what arrived: the platform's usage is in the body that was refused.
    if choices == 3:
        assert records[0].output_tokens == 3 and not records[0].usage_estimated


def test_n_choices_are_accepted(config: dict[str, Any], hostile: HostileServer) -> None:
    hostile.mode = "choices:3"
    with L.Client(config=config) as client:
        out = client.chat.completions.create(model=TIER, messages=MESSAGES, n=3)
    assert [c.index for c in out.choices] == [0, 1, 2]


def test_a_huge_tool_call_is_cut(config: dict[str, Any], hostile: HostileServer) -> None:
    hostile.mode = f"tool_args:{8 << 20}"
    error, records = _cut(config, limits=L.ReadLimits(max_tool_argument_chars=1 << 20, **BIG), stream=True)
    cut = _too_large(error)
    assert cut.limit == "tool_argument_chars" and cut.max_bytes == 1 << 20
    assert records[0].output_tokens > 0


def test_async_clients_are_bounded_too(config: dict[str, Any], hostile: HostileServer) -> None:
    hostile.mode = "runaway_sse"

    async def main(transport: str) -> BaseException:
        async with L.AsyncClient(config=config, transport=transport, read_limits=L.ReadLimits(**BIG)) as client:
            with pytest.raises(L.LLMRouteError) as info:
                await client.chat.completions.create(model=TIER, messages=MESSAGES, max_tokens=50)
            return info.value

    for transport in ("aiohttp", "httpx"):
        error = asyncio.run(main(transport))
        assert isinstance(error, L.ResponseTooLargeError) and error.limit == "answer_tokens", repr(error)


def test_memory_per_delivered_character_is_close_to_the_text(config: dict[str, Any], hostile: HostileServer) -> None:
    chars = 400_000  # 100,000 chunks of 4 characters
    hostile.mode = f"long_sse:{chars}"
    with L.Client(config=config, read_limits=L.ReadLimits(**BIG)) as client:
        client.chat.completions.create(model=TIER, messages=MESSAGES)  # imports and pools outside the count
        tracemalloc.start()
        try:
            out = client.chat.completions.create(model=TIER, messages=MESSAGES)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert len(out.choices[0].message.content) == chars
    assert peak < 6 * chars, f"{peak / chars:.1f} bytes a character"  # was about 23 (a list of 4-character strings)


def test_empty_chunks_before_the_first_token_are_not_all_kept(config: dict[str, Any], hostile: HostileServer) -> None:
    hostile.mode = "empty_sse"  # chunks without content, as fast as they are read, until the first-token limit
    config["tiers"][TIER]["deployments"] = [{"id": "h:m", "ttft_timeout_s": 2.0}]
    count_text_tokens("the tokenizer (for the prompt's estimate) loaded outside the count")
    tracemalloc.start()
    try:
        error, _ = _cut(config, limits=L.ReadLimits(**BIG))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(error, L.APITimeoutError) and error.timeout == "ttft", repr(error)
    assert peak < 12 << 20, f"peak {peak >> 20} MiB"  # every held chunk kept: about 1.5 KB each


def test_the_meter_counts_without_keeping_text() -> None:
    meter = AnswerMeter(L.ReadLimits(max_answer_chars=2048), {"n": 2})
    piece = ChatCompletionChunk.model_validate({"id": "c", "choices": [
        {"index": 1, "delta": {"content": "x" * 1000}}]})
    meter.chunk(piece)
    meter.chunk(piece)
    with pytest.raises(L.ResponseTooLargeError) as info:
        meter.chunk(piece)
    assert info.value.limit == "answer_chars" and meter.chars == 3000
    with pytest.raises(L.ResponseTooLargeError):
        meter.chunk(ChatCompletionChunk.model_validate({"id": "c", "choices": [{"index": 2, "delta": {}}]}))


def test_read_limits_are_checked() -> None:
    with pytest.raises(L.ConfigError, match="max_tokens_margin"):
        L.ReadLimits(max_tokens_margin=0.5)
    with pytest.raises(L.ConfigError, match="max_answer_chars"):
        L.ReadLimits(max_answer_chars=10)
    with pytest.raises(L.ConfigError, match="max_tool_calls"):
        L.ReadLimits(max_tool_calls=0)
