"""The few steps where llmroute's sync and async shells truly differ, written once in each colour.

scripts/gen_sync.py writes the sync shells (`Client`, `Stream`, `Embeddings`, `Models`, `Batches`) from the async
ones by replacing tokens (`async def` -> `def`, `await x` -> `x`, ...). Where a step is not a token away from its
twin (sleeping, running a step that may block, closing a response while the task is being cancelled, running several calls at once), the async
code calls the function here and the generated sync code calls its twin: the generator's table maps `asleep` ->
`sleep`, `aclose_shielded` -> `close_shielded`, `agather` -> `gather`. Each pair does the same thing.

Must never import asyncio at module top (`import llmroute` stays light, the sync client never needs it), nor do
I/O of its own beyond what it is handed.
"""

from __future__ import annotations

import time
from typing import Any, Awaitable, Callable, Iterable, List, TypeVar

__all__ = ["asleep", "sleep", "aclose_shielded", "close_shielded", "agather", "gather", "SyncOffload"]

T = TypeVar("T")


async def asleep(seconds: float) -> None:
    import asyncio  # not at import llmroute: the sync client never needs it

    await asyncio.sleep(seconds)


def sleep(seconds: float) -> None:
    time.sleep(seconds)  # looked up at each call: a test's patched time.sleep is honoured


async def aclose_shielded(response: Any) -> None:
    """Close `response` even while the task awaiting this is being cancelled."""
    import asyncio  # not at import llmroute: the sync client never needs it

    await asyncio.shield(response.aclose())


def close_shielded(response: Any) -> None:
    response.close()  # nothing cancels a thread mid-way


async def agather(calls: Iterable[Callable[[], Awaitable[T]]]) -> List[T]:
    """Each call's result, in order, the calls run concurrently."""
    import asyncio  # not at import llmroute: the sync client never needs it

    return list(await asyncio.gather(*(call() for call in calls)))


def gather(calls: Iterable[Callable[[], T]]) -> List[T]:
    """Each call's result, in order, one after the other."""
    return [call() for call in calls]


class SyncOffload:
    """The sync twin of `_call.offload.Offload` (an `AsyncClient` runs the steps that may block in worker
    threads, off its event loop): a sync client runs them on the caller's thread, as they come."""

    inline = True

    def run(self, fn: Callable[..., T], *args: Any, undo: Callable[[T], None] | None = None) -> T:
        return fn(*args)
