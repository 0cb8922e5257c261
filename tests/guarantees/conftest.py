"""Fixtures the guarantee tests share."""

from __future__ import annotations

import signal
from typing import Any, Iterator

import pytest


@pytest.fixture
def alarm() -> Iterator[Any]:
    """`alarm(seconds)`: a KeyboardInterrupt in the main thread after `seconds`, like Ctrl-C."""
    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, handler)
    yield lambda seconds: signal.setitimer(signal.ITIMER_REAL, seconds)
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, previous)
