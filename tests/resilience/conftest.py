"""Fixtures for the client-level resilience tests: three timed fault servers, reset around each test."""

from __future__ import annotations

from typing import Iterator

import pytest

from tests.resilience.client_helpers import TimedFaultServer


@pytest.fixture(scope="session")
def _timed_servers() -> Iterator[dict[str, TimedFaultServer]]:
    servers = {name: TimedFaultServer().start() for name in ("a", "b", "c")}
    yield servers
    for server in servers.values():
        server.stop()


@pytest.fixture
def servers(_timed_servers: dict[str, TimedFaultServer]) -> Iterator[dict[str, TimedFaultServer]]:
    """Servers "a", "b", "c" (fault servers that stamp arrival times), with no script and no record."""
    for server in _timed_servers.values():
        server.reset()
    yield _timed_servers
    for server in _timed_servers.values():
        server.reset()
