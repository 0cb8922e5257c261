"""`AsyncClient` never blocks its event loop on shared state or cache I/O (llmroute/_call/offload.py).

A real redis-server behind a proxy that adds `DELAY_S` to every round trip stands for a remote Redis;
shared budgets and limits (admission: one script before sending) and the response cache on Redis
(a lookup before, a store after) all go through it. A heartbeat task on the same loop records its
worst lateness while calls run. The same calls with the steps run inline on the loop (the behaviour
before, `Offload.inline`) are measured in the same test: their lateness is at least one round trip,
which shows the heartbeat measures what it should.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import llmroute as L
from tests.servers.slow_proxy import SlowProxy

DELAY_S = 0.15  # per round trip through the proxy; below the cache's and the state's timeouts
CALLS = 4


def _config(server, redis_url, *, cache=True, limits=None, budget=True):
    cfg = {
        "providers": {"p": {"kind": "vllm", "base_url": server.base_url}},
        "tiers": {"chat": {"deployments": ["p:m"]}},
        "pricing": {"p:*": {"input_per_million": 1, "output_per_million": 1}},
        "resilience": {"max_retries": 0, "rpm": 10_000, "max_concurrency": 64, **(limits or {})},
        "budgets": [{"name": "d", "max_tokens": 10_000_000}],
        "ledger": {"sink": "memory"},
        "state": {"backend": "redis", "url": redis_url, "key_prefix": "s:", "timeout_ms": 3000},
    }
    if not budget:
        del cfg["budgets"]
    if cache:
        cfg["cache"] = {"enabled": True, "backend": "redis", "url": redis_url, "timeout_s": 3.0,
                        "reproducible_only": False}
    return cfg


async def _heartbeat(stop: asyncio.Event, lags: list) -> None:
    """Wakes every 5 ms and records how late each wake-up was."""
    while not stop.is_set():
        due = time.monotonic() + 0.005
        await asyncio.sleep(0.005)
        lags.append(time.monotonic() - due)


async def _calls_with_heartbeat(cfg, *, inline: bool, stream: bool, tag: str):
    """Runs CALLS concurrent calls (distinct prompts: cache misses, then stores); returns the
    heartbeat's worst lateness, the answers, and the client's cache stats after closing."""
    lags: list = []
    stop = asyncio.Event()
    client = L.AsyncClient(config=cfg)
    if inline:
        client._offload.inline = True  # the steps on the loop thread, as before llmroute/_call/offload.py
    io_threads = _spy_io_threads(client)
    beat = asyncio.create_task(_heartbeat(stop, lags))
    await asyncio.sleep(0.02)

    async def one(i: int):
        messages = [{"role": "user", "content": f"{tag} question {i}"}]
        if not stream:
            return await client.chat.completions.create(model="chat", messages=messages)
        async with await client.chat.completions.create(model="chat", messages=messages, stream=True) as s:
            return await s.get_final_completion()

    try:
        answers = await asyncio.gather(*(one(i) for i in range(CALLS)))
    finally:
        stop.set()
        await beat
        await client.aclose()
    assert inline or threading.current_thread().name not in io_threads, io_threads  # no Redis I/O on the loop
    return max(lags), answers, client.cache.stats(), client._engine.ledger.records


def _spy_io_threads(client) -> set:
    """The names of the threads the client's Redis commands (shared state, cache) run on."""
    threads: set = set()
    state, backend = client._engine.fleet.state, client.cache.backend
    for owner, name in ((state, "run"), (backend, "get"), (backend, "set")):
        original = getattr(owner, name)

        def spy(*a, _original=original, **k):
            threads.add(threading.current_thread().name)
            return _original(*a, **k)

        setattr(owner, name, spy)
    return threads


@pytest.mark.parametrize("stream", [False, True])
def test_the_loop_keeps_running_while_calls_wait_on_a_slow_redis(make_server, redis_server, stream):
    server = make_server("fault")
    with SlowProxy(("127.0.0.1", redis_server.port), delay_s=DELAY_S) as proxy:
        cfg = _config(server, proxy.url())
        blocked, _, _, _ = asyncio.run(_calls_with_heartbeat(cfg, inline=True, stream=stream, tag="inline"))
        before = proxy.forwarded
        lag, answers, stats, records = asyncio.run(
            _calls_with_heartbeat(cfg, inline=False, stream=stream, tag="offloaded"))
        round_trips = proxy.forwarded - before
    print(f"heartbeat's worst lag: inline {blocked * 1000:.0f} ms, offloaded {lag * 1000:.1f} ms "
          f"({round_trips} round trips of {DELAY_S * 1000:.0f} ms)")
    # the inline run held the loop for whole round trips: the heartbeat sees it
    assert blocked >= DELAY_S * 0.9, blocked
    # offloaded, the same round trips (admission, cache lookup and store per call) leave the loop free:
    # what lateness remains is the calls' own CPU (and the machine's load), a fraction of the above
    assert round_trips >= 3 * CALLS, round_trips
    assert lag < blocked / 4, (lag, blocked)
    assert all(a.choices[0].message.content for a in answers)
    assert stats["stores"] == CALLS  # the stores handed to the worker thread all ran before aclose()
    assert len(records) == CALLS and all(r.status == "ok" for r in records)


