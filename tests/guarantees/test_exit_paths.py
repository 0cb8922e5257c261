"""Every way a call can end gives back its concurrency slot and records what was sent.

Each test runs with `max_concurrency=1` and no queueing: a slot not given back makes the next call
fail at once ("concurrency limit 1 reached"), so every test ends with a call that must succeed.
The loopback fault server scripts the timing; `KeyboardInterrupt` comes from a real SIGALRM while
the client is blocked reading the socket."""

from __future__ import annotations

import asyncio
import gc
import os
import threading
import time
import warnings
from typing import Any

import pytest

import llmroute as L
from llmroute.providers.base import OpenAICompatAdapter
from tests.resilience.client_helpers import MESSAGES, TIER, tier_config
from tests.servers.fault import slow_headers, status, timed

DEP = "a:m"


@pytest.fixture
def config(fault_server: Any) -> dict[str, Any]:
    return tier_config({"a": fault_server}, resilience={"max_concurrency": 1, "queue_timeout_s": 0})


def _slot_back(client: Any) -> None:
    assert client._engine.limits.in_flight(DEP) == 0
    out = client.chat.completions.create(model=TIER, messages=MESSAGES)
    assert out.choices[0].message.content


async def _aslot_back(client: Any) -> None:
    assert client._engine.limits.in_flight(DEP) == 0
    out = await client.chat.completions.create(model=TIER, messages=MESSAGES)
    assert out.choices[0].message.content


def _statuses(client: Any) -> list[str]:
    return [r.status for r in client._engine.ledger.records]



def test_return_and_provider_error(config: dict[str, Any], fault_server: Any) -> None:
    with L.Client(config=config) as client:
        client.chat.completions.create(model=TIER, messages=MESSAGES)
        fault_server.push(status(500))
        with pytest.raises(L.ProviderError):
            client.chat.completions.create(model=TIER, messages=MESSAGES)
        fault_server.push(status(500))
        with pytest.raises(L.ProviderError):
            for _ in client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True):
                pass
        _slot_back(client)
        assert _statuses(client) == ["ok", "error", "error", "ok"]


def test_stream_break_and_drop_is_abandoned_when_collected(config: dict[str, Any], fault_server: Any) -> None:
    with L.Client(config=config) as client:
        fault_server.push(timed(0.0, [0.05] * 40))
        stream = client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True)
        for _ in stream:
            break
        assert client._engine.limits.in_flight(DEP) == 1  # still open: the caller may read on
        del stream
        gc.collect()
        assert _statuses(client) == ["abandoned"]
        record = client._engine.ledger.records[0]
        assert record.input_tokens > 0 and record.usage_estimated
        _slot_back(client)


def test_stream_break_then_close_is_cancelled(config: dict[str, Any], fault_server: Any) -> None:
    with L.Client(config=config) as client:
        fault_server.push(timed(0.0, [0.05] * 40))
        with client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True) as stream:
            for _ in stream:
                break
        assert _statuses(client) == ["cancelled"]
        _slot_back(client)


def test_stream_closed_after_its_finish_reason_is_a_finished_answer(config: dict[str, Any], fault_server: Any) -> None:
    # The caller stops at the chunk that says the answer is finished (before the usage chunk and the
    # end marker): the answer is whole, so the attempt is `ok`, not cancelled, and `response` holds it.
    with L.Client(config=config) as client:
        expected = client.chat.completions.create(model=TIER, messages=MESSAGES).choices[0].message.content
        with client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True) as stream:
            for chunk in stream:
                if chunk.choices and chunk.choices[0].finish_reason:
                    break
        assert _statuses(client) == ["ok", "ok"]
        final = stream.response
        assert final.choices[0].message.content == expected and final.choices[0].finish_reason == "stop"
        record = client._engine.ledger.records[-1]
        assert record.output_tokens > 0 and record.cost is not None
        assert final.route.attempts[-1].status == "ok"
        _slot_back(client)


