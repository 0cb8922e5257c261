"""`AsyncClient` with an SQLite cache: lookups and stores run in its worker threads (llmroute/_call/offload.py),
and a call made after another one returned still finds its answer (a lookup waits for the stores
still queued)."""

from __future__ import annotations

import asyncio
import threading

import llmroute as L


def test_sqlite_lookups_and_stores_run_off_the_loop_and_read_their_writes(make_server, tmp_path):
    server = make_server("fault")
    cfg = {"providers": {"p": {"kind": "vllm", "base_url": server.base_url}},
           "tiers": {"chat": {"deployments": ["p:m"]}}, "ledger": {"sink": "memory"},
           "pricing": {"p:*": {"input_per_million": 1, "output_per_million": 1}},
           "cache": {"enabled": True, "backend": "sqlite", "path": str(tmp_path / "c.db"),
                     "reproducible_only": False}}
    threads: set = set()

    async def main():
        async with L.AsyncClient(config=cfg) as client:
            backend = client.cache.backend
            for name in ("get", "set"):  # note the thread each backend call runs on
                original = getattr(backend, name)

                def spy(*a, _original=original, **k):
                    threads.add(threading.current_thread().name)
                    return _original(*a, **k)

                setattr(backend, name, spy)
            out = []
            for stream in (False, True, False):
                messages = [{"role": "user", "content": f"q {stream}"}]
                for _ in range(2):
                    if stream:
                        async with await client.chat.completions.create(
                                model="chat", messages=messages, stream=True) as s:
                            await s.get_final_completion()
                            out.append(s.route.cache)
                    else:
                        out.append((await client.chat.completions.create(model="chat", messages=messages)).route.cache)
            return client._offload.inline, out, threading.current_thread().name

    inline, outcomes, loop_thread = asyncio.run(main())
    assert inline is False
    assert outcomes == ["miss", "hit", "miss", "hit", "hit", "hit"]  # plain and streamed calls share entries
    assert threads and loop_thread not in threads and all(t.startswith("llmroute-offload") for t in threads)
    assert len(server.chat_requests()) == 2


def test_a_store_that_lands_between_the_lookup_and_the_check_is_looked_for_again():
    """The race behind a rare miss: the lookup missed, then this client's queued store of the key ran and
    left the queue before `wait_queued` looked. A keyed store finished since the lookup began still says
    "look again"; without one, nothing is waited for."""
    from llmroute._call.offload import Offload

    offload = Offload(inline=False)
    try:
        async def scenario() -> tuple[bool, bool, bool]:
            before = offload.keyed_done()
            stored = threading.Event()
            offload.submit(stored.set, key=("ns", "k"))
            assert await asyncio.get_running_loop().run_in_executor(None, stored.wait, 5)
            for _ in range(500):  # the store has run; wait until it has also left the queue
                if offload.keyed_done() != before:
                    break
                await asyncio.sleep(0.01)
            landed = await offload.wait_queued(("ns", "k"), since=before)
            unrelated = await offload.wait_queued(("ns", "other"), since=offload.keyed_done())
            without_since = await offload.wait_queued(("ns", "k"))
            return landed, unrelated, without_since

        assert asyncio.run(scenario()) == (True, False, False)
    finally:
        offload.close()