def test_embeddings_admission_runs_off_the_loop(make_server, redis_server):
    server = make_server("vllm")
    with SlowProxy(("127.0.0.1", redis_server.port), delay_s=DELAY_S) as proxy:
        cfg = _config(server, proxy.url(), cache=False)
        cfg["tiers"] = {"embed": {"kind": "embedding", "deployments": ["p:BAAI/bge-m3"]}}

        async def main(inline: bool):
            lags: list = []
            stop = asyncio.Event()
            async with L.AsyncClient(config=cfg) as client:  # (building it reads the fleet's breakers)
                client._offload.inline = inline
                threads = _spy_io_threads(client)
                beat = asyncio.create_task(_heartbeat(stop, lags))
                out = await asyncio.gather(*(client.embeddings.create(model="embed", input=f"text {i}")
                                             for i in range(CALLS)))
                stop.set()
                await beat
            return max(lags), out, threads

        blocked, _, _ = asyncio.run(main(True))
        before = proxy.forwarded
        lag, out, threads = asyncio.run(main(False))
        assert proxy.forwarded - before >= CALLS  # one admission per call went through the proxy
    assert blocked >= DELAY_S * 0.9 and lag < blocked / 4, (lag, blocked)
    # (the breakers' sync and the slots' renewal have threads of their own; aclose() one more)
    assert threading.current_thread().name not in threads and "llmroute-offload_0" in threads, threads
    assert all(r.data for r in out)


def test_a_call_cancelled_during_admission_gives_back_what_admission_took(make_server, redis_server):
    """The task is cancelled while the budget reservation and the concurrency slot (one script) are
    being taken in a worker thread: once that script has answered, both are given back, nothing is
    sent, and the next call gets the deployment's only slot."""
    server = make_server("fault")
    with SlowProxy(("127.0.0.1", redis_server.port), delay_s=DELAY_S) as proxy:
        cfg = _config(server, proxy.url(), cache=False, limits={"max_concurrency": 1, "queue_timeout_s": 0})
        messages = [{"role": "user", "content": "hello"}]

        async def main():
            async with L.AsyncClient(config=cfg) as client:
                task = asyncio.create_task(client.chat.completions.create(model="chat", messages=messages))
                await asyncio.sleep(DELAY_S / 3)  # the admission script is on its way through the proxy
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                await asyncio.sleep(DELAY_S * 4)  # the script answers; its slot is released
                answer = await client.chat.completions.create(model="chat", messages=messages)
                return answer, client._engine.ledger.records

        answer, records = asyncio.run(main())
    assert answer.route.deployment == "p:m"
    assert len(server.chat_requests()) == 1 and len(records) == 1 and records[0].status == "ok"


def test_local_state_and_memory_cache_run_inline(make_server):
    """Without shared state or a backend that does I/O there is nothing to move off the loop."""
    server = make_server("fault")
    cfg = {"providers": {"p": {"kind": "vllm", "base_url": server.base_url}},
           "tiers": {"chat": {"deployments": ["p:m"]}}, "ledger": {"sink": "memory"},
           "pricing": {"p:*": {"input_per_million": 0, "output_per_million": 0}},
           "cache": {"enabled": True, "backend": "memory"}}

    async def main():
        async with L.AsyncClient(config=cfg) as client:
            return client._offload.inline

    assert asyncio.run(main()) is True