def test_async_stream_closed_after_its_finish_reason_is_a_finished_answer(config: dict[str, Any]) -> None:
    async def main() -> None:
        async with L.AsyncClient(config=config) as client:
            stream = await client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True)
            async with stream:
                async for chunk in stream:
                    if chunk.choices and chunk.choices[0].finish_reason:
                        break
            assert _statuses(client) == ["ok"]
            assert stream.response.choices[0].message.content and stream.response.usage.completion_tokens > 0
            stream = await client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True)
            async with stream:
                async for _ in stream:
                    break  # before the end: cancelled, as before
            assert _statuses(client) == ["ok", "cancelled"]
            with pytest.raises(L.StreamNotFinishedError):
                stream.response
            await _aslot_back(client)

    asyncio.run(main())


def test_keyboard_interrupt_waiting_for_headers(config: dict[str, Any], fault_server: Any, alarm: Any) -> None:
    with L.Client(config=config) as client:
        fault_server.push(slow_headers(3.0))
        alarm(0.3)
        with pytest.raises(KeyboardInterrupt):
            client.chat.completions.create(model=TIER, messages=MESSAGES)
        assert _statuses(client) == ["cancelled"]
        assert client._engine.ledger.records[0].input_tokens > 0  # the prompt was sent: billed as estimated
        _slot_back(client)


def test_keyboard_interrupt_mid_stream(config: dict[str, Any], fault_server: Any, alarm: Any) -> None:
    with L.Client(config=config) as client:
        fault_server.push(timed(0.0, [0.5] * 10))
        stream = client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True)
        alarm(0.3)
        with pytest.raises(KeyboardInterrupt):
            for _ in stream:
                pass
        assert _statuses(client) == ["cancelled"]
        assert client._engine.ledger.records[0].output_tokens > 0  # what arrived is billed
        _slot_back(client)


def test_our_own_bug_releases_and_records(config: dict[str, Any], fault_server: Any,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: Any, *args: Any) -> Any:
        raise ZeroDivisionError("a bug in llmroute")

    with L.Client(config=config) as client:
        # Plain calls are read as streams: the bug strikes while their chunks are decoded (the finish and
        # usage chunks are normalised after validation; chunks of other shapes by `normalize_chunk`).
        monkeypatch.setattr(OpenAICompatAdapter, "_normalize_validated", broken)
        monkeypatch.setattr(OpenAICompatAdapter, "normalize_chunk", broken)
        monkeypatch.setattr(OpenAICompatAdapter, "parse_completion", broken)
        with pytest.raises(ZeroDivisionError):
            client.chat.completions.create(model=TIER, messages=MESSAGES)
        monkeypatch.undo()
        assert _statuses(client) == ["error"]
        assert client._engine.ledger.records[0].error_type == "ZeroDivisionError"
        _slot_back(client)


def test_async_wait_for_timeout_and_task_cancel(config: dict[str, Any], fault_server: Any) -> None:
    async def main() -> None:
        async with L.AsyncClient(config=config) as client:
            fault_server.push(slow_headers(3.0))
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(client.chat.completions.create(model=TIER, messages=MESSAGES), 0.3)
            assert _statuses(client) == ["cancelled"]
            await _aslot_back(client)

            fault_server.push(timed(0.0, [0.5] * 10))
            stream = await client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True)

            async def drain() -> None:
                async for _ in stream:
                    pass

            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(drain(), 0.3)
            assert _statuses(client)[-2:] == ["ok", "cancelled"]
            await _aslot_back(client)

            fault_server.push(status(503))
            with pytest.raises(L.ProviderError):
                await client.chat.completions.create(model=TIER, messages=MESSAGES)
            await _aslot_back(client)

    asyncio.run(main())


def test_async_stream_dropped_unclosed(config: dict[str, Any], fault_server: Any) -> None:
    async def main() -> None:
        async with L.AsyncClient(config=config) as client:
            fault_server.push(timed(0.0, [0.05] * 40))
            stream = await client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True)
            async for _ in stream:
                break
            del stream
            gc.collect()
            await asyncio.sleep(0.05)  # the response is closed on the loop
            assert _statuses(client) == ["abandoned"]
            await _aslot_back(client)

    asyncio.run(main())


