"""`AsyncClient`'s worker threads for the blocking steps of a call: shared state and cache I/O.

With `[state] backend = "redis"` a call's admission (budget reservation, client-side limits) and
its plan's steps (a limit's admission, a half-open breaker's probe slot) are Redis round trips made
with a synchronous client; with the response cache on SQLite or Redis the lookup and the store are
too. `AsyncClient` runs those steps here, in a small pool of threads it owns, so its event loop
never waits on them: the loop awaits the step's future instead. A client with none of these
(local state, the memory cache) runs the steps inline, as before: a thread hop would only add
latency.

Order and release guarantees hold: a call's steps still run one at a time (each is awaited before
the next starts) and the reservation is taken before anything is sent. A task cancelled while one
of its steps runs in a thread waits (without holding the loop) for that step to end, at most the
backend's timeout, as a step run inline would have, then gives back what the step took (`undo`)
and goes on with its cancellation: the call's ending (`CallRun.settle`) never runs concurrently
with one of its steps.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable, Dict, TypeVar

if TYPE_CHECKING:
    import concurrent.futures

__all__ = ["Offload", "engine_blocks", "cache_blocks", "mark_unsent", "end_cancelled", "end_after"]

T = TypeVar("T")

# Worker threads: a step holds one for about a round trip (at most the backend's timeout); redis-py
# gives each thread a connection of its pool, SQLite serialises on its own lock.
WORKERS = 4


def engine_blocks(engine: Any) -> bool:
    """Does a call's admission or plan step do network I/O? (`[state] backend = "redis"`)"""
    return getattr(engine, "fleet", None) is not None


def cache_blocks(cache: Any) -> bool:
    """Do the cache's lookups and stores do I/O? (an SQLite or Redis backend)"""
    return cache is not None and cache.config.backend != "memory"


class Offload:
    """A client's worker threads for blocking steps; `inline` runs them on the caller's thread."""

    def __init__(self, *, inline: bool, workers: int = WORKERS) -> None:
        self.inline = inline
        self._workers = workers
        self._pool: "concurrent.futures.ThreadPoolExecutor | None" = None
        self._serial: "concurrent.futures.ThreadPoolExecutor | None" = None  # `submit`'s one thread, in order
        self._lock = threading.Lock()
        self._closed = False
        self._queued: Dict[Any, "concurrent.futures.Future[Any]"] = {}  # a keyed `submit`'s key -> its latest run
        self._keyed_done = 0  # keyed submits finished (wait_queued: did a store land since a lookup began?)

    def _executor(self) -> "concurrent.futures.ThreadPoolExecutor":
        import concurrent.futures  # with the first step: `import llmroute` stays light

        with self._lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(self._workers, thread_name_prefix="llmroute-offload")
            return self._pool

    def _serial_executor(self) -> "concurrent.futures.ThreadPoolExecutor":
        import concurrent.futures  # with the first store: `import llmroute` stays light

        with self._lock:
            if self._serial is None:
                self._serial = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="llmroute-offload-later")
            return self._serial

    async def run(self, fn: Callable[..., T], *args: Any, undo: Callable[[T], None] | None = None) -> T:
        """`fn(*args)`, in a worker thread unless `inline`. When the awaiting task is cancelled, the
        step is waited for (it cannot be stopped mid-way), `undo(result)` gives back what it took,
        and the cancellation goes on."""
        if self.inline or self._closed:
            return fn(*args)
        import asyncio
        import contextvars

        # in a copy of the task's context: spans started there have the caller's span as parent
        step = asyncio.wrap_future(self._executor().submit(contextvars.copy_context().run, fn, *args))
        try:
            return await asyncio.shield(step)
        except asyncio.CancelledError:
            while not step.done():
                try:
                    await asyncio.shield(step)
                except asyncio.CancelledError:  # cancelled again: the step still has to end first
                    continue
                except Exception:  # noqa: BLE001 - the step failed: it took nothing to give back
                    break
            if undo is not None and step.done() and not step.cancelled() and step.exception() is None:
                undo(step.result())
            raise

    def submit(self, fn: Callable[..., Any], *args: Any, key: Any = None) -> None:
        """Run `fn(*args)` later, without waiting for it (a cache store, a breaker's publish), on one
        thread in the order submitted; inline when `inline` or closed. `close()` waits for them.
        `key` (a cache entry's) lets `wait_queued(key)` wait for it."""
        if self.inline or self._closed:
            fn(*args)
            return
        future = self._serial_executor().submit(fn, *args)
        if key is not None:
            with self._lock:
                self._queued[key] = future
            future.add_done_callback(lambda done: self._dequeue(key, done))

    def _dequeue(self, key: Any, done: "concurrent.futures.Future[Any]") -> None:
        with self._lock:
            self._keyed_done += 1
            if self._queued.get(key) is done:
                del self._queued[key]

    def keyed_done(self) -> int:
        """How many keyed `submit`s have finished so far (read before a lookup, for `wait_queued`)."""
        with self._lock:
            return self._keyed_done

    async def wait_queued(self, key: Any, since: int | None = None) -> bool:
        """Wait (without holding the loop) for the queued `submit` of `key`, if there is one: a
        cache lookup that missed then looks again, so a call made after another one returned finds
        its answer, as when the store was made inline. Also True, without waiting, when a keyed
        submit finished after `since` (a `keyed_done()` read before the lookup): the store may have
        landed between the lookup and this check. False when there is nothing to look again for."""
        import asyncio

        with self._lock:
            future = self._queued.get(key)
            finished_since = since is not None and self._keyed_done != since
        if future is None:
            return finished_since
        await asyncio.wrap_future(future)
        return True

    def close(self, *, wait: bool = True) -> None:
        """Stop the threads once the steps and stores still queued have run (`wait`: block until then)."""
        self._closed = True
        with self._lock:
            pools, self._pool, self._serial = (self._pool, self._serial), None, None
        for pool in pools:
            if pool is not None:
                pool.shutdown(wait=wait)


def mark_unsent(step: Any) -> None:
    """`undo` of a plan step whose task was cancelled while it ran in a thread: the attempt it began
    (`CallRun.next_step`'s, or an opened hedge's) was never sent, so it is not billed when the call ends."""
    from llmroute._call.call import AttemptContext

    ctx = step if isinstance(step, AttemptContext) else getattr(step, "ctx", None)
    if isinstance(ctx, AttemptContext):
        ctx.unsent = True


def end_cancelled(run: Any) -> None:
    """`undo` of an admission whose task was cancelled while it ran in a thread: end the call
    (`CallRun.settle`), which gives back the budget reservation and limits admission took."""
    import asyncio

    end_after(run, asyncio.CancelledError())


def end_after(run: Any, error: BaseException) -> None:
    """End `run` after `error` left the shell (`CallRun.settle`, status from `exits.exit_status`)."""
    import time

    from llmroute._call.exits import exit_status

    run.settle(exit_status(error), error, time.monotonic())
