"""Fixtures: a real redis-server and a real PostgreSQL per test module, on free loopback ports."""

from __future__ import annotations

import pytest

from tests.state.servers import PostgresServer, RedisServer


@pytest.fixture
def redis_server():
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def postgres_server():
    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.stop()
