"""Hedged requests through the client: a slow primary is raced by the next deployment after
`hedge_after_ms`; the first to produce content wins, the loser is cancelled and both are in the route."""

from __future__ import annotations

import asyncio

import pytest

from llmroute import AsyncClient, Client
from tests.servers.fault import slow_headers, slow_ttft


def config(primary, backup, **tier):
    return {
        "providers": {"p": {"kind": "vllm", "base_url": primary.base_url},
                      "b": {"kind": "vllm", "base_url": backup.base_url}},
        "tiers": {"large": {"deployments": ["p:m", "b:m"], **tier}},
        "pricing": {"p:*": {"input_per_million": 1, "output_per_million": 2},
                    "b:*": {"input_per_million": 1, "output_per_million": 2}},
        "ledger": {"sink": "memory"},
    }


@pytest.fixture
def pair(make_server):
    return make_server("fault"), make_server("fault")


MESSAGES = [{"role": "user", "content": "hello"}]


@pytest.mark.parametrize("stream,late", [(False, "headers"), (False, "first_token"), (True, "first_token")])
def test_slow_primary_is_hedged_and_the_backup_wins(pair, stream, late):
    # A plain call is read as a stream, so hedge_after_ms also covers its first token (issue 10).
    primary, backup = pair
    primary.push(slow_headers(3.0) if late == "headers" else slow_ttft(3.0))
    with Client(config=config(primary, backup, hedge_after_ms=150, hedge_budget=1.0)) as client:
        resp = client.chat.completions.create(model="large", messages=MESSAGES, stream=stream)
        if stream:
            with resp:
                text = "".join(c.choices[0].delta.content or "" for c in resp if c.choices)
            resp = resp.response
            assert text
        statuses = {a.deployment: a.status for a in resp.route.attempts}
        assert resp.route.deployment == "b:m"
        assert statuses == {"p:m": "cancelled", "b:m": "ok"}
        assert "hedge" in next(a for a in resp.route.attempts if a.deployment == "b:m").note
        # The cancelled primary had its prompt sent: it is priced (estimated) and counted in the ledger.
        ledger = client._engine.ledger.records
        assert {r.status for r in ledger} == {"cancelled", "ok"}
        cancelled = next(a for a in resp.route.attempts if a.status == "cancelled")
        assert cancelled.cost is not None and cancelled.cost.estimated
    assert len(primary.chat_requests()) == 1 and len(backup.chat_requests()) == 1


def test_fast_primary_is_not_hedged(pair):
    primary, backup = pair
    with Client(config=config(primary, backup, hedge_after_ms=2000, hedge_budget=1.0)) as client:
        resp = client.chat.completions.create(model="large", messages=MESSAGES)
    assert [a.status for a in resp.route.attempts] == ["ok"]
    assert backup.chat_requests() == []


def test_without_hedge_after_ms_a_slow_primary_is_waited_for(pair):
    primary, backup = pair
    primary.push(slow_headers(0.5))
    with Client(config=config(primary, backup)) as client:
        resp = client.chat.completions.create(model="large", messages=MESSAGES)
    assert resp.route.deployment == "p:m" and backup.chat_requests() == []


def test_async_hedge(pair):
    primary, backup = pair
    primary.push(slow_ttft(3.0))

    async def main():
        async with AsyncClient(config=config(primary, backup, hedge_after_ms=150, hedge_budget=1.0)) as client:
            stream = await client.chat.completions.create(model="large", messages=MESSAGES, stream=True)
            async with stream:
                async for _ in stream:
                    pass
            return stream.response

    resp = asyncio.run(main())
    assert resp.route.deployment == "b:m"
    assert sorted(a.status for a in resp.route.attempts) == ["cancelled", "ok"]


def test_cancelled_losers_still_waiting_do_not_hold_up_later_calls(pair):
    """A sync hedge's loser keeps its thread until its server answers or its timeout fires. Twenty
    hedged calls in a row against a primary that answers only after 6 s leave twenty such losers;
    the calls after them must not queue behind them (they did with a 16-thread pool)."""
    import time

    primary, backup = pair
    for _ in range(20):
        primary.push(slow_headers(6.0))
    with Client(config=config(primary, backup, hedge_after_ms=50, hedge_budget=1.0)) as client:
        slowest = 0.0
        for _ in range(20):
            started = time.monotonic()
            resp = client.chat.completions.create(model="large", messages=MESSAGES)
            slowest = max(slowest, time.monotonic() - started)
            assert resp.route.deployment == "b:m"
    # A liveness bound, not a speed figure: queueing behind a loser costs the loser's 6 s.
    assert slowest < 3.0, slowest
