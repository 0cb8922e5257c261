"""`Stream` and `AsyncStream`: a streamed call's chunks, as iterators and context managers, over one attempt's
bytes at a time (`_switch` moves to the attempt that finishes a cut answer); `.response` is the assembled result.

They drive the sans-I/O `StreamState` and end their call through `CallRun.settle` exactly once, whatever ends the
stream (its end, an error, `close()`, a dropped or garbage-collected stream).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Awaitable, Callable, Iterator, List, Tuple

from llmroute import errors as E
from llmroute._call.attempt_errors import network_errors, sync_network_errors, transport_error
from llmroute._call.call import AttemptContext, CallRun, StreamState
from llmroute._call.exits import ExitStatus, exit_status
from llmroute._call.server_probe import CUT_WAIT_S
from llmroute._runtime.twins import asleep
from llmroute.types import ChatCompletion, ChatCompletionChunk, Route

__all__ = ["Stream", "AsyncStream"]


def _running_loop() -> Any:
    import asyncio

    return asyncio.get_running_loop()


def _current_loop() -> Any:
    """The running event loop, or None outside one (`aiter(stream)` from synchronous code)."""
    import asyncio

    return asyncio._get_running_loop()


def _aclose_later(response: Any, loop: Any) -> None:
    """Close an async response from synchronous code (a finaliser): scheduled on its own loop."""
    if loop is None or loop.is_closed():
        return
    try:
        loop.call_soon_threadsafe(lambda: loop.create_task(response.aclose()))
    except RuntimeError:  # the loop closed meanwhile
        pass


@dataclass
class _Opened:
    """One attempt, opened: a plain call's parsed body, or a stream read up to its first content."""

    ctx: AttemptContext
    state: StreamState | None  # streams only
    response: Any = None  # a transport.SyncResponse, or transport.AiohttpResponse
    chunks: Any = None  # the stream's byte iterator, left where content started
    ready: List[ChatCompletionChunk] = field(default_factory=list)
    rest: Iterator[ChatCompletionChunk] = iter(())  # the opening read's chunks after `ready`, not decoded yet
    parsed: Tuple[Any, ...] | None = None  # (ChatCompletion, usage_reported) for a plain call
    at_end: bool = False  # the stream ended while opening
    error: E.ProviderError | None = None
    cancelled: bool = False
    run: Any = None  # the CallRun: a plain body is parsed within its answer caps


def _now() -> float:
    return time.monotonic()


_Reopen = Callable[[CallRun], _Opened]  # the client's attempt loop: finishes a cut answer elsewhere
_AsyncReopen = Callable[[CallRun], Awaitable[_Opened]]


class _Ends:
    """What `Stream` and `AsyncStream` share that does no I/O: the attempt being read (`_switch`: the
    first, or the one that finishes a cut answer), and the stream's end, for `[routing.shadow]`:
    `_when_ended(callback)` calls it with the assembled response once the stream has ended (at once if
    it already has); a stream closed early never ends. `abandon` (and the finaliser) end a stream left
    open through the subclass's `_end`."""

    _run: CallRun
    _final: ChatCompletion | None = None
    _on_end: Callable[[ChatCompletion], None] | None = None

    def _end(self, status: ExitStatus, error: BaseException | None) -> None:
        """The stream ended other than by its end, an error or close(): release and record it once."""
        raise NotImplementedError

    def abandon(self) -> None:
        """Left open when its client closed or the interpreter exits: ended as `abandoned` (once)."""
        if not getattr(self, "_closed", True):
            self._end("abandoned", None)

    def __del__(self) -> None:
        try:
            self.abandon()
        except Exception:  # noqa: BLE001 - nothing may escape a finaliser
            pass

    def _switch(self, opened: _Opened) -> None:
        self._bytes: Any = opened.chunks  # the attempt's byte iterator (sync or async)
        if opened.state is None:  # a plain call's answer restarted on a deployment read plain
            completion, reported = opened.parsed  # type: ignore[misc]  # set (not None) for a plain call: state is None
            self._record_final(self._run.succeeded(opened.ctx, completion, reported, _now(), None))
            return
        self._state: StreamState = opened.state
        self._response = opened.response
        self._ready: List[ChatCompletionChunk] = opened.ready
        self._rest: Iterator[ChatCompletionChunk] = opened.rest
        if opened.at_end:
            self._record_final(self._state.finish(_now()))

    @property
    def route(self) -> Route:
        return self._run.route

    def _final_error(self, state: StreamState, error: E.ProviderError) -> E.ProviderError:
        """Why the answer ended after content: a stream's caller saw part of it (StreamInterruptedError,
        caused by `error`); a plain call cut by a read cap gets that typed error itself."""
        if not self._run.prepared.stream and isinstance(error, E.ResponseTooLargeError):
            error.attempts = list(self._run.route.attempts)
            return error
        interrupted = state.interrupted(error)
        interrupted.__cause__ = error
        return interrupted

    def _record_final(self, final: ChatCompletion) -> None:
        self._final = final
        if self._on_end is not None:
            self._on_end(final)

    def _when_ended(self, callback: Callable[[ChatCompletion], None]) -> None:
        if self._final is not None:
            callback(self._final)
        else:
            self._on_end = callback


