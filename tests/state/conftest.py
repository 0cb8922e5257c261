"""Fixtures: a real redis-server per test and one real PostgreSQL per session (a database per test), on
free loopback ports."""

from __future__ import annotations

import uuid

import pytest

from tests.state.servers import PostgresServer, RedisCluster, RedisServer


@pytest.fixture
def redis_server():
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_cluster():
    """Three local redis-server nodes in cluster mode, started for the test."""
    cluster = RedisCluster().start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def postgres_server():
    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(postgres_server):
    """A fresh database on the session's PostgreSQL."""
    import psycopg

    name = "t" + uuid.uuid4().hex[:10]
    with psycopg.connect(postgres_server.url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return postgres_server.url.rsplit("/", 1)[0] + "/" + name
