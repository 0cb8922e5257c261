"""Honest cost on failure: what a failed attempt may have cost is in the ledger, flagged when it is an
estimate. The platform's own figure when an error body reports usage; the prompt when it reached the
server (a connection broken after the request was written, a timeout); and, for a generation
abandoned on a timeout before any content, `max_tokens` as the bound of what it may still produce."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import llmroute as L
from tests.resilience.client_helpers import MESSAGES, TIER, tier_config
from tests.servers.fault import reset_before, slow_headers
from tests.servers.hostile import HostileServer


def _priced(config: dict[str, Any], *names: str) -> dict[str, Any]:
    config["pricing"] = {f"{n}:*": {"input_per_million": 1, "output_per_million": 2} for n in names}
    return config


def _fail(config: dict[str, Any], mode: str, **kwargs: Any) -> tuple[BaseException, Any]:
    if mode == "sync":
        with L.Client(config=config) as client:
            with pytest.raises(L.ProviderError) as info:
                client.chat.completions.create(model=TIER, messages=MESSAGES, **kwargs)
            return info.value, client._engine.ledger.records

    async def main() -> tuple[BaseException, Any]:
        async with L.AsyncClient(config=config, transport=mode) as client:
            with pytest.raises(L.ProviderError) as info:
                await client.chat.completions.create(model=TIER, messages=MESSAGES, **kwargs)
            return info.value, client._engine.ledger.records

    return asyncio.run(main())


MODES = ["sync", "aiohttp", "httpx"]


@pytest.mark.parametrize("mode", MODES)
def test_usage_in_an_error_body_is_the_platforms_figure(mode: str) -> None:
    with HostileServer() as hostile:
        hostile.mode = "error_usage:500"
        error, records = _fail(_priced(tier_config({"h": hostile.base_url}), "h"), mode)
    assert error.status == 500 and error.usage is not None
    [record] = records
    assert (record.input_tokens, record.output_tokens) == (1234, 56)
    assert not record.estimated and not record.usage_estimated
    assert float(record.cost) == pytest.approx(1234 * 1e-6 + 56 * 2e-6)


@pytest.mark.parametrize("mode", MODES)
def test_a_reset_after_the_request_was_written_bills_the_prompt_as_an_estimate(mode: str, fault_server: Any) -> None:
    fault_server.push(reset_before())
    error, records = _fail(_priced(tier_config({"a": fault_server}), "a"), mode)
    assert isinstance(error, L.APIConnectionError), repr(error)
    [record] = records
    assert record.status == "error" and record.input_tokens > 0 and record.output_tokens == 0
    assert record.estimated and record.cost > 0


@pytest.mark.parametrize("mode", MODES)
def test_a_stream_ended_before_any_event_bills_the_prompt(mode: str) -> None:
    with HostileServer() as hostile:
        hostile.mode = "sse_then_nothing"  # the platform answered 200, then its body ended: it read the prompt
        error, records = _fail(_priced(tier_config({"h": hostile.base_url}), "h"), mode)
    assert isinstance(error, L.APIConnectionError), repr(error)
    [record] = records
    assert record.input_tokens > 0 and record.output_tokens == 0 and record.estimated


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("max_tokens", [None, 50])
def test_a_first_token_timeout_bills_the_prompt_and_bounds_the_output(mode: str, fault_server: Any,
                                                                      max_tokens: Any) -> None:
    fault_server.push(slow_headers(3.0))
    config = _priced(tier_config({"a": fault_server}, deployments=[{"id": "a:m", "ttft_timeout_s": 0.3}]), "a")
    kwargs = {"max_tokens": max_tokens} if max_tokens else {}
    error, records = _fail(config, mode, **kwargs)
    assert isinstance(error, L.APITimeoutError), repr(error)
    [record] = records
    assert record.input_tokens > 0 and record.estimated
    assert record.output_tokens == (max_tokens or 0)  # the bound it may still generate, when asked for one


def test_a_hedge_that_lost_before_content_bounds_its_output(make_server: Any) -> None:
    primary, backup = make_server("fault"), make_server("fault")
    primary.push(slow_headers(2.0))  # still generating (as far as we know) when the backup answers
    config = _priced(tier_config({"p": primary, "b": backup}, tier={"hedge_after_ms": 100, "hedge_budget": 1.0}),
                     "p", "b")
    with L.Client(config=config) as client:
        out = client.chat.completions.create(model=TIER, messages=MESSAGES, max_tokens=40)
        records = {r.deployment: r for r in client._engine.ledger.records}
    assert out.route.deployment == "b:m"
    loser = records["p:m"]
    assert loser.status == "cancelled" and loser.estimated
    assert loser.input_tokens > 0 and loser.output_tokens == 40  # what it may still generate