class _SyncIO(_Ends):
    """What `Stream` does its own way (written by hand; the rest of `Stream` is generated from `AsyncStream`)."""

    _iterator: Iterator[ChatCompletionChunk] | None
    _state: StreamState
    _chunks: Callable[[], Iterator[ChatCompletionChunk]]  # Stream's methods (generated)
    _release: Callable[[], None]

    def _bind(self) -> None:
        """Nothing ties a sync stream to a thread."""

    def __iter__(self) -> Iterator[ChatCompletionChunk]:
        """The stream's one iterator (a `for` loop resumes it without a `__next__` call per chunk)."""
        if self._iterator is None:
            self._iterator = self._chunks()
        return self._iterator

    def __next__(self) -> ChatCompletionChunk:
        """The next chunk (`next(stream)`, as openai-python's `Stream`): one iterator for the stream's
        life, so a loop left with `break` and a later `for` or `next()` go on where it stopped."""
        if self._iterator is None:
            self._iterator = self._chunks()
        return next(self._iterator)

    def _close_iterator(self) -> None:
        """The stream closed: its iterator, if left part-way (a `break`), is finished now, so that it
        and the stream no longer hold each other (freed at once, not by the garbage collector)."""
        iterator, self._iterator = self._iterator, None
        if iterator is not None and not getattr(iterator, "gi_running", True):
            iterator.close()  # type: ignore[attr-defined]  # a generator (`_chunks`)

    def _wait_identified(self, state: StreamState) -> None:
        """Whether a backup can continue a cut answer may be about to be known: wait for it (bounded)."""
        waiting = self._run.identifying(state.ctx)
        if waiting:
            self._run.engine.identities.wait(waiting)

    def _end(self, status: ExitStatus, error: BaseException | None) -> None:
        """The stream ended other than by its end, an error or close(): release and record it once."""
        self._closed = True
        self._release()
        self._state.ended = True
        self._run.settle(status, error, _now())


class _AsyncIO(_Ends):
    """What `AsyncStream` does its own way: it belongs to the event loop that opened it."""

    _aiterator: AsyncIterator[ChatCompletionChunk] | None
    _state: StreamState
    _response: Any
    _iterate: Callable[[], AsyncIterator[ChatCompletionChunk]]  # AsyncStream's method

    def _bind(self) -> None:
        self._loop = _running_loop()

    def __aiter__(self) -> AsyncIterator[ChatCompletionChunk]:
        """The stream's one iterator, checked to be on the stream's event loop once per `async for`
        (the loop then resumes it without an `__anext__` call and a loop check per chunk)."""
        return self._checked()

    async def __anext__(self) -> ChatCompletionChunk:
        """The next chunk (`await anext(stream)`, as openai-python's `AsyncStream`): one iterator for
        the stream's life."""
        return await self._checked().__anext__()

    def _checked(self) -> AsyncIterator[ChatCompletionChunk]:
        loop = _current_loop()
        if loop is not self._loop and loop is not None:
            raise E.EventLoopError("this stream was opened on another event loop (its connection lives there): "
                                   "read it on the loop that created it")
        if self._aiterator is None:
            self._aiterator = self._iterate()
        return self._aiterator

    async def _close_iterator(self) -> None:
        """The stream closed: its iterator, if left part-way (a `break`), is finished now, so that it
        and the stream no longer hold each other (freed at once, not by the garbage collector)."""
        iterator, self._aiterator = self._aiterator, None
        if iterator is not None and not getattr(iterator, "ag_running", True):
            await iterator.aclose()  # type: ignore[attr-defined]  # an async generator (`_iterate`)

    async def _wait_identified(self, state: StreamState) -> None:
        """Whether a backup can continue a cut answer may be about to be known: wait for it (bounded)."""
        until = _now() + CUT_WAIT_S
        while self._run.identifying(state.ctx) and _now() < until:
            await asleep(0.02)

    def _end(self, status: ExitStatus, error: BaseException | None) -> None:
        """Ended other than by its end, an error or aclose(): record it once; the response is closed
        on its event loop (it cannot be awaited from here)."""
        self._closed = True
        self._state.ended = True
        self._run.settle(status, error, _now())
        response, self._response = self._response, None
        if response is not None:
            _aclose_later(response, self._loop)


