"""Fixtures the guarantee tests share."""

from __future__ import annotations

import signal
from typing import Any, Iterator

import pytest

from tests.servers.hostile import HostileServer


@pytest.fixture(scope="module")
def hostile() -> Iterator[HostileServer]:
    """One hostile loopback server per test module (each test sets its `mode`)."""
    with HostileServer() as server:
        yield server


@pytest.fixture
def alarm() -> Iterator[Any]:
    """`alarm(seconds)`: a KeyboardInterrupt in the main thread after `seconds`, like Ctrl-C."""
    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, handler)
    yield lambda seconds: signal.setitimer(signal.ITIMER_REAL, seconds)
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, previous)
