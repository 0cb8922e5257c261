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