def _finished(final: ChatCompletion | None, closed: bool) -> ChatCompletion:
    """A stream's assembled response, or the error that says why there is none yet (sync and async alike)."""
    if final is not None:
        return final
    if closed:
        raise E.StreamNotFinishedError("the stream was closed before it finished: it has no response")
    raise E.StreamNotFinishedError(
        "stream.response is ready once the stream has ended: iterate it to the end first, or call "
        "stream.get_final_completion() (await it on AsyncStream) to read the rest")


# --- async source: AsyncStream ---
class AsyncStream(_AsyncIO):
    """A streamed call: `async with` / `async for` to get `ChatCompletionChunk`s; `.response` is the
    assembled result once the stream has ended."""

    def __init__(self, run: CallRun, opened: _Opened, reopen: _AsyncReopen) -> None:
        self._run = run
        self._reopen = reopen  # the client's attempt loop: finishes a cut answer elsewhere
        self._final: ChatCompletion | None = None
        self._closed = False
        self._aiterator: AsyncIterator[ChatCompletionChunk] | None = None
        self._dropping = False  # get_final_completion is reading: the chunks go nowhere
        self._bind()
        self._switch(opened)

    async def _iterate(self) -> AsyncIterator[ChatCompletionChunk]:
        errors = network_errors()  # bound now: finalised at interpreter exit, it cannot import
        while True:
            while self._ready:
                yield self._ready.pop(0)
            state = self._state
            if self._final is not None or self._bytes is None or state.ended:
                return
            try:
                for chunk in self._rest:
                    if self._dropping:  # get_final_completion: the opening read's rest, taken whole
                        state.take_rest(self._rest)
                        break
                    yield chunk
                async for data in self._bytes:
                    if self._dropping:  # get_final_completion: nobody takes these chunks
                        state.take(data, _now())
                        continue
                    for chunk in state.feed_each(data, _now()):
                        yield chunk
                for chunk in state.eof(_now()):
                    yield chunk
            except E.ProviderError as error:
                await self._recover(error)
                continue
            except errors as exc:
                await self._recover(transport_error(exc, state.ctx, state))
                continue
            except GeneratorExit:  # this iterator was dropped; the stream stays open for another
                raise
            except BaseException as exc:  # cancelled, KeyboardInterrupt, or a bug of ours: end the call here
                self._end(exit_status(exc), exc)
                raise
            self._record_final(state.finish(_now()))
            await self._release()
            return

    async def _recover(self, error: E.ProviderError) -> None:
        """The answer broke after content started: finish it on another deployment, or raise."""
        await self._release()
        state = self._state
        state.ended = True  # this attempt is over: closing the stream must not end it twice
        await self._wait_identified(state)
        self._run.failed(state.ctx, error, _now(), content_started=True, partial=state)
        if self._closed:  # ended while being read (its client closed on another thread): not finished elsewhere
            raise E.ClientClosedError("the client was closed while this answer was being read") from error
        if self._run.plan.finished:
            raise self._final_error(state, error)
        self._switch(await self._reopen(self._run))  # raises the plan's error when nothing can finish it

    @property
    def response(self) -> ChatCompletion:
        """The assembled ChatCompletion, with usage, route and cost, once the stream has ended.
        Before that it raises `StreamNotFinishedError`."""
        return _finished(self._final, self._closed)

    async def get_final_completion(self) -> ChatCompletion:
        """Read the rest of the stream (the chunks are dropped) and return `.response`."""
        if self._final is None and not self._closed:
            self._dropping = True
            try:
                async for _ in self:
                    pass
            finally:
                self._dropping = False
        return self.response

    aresponse = get_final_completion  # async only

    async def _release(self) -> None:
        if self._response is not None:
            response, self._response = self._response, None
            await response.aclose()

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._release()
        if self._final is None and not self._state.ended:
            self._state.ended = True
            final = self._run.caller_closed(self._state, _now())
            if final is not None:  # closed after the platform had finished the answer: it is the response
                self._record_final(final)
            else:
                self._state.ctx.partial = None  # the attempt has ended: see StreamState.finish
        self._run.settle("cancelled", None, _now())
        await self._close_iterator()

    close = aclose  # async only

    async def __aenter__(self) -> "AsyncStream":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()
