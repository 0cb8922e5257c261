"""Every backend through the client (in-process, SQLite file, a real redis-server), their bounds, and
failures: a backend that dies or a file that is corrupt makes misses, warnings and counts, never a
failed call."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from llmroute import Client
from llmroute.cache.backends import MemoryBackend, RedisBackend, SQLiteBackend
from tests.cache.conftest import MESSAGES, cache_config
from tests.servers.redis_server import RedisServer

REPO = Path(__file__).resolve().parents[2]


def call(client, **kw):
    kw.setdefault("model", "t")
    kw.setdefault("messages", MESSAGES)
    kw.setdefault("temperature", 0)
    return client.chat.completions.create(**kw)


def backend_section(kind: str, tmp_path: Path, redis_url: str | None) -> dict:
    if kind == "sqlite":
        return {"backend": "sqlite", "path": str(tmp_path / "cache.db")}
    if kind == "redis":
        return {"backend": "redis", "url": redis_url}
    return {"backend": "memory"}


@pytest.fixture(params=["memory", "sqlite", "redis"])
def backend_kind(request):
    return request.param


@pytest.fixture
def section(backend_kind, tmp_path, request):
    url = request.getfixturevalue("redis_url") if backend_kind == "redis" else None
    return backend_section(backend_kind, tmp_path, url)


def test_every_backend_serves_hits_streamed_or_not_expires_and_clears(vllm_server, section, clock):
    with Client(config=cache_config(vllm_server, cache={**section, "ttl_s": 30})) as client:
        client.cache.clock = clock
        outcomes = [call(client, feature="f").route.cache for _ in range(2)]
        stream = call(client, feature="f", stream=True)
        chunks = list(stream)
        outcomes.append(stream.route.cache)
        outcomes.append(call(client, feature="g").route.cache)
        clock.advance(31)
        outcomes.append(call(client, feature="f").route.cache)
        assert client.cache.clear(namespace=client.cache.namespace("g")) >= 1
        outcomes.append(call(client, feature="g").route.cache)
        stats = client.cache.stats()
    assert outcomes == ["miss", "hit", "hit", "miss", "miss", "miss"]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hello from vllm"
    assert stats["hit"] == 2 and stats["store"]["entries"] >= 1 and stats.get("errors", 0) == 0
    assert len(vllm_server.chat_requests()) == 4


def test_sqlite_entries_survive_a_restart_and_are_shared_with_another_process(vllm_server, tmp_path):
    cfg = cache_config(vllm_server, cache={"backend": "sqlite", "path": str(tmp_path / "c.db")})
    child = ("import sys; from llmroute import Client; sys.path.insert(0, sys.argv[2]);"
             "from tests.cache.conftest import cache_config, MESSAGES;"
             "import types; s = types.SimpleNamespace(base_url=sys.argv[1]);"
             "cfg = cache_config(s, cache={'backend': 'sqlite', 'path': sys.argv[3]});"
             "c = Client(config=cfg); r = c.chat.completions.create(model='t', messages=MESSAGES, temperature=0);"
             "print(r.route.cache); c.close()")
    out = subprocess.run([sys.executable, "-c", child, vllm_server.base_url, str(REPO), str(tmp_path / "c.db")],
                         capture_output=True, text=True, timeout=60, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "miss"
    with Client(config=cfg) as client:
        assert call(client).route.cache == "hit"
    with Client(config=cfg) as client:
        assert call(client).route.cache == "hit"
    assert len(vllm_server.chat_requests()) == 1


def test_two_clients_share_answers_through_redis(vllm_server, redis_url):
    cfg = cache_config(vllm_server, cache={"backend": "redis", "url": redis_url})
    with Client(config=cfg) as a, Client(config=cfg) as b:
        assert call(a).route.cache == "miss"
        assert call(b).route.cache == "hit"
    assert len(vllm_server.chat_requests()) == 1


def test_a_redis_server_that_dies_mid_run_makes_misses_and_a_warning_never_errors(vllm_server, caplog, clock):
    redis = RedisServer().start()
    try:
        cfg = cache_config(vllm_server, cache={"backend": "redis", "url": redis.url, "retry_after_error_s": 10})
        with Client(config=cfg) as client:
            client.cache.clock = clock
            assert [call(client).route.cache for _ in range(2)] == ["miss", "hit"]
            redis.stop()
            with caplog.at_level(logging.WARNING, logger="llmroute.cache"):
                down = [call(client).route.cache for _ in range(3)]
            assert down == ["miss"] * 3
            stats = client.cache.stats()
            assert stats["errors"] >= 1 and stats["backend_skipped"] >= 1 and "error" in stats["store"]
            assert any("served as a miss" in r.getMessage() for r in caplog.records)
            assert all("redis://" not in r.getMessage() for r in caplog.records)
            redis.start()  # back on the same port, empty
            clock.advance(11)
            assert [call(client).route.cache for _ in range(2)] == ["miss", "hit"]
    finally:
        redis.stop()
    assert len(vllm_server.chat_requests()) == 5


def test_a_corrupt_sqlite_file_and_a_corrupt_entry_are_misses(vllm_server, tmp_path, redis_url):
    path = tmp_path / "c.db"
    path.write_bytes(b"this is not a database" * 100)
    with Client(config=cache_config(vllm_server, cache={"backend": "sqlite", "path": str(path)})) as client:
        assert [call(client).route.cache for _ in range(2)] == ["miss", "miss"]
        assert client.cache.stats()["errors"] >= 1
    cfg = cache_config(vllm_server, cache={"backend": "redis", "url": redis_url})
    with Client(config=cfg) as client:
        call(client)
        import redis as redis_py

        r = redis_py.Redis.from_url(redis_url)
        keys = [k for k in r.keys("llmroute:cache:*:e:*")]
        assert len(keys) == 1
        r.set(keys[0], b"\x00garbage")
        r.close()
        assert call(client).route.cache == "miss"
        assert client.cache.stats()["corrupt"] == 1
        assert call(client).route.cache == "hit"  # the miss stored a good entry over it


def test_memory_backend_is_bounded_in_entries_and_bytes():
    entries = MemoryBackend(max_entries=3, max_bytes=10_000)
    for i in range(5):
        entries.set("ns", f"k{i}", b"x" * 10, expires_at=100, now=0)
    assert entries.stats(0)["entries"] == 3 and entries.get("ns", "k0", 0) is None and entries.get("ns", "k4", 0)
    sized = MemoryBackend(max_entries=100, max_bytes=250)
    for i in range(5):
        sized.set("ns", f"k{i}", b"x" * 100, expires_at=100, now=0)
    assert sized.stats(0)["bytes"] <= 250 and sized.stats(0)["entries"] == 2
    assert sized.get("ns", "k4", 50) and sized.get("ns", "k4", 100) is None  # expired at its time


def test_sqlite_backend_prunes_past_its_bounds(tmp_path):
    backend = SQLiteBackend(tmp_path / "b.db", max_entries=10, max_bytes=10**9)
    for i in range(130):
        backend.set("ns", f"k{i}", b"v", expires_at=1000, now=float(i))
    stats = backend.stats(0)
    assert stats["entries"] <= 10 + SQLiteBackend.PRUNE_EVERY
    assert backend.get("ns", "k129", 1) == b"v" and backend.get("ns", "k0", 1) is None
    backend.close()


def test_redis_backend_reuses_a_given_connection(redis_url):
    import redis as redis_py

    conn = redis_py.Redis.from_url(redis_url)
    backend = RedisBackend(client=conn, prefix="shared")
    backend.set("ns", "k", b"v", expires_at=10_000_000_000, now=0, group="g", record=b"r")
    assert backend.get("ns", "k", 0) == b"v" and backend.group("ns", "g", 0, 10) == [("k", b"r")]
    assert conn.pttl("shared:" + backend._entry_key("ns", "k").split(":", 1)[1]) > 0
    assert backend.clear("ns") >= 1 and backend.get("ns", "k", 0) is None
    backend.close()
    assert conn.ping()  # not closed: the connection belongs to its owner
    conn.close()
    assert "redis://" not in repr(RedisBackend(url="redis://:secret@127.0.0.1:1/0"))