def test_call_after_close_and_from_a_second_loop(config: dict[str, Any], fault_server: Any) -> None:
    client = L.Client(config=config)
    client.close()
    with pytest.raises(L.ClientClosedError):
        client.chat.completions.create(model=TIER, messages=MESSAGES)

    aclient = L.AsyncClient(config=config)
    asyncio.run(aclient.chat.completions.create(model=TIER, messages=MESSAGES))
    assert not aclient._transport._loops  # the first loop's pools closed as that loop shut down
    asyncio.run(aclient.chat.completions.create(model=TIER, messages=MESSAGES))  # a second loop: pools of its own

    async def close_and_call() -> None:
        await aclient.aclose()
        with pytest.raises(L.ClientClosedError):
            await aclient.chat.completions.create(model=TIER, messages=MESSAGES)

    asyncio.run(close_and_call())
    assert len(fault_server.chat_requests()) == 2


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _collect_until(done: Any, timeout_s: float = 30.0) -> None:
    """Collect until `done()`. A `gc.collect()` made while another thread's collection is running
    returns without collecting, so one call is not enough on a busy process."""
    deadline = time.monotonic() + timeout_s
    while not done() and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.01)


def _unclosed(caught: Any, name: str) -> list:
    return [w for w in caught if issubclass(w.category, ResourceWarning) and f"unclosed {name}" in str(w.message)]


def test_dropped_clients_are_closed_by_the_collector(fault_server: Any, tmp_path: Any) -> None:
    from llmroute.accounting.sinks import read_records

    config = tier_config({"a": fault_server})
    gc.collect()
    threads, fds = threading.active_count(), _fds()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        for i in range(200):
            config["ledger"] = {"sink": "jsonl", "path": str(tmp_path / f"l{i}.jsonl")}
            client = L.Client(config=config)
            client.chat.completions.create(model=TIER, messages=MESSAGES)
            del client
        _collect_until(lambda: len(_unclosed(caught, "Client")) >= 200)
    time.sleep(0.5)  # the loopback server (in this process) closes its side of the connections
    assert len(_unclosed(caught, "Client")) == 200
    assert threading.active_count() - threads <= 2  # was +200 ledger threads
    assert _fds() - fds <= 10  # was +383
    assert sum(len(list(read_records(tmp_path / f"l{i}.jsonl"))) for i in range(200)) == 200


def test_forked_child_records_its_calls(fault_server: Any, tmp_path: Any) -> None:
    from llmroute.accounting.sinks import read_records

    path = tmp_path / "ledger.db"
    config = tier_config({"a": fault_server})
    config["ledger"] = {"sink": "sqlite", "path": str(path), "flush_interval_s": 0.05}
    client = L.Client(config=config)
    client.chat.completions.create(model=TIER, messages=MESSAGES, feature="parent")
    time.sleep(0.2)  # the parent's writer thread is running at the fork
    pid = os.fork()
    if pid == 0:  # the child: one call, close, and leave without running the parent's exit handlers
        code = 1
        try:
            client.chat.completions.create(model=TIER, messages=MESSAGES, feature="child")
            client.close()
            code = 0
        finally:
            os._exit(code)
    _, status_code = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status_code) == 0
    client.chat.completions.create(model=TIER, messages=MESSAGES, feature="parent")
    client.close()
    features = sorted(r.feature for r in read_records(path))
    assert features == ["child", "parent", "parent"]


def test_dropped_async_client_is_closed_with_a_warning(fault_server: Any, tmp_path: Any) -> None:
    from llmroute.accounting.sinks import read_records

    config = tier_config({"a": fault_server})
    config["ledger"] = {"sink": "jsonl", "path": str(tmp_path / "a.jsonl")}

    async def main() -> None:
        client = L.AsyncClient(config=config)
        await client.chat.completions.create(model=TIER, messages=MESSAGES)
        with pytest.warns(ResourceWarning, match="unclosed AsyncClient") as caught:
            del client
            _collect_until(lambda: bool(_unclosed(caught, "AsyncClient")))
        await asyncio.sleep(0.05)  # its connection pool is closed on this loop

    asyncio.run(main())
    assert len(list(read_records(tmp_path / "a.jsonl"))) == 1