# --- end async source: AsyncStream ---


# --- generated from AsyncStream by scripts/gen_sync.py; do not edit ---
class Stream(_SyncIO):
    """A streamed call: `with` / `for` to get `ChatCompletionChunk`s; `.response` is the
    assembled result once the stream has ended."""

    def __init__(self, run: CallRun, opened: _Opened, reopen: _Reopen) -> None:
        self._run = run
        self._reopen = reopen  # the client's attempt loop: finishes a cut answer elsewhere
        self._final: ChatCompletion | None = None
        self._closed = False
        self._iterator: Iterator[ChatCompletionChunk] | None = None
        self._dropping = False  # get_final_completion is reading: the chunks go nowhere
        self._bind()
        self._switch(opened)

    def _chunks(self) -> Iterator[ChatCompletionChunk]:
        errors = sync_network_errors()  # bound now: finalised at interpreter exit, it cannot import
        while True:
            while self._ready:
                yield self._ready.pop(0)
            state = self._state
            if self._final is not None or self._bytes is None or state.ended:
                return
            try:
                for chunk in self._rest:
                    if self._dropping:  # get_final_completion: the opening read's rest, taken whole
                        state.take_rest(self._rest)
                        break
                    yield chunk
                for data in self._bytes:
                    if self._dropping:  # get_final_completion: nobody takes these chunks
                        state.take(data, _now())
                        continue
                    for chunk in state.feed_each(data, _now()):
                        yield chunk
                for chunk in state.eof(_now()):
                    yield chunk
            except E.ProviderError as error:
                self._recover(error)
                continue
            except errors as exc:
                self._recover(transport_error(exc, state.ctx, state))
                continue
            except GeneratorExit:  # this iterator was dropped; the stream stays open for another
                raise
            except BaseException as exc:  # cancelled, KeyboardInterrupt, or a bug of ours: end the call here
                self._end(exit_status(exc), exc)
                raise
            self._record_final(state.finish(_now()))
            self._release()
            return

    def _recover(self, error: E.ProviderError) -> None:
        """The answer broke after content started: finish it on another deployment, or raise."""
        self._release()
        state = self._state
        state.ended = True  # this attempt is over: closing the stream must not end it twice
        self._wait_identified(state)
        self._run.failed(state.ctx, error, _now(), content_started=True, partial=state)
        if self._closed:  # ended while being read (its client closed on another thread): not finished elsewhere
            raise E.ClientClosedError("the client was closed while this answer was being read") from error
        if self._run.plan.finished:
            raise self._final_error(state, error)
        self._switch(self._reopen(self._run))  # raises the plan's error when nothing can finish it

    @property
    def response(self) -> ChatCompletion:
        """The assembled ChatCompletion, with usage, route and cost, once the stream has ended.
        Before that it raises `StreamNotFinishedError`."""
        return _finished(self._final, self._closed)

    def get_final_completion(self) -> ChatCompletion:
        """Read the rest of the stream (the chunks are dropped) and return `.response`."""
        if self._final is None and not self._closed:
            self._dropping = True
            try:
                for _ in self:
                    pass
            finally:
                self._dropping = False
        return self.response


    def _release(self) -> None:
        if self._response is not None:
            response, self._response = self._response, None
            response.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._release()
        if self._final is None and not self._state.ended:
            self._state.ended = True
            final = self._run.caller_closed(self._state, _now())
            if final is not None:  # closed after the platform had finished the answer: it is the response
                self._record_final(final)
            else:
                self._state.ctx.partial = None  # the attempt has ended: see StreamState.finish
        self._run.settle("cancelled", None, _now())
        self._close_iterator()


    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
# --- end generated: AsyncStream ---
