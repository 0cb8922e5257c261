"""Fixtures for the cache tests: a real redis-server for the session, a config over the vLLM loopback
server with a priced deployment and an in-memory ledger, and a fake wall clock."""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from tests.servers.redis_server import RedisServer

MODEL = "Qwen/Qwen2.5-7B-Instruct"
DEP = f"v:{MODEL}"
MESSAGES = [{"role": "user", "content": "please say hello there"}]


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.fixture
def redis_url(redis_server: RedisServer) -> Iterator[str]:
    import redis

    r = redis.Redis.from_url(redis_server.url)
    r.flushdb()
    yield redis_server.url
    r.flushdb()
    r.close()


class FakeClock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def cache_config(server: Any, *, cache: dict[str, Any] | None = None, tiers: dict[str, Any] | None = None,
                 **sections: Any) -> dict[str, Any]:
    """One vLLM deployment priced at 1/2 USD per million tokens, tier `t`, memory ledger, `[cache]`."""
    return {
        "providers": {"v": {"kind": "vllm", "base_url": server.base_url}},
        "tiers": tiers or {"t": {"deployments": [DEP]}},
        "resilience": {"max_retries": 0, "consecutive_failures": 10_000, "min_calls": 10_000},
        "pricing": {DEP: {"input_per_million": 1, "output_per_million": 2, "currency": "USD"}},
        "ledger": {"sink": "memory"},
        "cache": {"enabled": True, **(cache or {})},
        **sections,
    }


@pytest.fixture(scope="session")
def embedding_server():
    """A loopback /v1/embeddings server around the real USE-multilingual model (shipped in a package)."""
    from tests.servers.embedding_model import EmbeddingServer

    with EmbeddingServer() as server:
        yield server