def test_abandoned_and_cancelled_attempts_are_charged_to_budgets(fault_server: Any, alarm: Any) -> None:
    config = tier_config({"a": fault_server}, resilience={"max_concurrency": 1, "queue_timeout_s": 0})
    config["budgets"] = [{"name": "tokens", "max_tokens": 1_000_000}]
    with L.Client(config=config) as client:
        book = client._engine.budget_book
        fault_server.push(timed(0.0, [0.05] * 40))
        stream = client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True)
        for _ in stream:
            break
        del stream
        gc.collect()
        after_drop = book.spent("tokens", time.time())
        fault_server.push(slow_headers(3.0))
        alarm(0.3)
        with pytest.raises(KeyboardInterrupt):
            client.chat.completions.create(model=TIER, messages=MESSAGES)
        after_interrupt = book.spent("tokens", time.time())
        records = client._engine.ledger.records
    assert [r.status for r in records] == ["abandoned", "cancelled"]
    assert after_drop == records[0].input_tokens + records[0].output_tokens > 0
    assert after_interrupt == after_drop + records[1].input_tokens > after_drop


def _hedged(primary: Any, backup: Any) -> dict[str, Any]:
    return {
        "providers": {"p": {"kind": "vllm", "base_url": primary.base_url},
                      "b": {"kind": "vllm", "base_url": backup.base_url}},
        "tiers": {"large": {"deployments": ["p:m", "b:m"], "hedge_after_ms": 100, "hedge_budget": 1.0}},
        "resilience": {"max_concurrency": 1, "queue_timeout_s": 0},
        "pricing": {"p:*": {"input_per_million": 1, "output_per_million": 2},
                    "b:*": {"input_per_million": 1, "output_per_million": 2}},
        "ledger": {"sink": "memory"},
    }


def test_keyboard_interrupt_during_a_hedge_race_ends_both_attempts(make_server: Any, alarm: Any) -> None:
    primary, backup = make_server("fault"), make_server("fault")
    primary.push(slow_headers(3.0))
    backup.push(slow_headers(3.0))
    with L.Client(config=_hedged(primary, backup)) as client:
        alarm(0.6)  # after the hedge started: both attempts are waiting for headers
        with pytest.raises(KeyboardInterrupt):
            client.chat.completions.create(model="large", messages=MESSAGES)
        records = client._engine.ledger.records
        assert sorted(r.deployment for r in records) == ["b:m", "p:m"]
        assert {r.status for r in records} == {"cancelled"}
        assert client._engine.limits.in_flight("p:m") == client._engine.limits.in_flight("b:m") == 0
        out = client.chat.completions.create(model="large", messages=MESSAGES)
        assert out.choices[0].message.content


def test_async_hedge_race_cancelled_by_wait_for(make_server: Any) -> None:
    primary, backup = make_server("fault"), make_server("fault")
    primary.push(slow_headers(3.0))
    backup.push(slow_headers(3.0))

    async def main() -> None:
        async with L.AsyncClient(config=_hedged(primary, backup)) as client:
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(client.chat.completions.create(model="large", messages=MESSAGES), 0.6)
            records = client._engine.ledger.records
            assert sorted(r.deployment for r in records) == ["b:m", "p:m"]
            assert {r.status for r in records} == {"cancelled"}
            assert client._engine.limits.in_flight("p:m") == client._engine.limits.in_flight("b:m") == 0
            out = await client.chat.completions.create(model="large", messages=MESSAGES)
            assert out.choices[0].message.content

    asyncio.run(main())


def test_keyboard_interrupt_during_a_sync_embeddings_call(fault_server: Any, alarm: Any) -> None:
    config = {
        "providers": {"f": {"kind": "openai-compatible", "base_url": fault_server.base_url}},
        "tiers": {"embed": {"kind": "embedding", "deployments": ["f:fault-embed"]}},
        "resilience": {"max_concurrency": 1, "queue_timeout_s": 0},
        "pricing": {"f:*": {"input_per_million": 1, "output_per_million": 0}},
        "ledger": {"sink": "memory"},
    }
    with L.Client(config=config) as client:
        fault_server.push(slow_headers(3.0))
        alarm(0.3)
        with pytest.raises(KeyboardInterrupt):
            client.embeddings.create(model="embed", input=["one", "two"])
        assert _statuses(client) == ["cancelled"]  # the input was sent: recorded, billed as estimated
        assert client._engine.ledger.records[0].input_tokens > 0
        assert client._engine.limits.in_flight("f:fault-embed") == 0  # its slot is back
        out = client.embeddings.create(model="embed", input=["one"])
        assert len(out.data) == 1