def test_a_breaker_an_async_client_opens_is_published_to_the_fleet(make_server, redis_server):
    """The publish is handed to the client's worker thread (not made on the loop) and still reaches
    Redis: a sync client (another process) finds the breaker open and sends nothing."""
    from tests.servers.fault import status

    server = make_server("fault")
    cfg = _config(server, redis_server.url, cache=False)
    cfg["resilience"].update({"consecutive_failures": 2, "open_s": 60, "open_max_s": 60})
    server.push(status(503), status(503))

    async def main():
        async with L.AsyncClient(config=cfg) as client:
            assert client._engine.fleet.breakers.later == client._offload.submit
            for _ in range(2):
                with pytest.raises(L.LLMRouteError):
                    await client.chat.completions.create(model="chat", messages=[{"role": "user", "content": "x"}])
            return client.health()["p:m"].state

    assert asyncio.run(main()) == "open"
    with L.Client(config=cfg) as other:
        view = other.health()
        assert view["p:m"].state == "open" and "another process" in view["p:m"].reason
        with pytest.raises(L.InternalServerError) as held:  # the class that opened it: a 503
            other.chat.completions.create(model="chat", messages=[{"role": "user", "content": "y"}])
        assert held.value.held and held.value.status_code == 503
    assert len(server.chat_requests()) == 2


def test_a_call_cancelled_during_a_plan_step_sends_nothing_and_gives_its_slot_back(make_server, redis_server):
    """Limits without a budget: the slot is taken by the plan's step (a script in a worker thread).
    Cancelled meanwhile, the task waits for the step, the attempt it began is ended unsent (not
    billed) and its slot is released: the next call gets the only slot."""
    server = make_server("fault")
    with SlowProxy(("127.0.0.1", redis_server.port), delay_s=DELAY_S) as proxy:
        cfg = _config(server, proxy.url(), cache=False, budget=False,
                      limits={"max_concurrency": 1, "queue_timeout_s": 0})
        messages = [{"role": "user", "content": "hello"}]

        async def main():
            async with L.AsyncClient(config=cfg) as client:
                await client.chat.completions.create(model="chat", messages=messages)  # the script is loaded
                await asyncio.sleep(DELAY_S * 4)  # and that call's slot released (a background ZREM)
                task = asyncio.create_task(client.chat.completions.create(model="chat", messages=messages))
                await asyncio.sleep(DELAY_S / 3)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                await asyncio.sleep(0.3)  # the release is sent by the limits' background thread
                answer = await client.chat.completions.create(model="chat", messages=messages)
                return answer, client._engine.ledger.records

        answer, records = asyncio.run(main())
    assert answer.route.deployment == "p:m"
    assert len(server.chat_requests()) == 2
    assert [r.status for r in records] == ["ok", "cancelled", "ok"]
    unsent = records[1]  # begun by the step, never sent: no tokens, no cost
    assert unsent.input_tokens == 0 and unsent.cost == 0 and not unsent.estimated, unsent


def test_spans_started_in_a_worker_thread_keep_the_callers_parent(make_server, redis_server):
    """The call's span is started by the admission step, in a worker thread: it runs in a copy of the
    task's context, so the application's current span is still its parent."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    server = make_server("fault")
    cfg = _config(server, redis_server.url, cache=False)

    async def main():
        async with L.AsyncClient(config=cfg) as client:
            assert client._offload.inline is False
            client._engine.telemetry._tracer_provider = provider  # this test's provider, not the global one
            with provider.get_tracer("app").start_as_current_span("handle request") as app:
                await client.chat.completions.create(model="chat", messages=[{"role": "user", "content": "x"}])
            return app

    app = asyncio.run(main())
    spans = exporter.get_finished_spans()
    calls = [s for s in spans if s.kind == trace.SpanKind.CLIENT]
    assert len(calls) == 1 and calls[0].parent is not None
    assert calls[0].parent.span_id == app.get_span_context().span_id
    provider.shutdown()


def test_a_call_after_a_miss_finds_its_answer_while_the_store_is_still_queued(make_server, redis_server):
    """The store after a miss is queued on a worker thread (here behind other work: it starts late);
    the same call made right after the first returned waits for that store and is a hit."""
    server = make_server("fault")
    with SlowProxy(("127.0.0.1", redis_server.port), delay_s=DELAY_S) as proxy:
        cfg = _config(server, proxy.url())
        messages = [{"role": "user", "content": "same question"}]

        async def main():
            async with L.AsyncClient(config=cfg) as client:
                put = client.cache.put

                def slow_put(*a, **k):  # the store waits behind others on its queue
                    time.sleep(DELAY_S * 2)
                    return put(*a, **k)

                client.cache.put = slow_put
                first = await client.chat.completions.create(model="chat", messages=messages)
                second = await client.chat.completions.create(model="chat", messages=messages)
                return first.route.cache, second.route.cache, client.cache.stats()

        outcomes = asyncio.run(main())
    assert outcomes[:2] == ("miss", "hit"), outcomes
    assert outcomes[2]["hit"] == 1 and outcomes[2]["miss"] == 1, outcomes[2]
    assert len(server.chat_requests()) == 1