def test_close_ends_streams_still_open_as_abandoned(config: dict[str, Any], fault_server: Any) -> None:
    client = L.Client(config=config)
    fault_server.push(timed(0.0, [0.05] * 40))
    stream = client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True)
    for _ in stream:
        break
    assert client._engine.limits.in_flight(DEP) == 1
    records = client._engine.ledger.records
    client.close()
    assert [r.status for r in records] == ["abandoned"]  # recorded by close(), the stream still referenced
    assert records[0].input_tokens > 0
    assert client._engine.limits.in_flight(DEP) == 0  # its slot is back
    stream.close()  # closing it afterwards records nothing more
    assert len(records) == 1


def test_aclose_ends_streams_still_open_as_abandoned(config: dict[str, Any], fault_server: Any) -> None:
    async def main() -> None:
        client = L.AsyncClient(config=config)
        fault_server.push(timed(0.0, [0.05] * 40))
        stream = await client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True)
        async for _ in stream:
            break
        records = client._engine.ledger.records
        await client.aclose()
        assert [r.status for r in records] == ["abandoned"]
        assert client._engine.limits.in_flight(DEP) == 0
        await stream.aclose()
        assert len(records) == 1

    asyncio.run(main())


@pytest.mark.parametrize("read_as_stream", [True, False])
def test_a_plain_call_in_another_thread_when_the_client_closes_is_abandoned(fault_server: Any,
                                                                           read_as_stream: bool) -> None:
    """close() while another thread's plain call is reading its answer: the call ends (no hang), its
    attempt is recorded once as `abandoned` (not an error of the deployment: the breaker is not told),
    and the caller gets ClientClosedError."""
    deployment = {"id": DEP, "plain_via_stream": read_as_stream}
    client = L.Client(config=tier_config({"a": fault_server}, deployments=[deployment]))
    # 3 s of answer (streamed) or of waiting for the status line (plain): close() lands in the middle.
    fault_server.push(timed(0.0, [0.05] * 60) if read_as_stream else slow_headers(3.0))
    outcome: dict[str, Any] = {}

    def call() -> None:
        try:
            outcome["result"] = client.chat.completions.create(model=TIER, messages=MESSAGES)
        except BaseException as exc:  # noqa: BLE001 - the test reads what the caller got
            outcome["error"] = exc

    worker = threading.Thread(target=call)
    worker.start()
    time.sleep(0.5)
    client.close()
    worker.join(10)
    assert not worker.is_alive()
    assert isinstance(outcome.get("error"), L.ClientClosedError), outcome
    assert _statuses(client) == ["abandoned"]
    breaker = client._engine.breakers.breaker(DEP).snapshot(time.monotonic())
    assert breaker.state == "closed" and breaker.consecutive_failures == 0


@pytest.mark.parametrize("read_as_stream", [True, False])
def test_an_async_call_in_another_task_when_the_client_closes_is_abandoned(fault_server: Any,
                                                                          read_as_stream: bool) -> None:
    """aclose() while another task's plain call is reading its answer: the same as on a thread."""
    deployment = {"id": DEP, "plain_via_stream": read_as_stream}
    fault_server.push(timed(0.0, [0.05] * 60) if read_as_stream else slow_headers(3.0))

    async def main() -> tuple[Any, list[str], Any]:
        client = L.AsyncClient(config=tier_config({"a": fault_server}, deployments=[deployment]))
        task = asyncio.ensure_future(client.chat.completions.create(model=TIER, messages=MESSAGES))
        await asyncio.sleep(0.5)
        await client.aclose()
        try:
            outcome: Any = await asyncio.wait_for(task, 10)
        except BaseException as exc:  # noqa: BLE001 - the test reads what the caller got
            outcome = exc
        return outcome, _statuses(client), client._engine.breakers.breaker(DEP).snapshot(time.monotonic())

    outcome, statuses, breaker = asyncio.run(main())
    assert isinstance(outcome, L.ClientClosedError), outcome
    assert statuses == ["abandoned"]
    assert breaker.state == "closed" and breaker.consecutive_failures == 0
