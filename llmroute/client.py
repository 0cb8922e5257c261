"""`Client` and `AsyncClient`: the OpenAI-shaped facade, and the thin I/O shells around `call.py`.

Both have the same surface (`client.chat.completions.create(...)`, streams that are context
managers and iterators, `close()`), and both drive the same sans-I/O `CallRun`/`StreamState`; the
only code written twice is the loop that moves bytes (blocking here, awaiting there).
"""

from __future__ import annotations

import os
import time
from typing import Any, AsyncIterator, Dict, Iterator, List, Mapping, Optional, Union

import httpx

from . import errors as E
from .call import AttemptContext, CallRun, StreamState, Wait, prepare_call
from .config import Config, load_config
from .engine import Engine
from .transport import AsyncTransport, SyncTransport, map_transport_error
from .types import ChatCompletion, ChatCompletionChunk

__all__ = ["Client", "AsyncClient", "Stream", "AsyncStream"]



def _as_config(config: Union[Config, Mapping[str, Any], str, os.PathLike, None]) -> Config:
    if isinstance(config, Config):
        return config
    if config is None:
        raise E.ConfigError("no config given: pass config=<dict or Config>, or use Client.from_config(path)")
    if isinstance(config, (str, os.PathLike)):
        return load_config(config)
    if isinstance(config, Mapping):
        return Config.from_dict(config)
    raise E.ConfigError(f"config must be a dict, a Config or a path, not {type(config).__name__}")


def _transport_error(exc: Exception, ctx: AttemptContext) -> E.ProviderError:
    return map_transport_error(
        exc, provider=ctx.deployment.provider.name, deployment=ctx.deployment.id, timeouts=ctx.timeouts
    )


_NETWORK_ERRORS = (httpx.HTTPError, OSError)


def _network_errors() -> tuple:
    """What the async transports raise. asyncio is imported here, not at `import llmroute`."""
    import asyncio
    import sys

    aiohttp = sys.modules.get("aiohttp")  # imported only when the aiohttp transport is in use
    if aiohttp is not None:
        return _NETWORK_ERRORS + (aiohttp.ClientError, asyncio.TimeoutError)
    return _NETWORK_ERRORS + (asyncio.TimeoutError,)


async def _asleep(seconds: float) -> None:
    import asyncio

    await asyncio.sleep(seconds)


# --------------------------------------------------------------------------------------------------
# sync


class Stream:
    """A streamed call: iterate for `ChatCompletionChunk`s; `.response` is the assembled result."""

    def __init__(self, run: CallRun, client: "Client") -> None:
        self._run = run
        self._client = client
        self._state: Optional[StreamState] = None
        self._response: Optional[httpx.Response] = None
        self._bytes: Optional[Iterator[bytes]] = None
        self._ready: List[ChatCompletionChunk] = []
        self._final: Optional[ChatCompletion] = None
        self._closed = False

    # Opening walks the attempts until one yields content (or ends cleanly): until then a failure
    # fails over exactly as a plain call would, and the caller has seen nothing.
    def _open(self) -> None:
        run = self._run
        while True:
            step = run.next_step(time.monotonic())
            if isinstance(step, Wait):
                time.sleep(step.seconds)
                continue
            ctx = step.attempt
            state = StreamState(run, ctx)
            try:
                self._response = self._client._send(ctx)
                self._bytes = self._response.iter_raw()
                for data in self._bytes:
                    self._ready.extend(state.feed(data, time.monotonic()))
                    if state.content_started:
                        break
                else:
                    self._ready.extend(state.eof(time.monotonic()))
                    self._final = state.finish(time.monotonic())
                    self._release()
                self._state = state
                return
            except E.ProviderError as error:
                self._release()
                run.failed(ctx, error, time.monotonic(), partial=state)
            except _NETWORK_ERRORS as exc:
                self._release()
                run.failed(ctx, _transport_error(exc, ctx), time.monotonic(), partial=state)

    def __iter__(self) -> Iterator[ChatCompletionChunk]:
        while self._ready:
            yield self._ready.pop(0)
        state = self._state
        if state is None or self._final is not None or self._bytes is None:
            return
        try:
            for data in self._bytes:
                for chunk in state.feed(data, time.monotonic()):
                    yield chunk
            for chunk in state.eof(time.monotonic()):
                yield chunk
        except E.ProviderError as error:
            raise self._interrupt(state, error) from error
        except _NETWORK_ERRORS as exc:
            error = _transport_error(exc, state.ctx)
            raise self._interrupt(state, error) from error
        self._final = state.finish(time.monotonic())
        self._release()

    def _interrupt(self, state: StreamState, error: E.ProviderError) -> E.StreamInterruptedError:
        self._release()
        self._run.failed(state.ctx, error, time.monotonic(), content_started=True, partial=state)
        return state.interrupted(error)

    @property
    def response(self) -> ChatCompletion:
        """The assembled ChatCompletion, with usage and route. Reads the rest of the stream if needed."""
        if self._final is None:
            for _ in self:
                pass
        if self._final is None:
            raise RuntimeError("the stream was closed before it finished")
        return self._final

    @property
    def route(self):
        return self._run.route

    def _release(self) -> None:
        if self._response is not None:
            self._response.close()
            self._response = None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        state = self._state
        if self._final is None and state is not None and not state.ended:
            # The caller stopped reading: the attempt was billed for what it produced.
            self._release()
            state.ctx.record.status = "cancelled"
            self._run.failed(state.ctx, E.StreamInterruptedError("closed by the caller before the end",
                             partial_text=state.assembler.all_text(), deployment=state.ctx.deployment.id,
                             provider=state.ctx.deployment.provider.name, retryable=False),
                             time.monotonic(), content_started=True, partial=state)
            state.ctx.record.status = "cancelled"
        self._release()

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _Completions:
    def __init__(self, client: "Client") -> None:
        self._client = client

    def create(self, **kwargs: Any) -> Union[ChatCompletion, Stream]:
        """An OpenAI Chat Completions call. Takes any OpenAI parameter, plus `feature`, `metadata`,
        `pool`, `timeout` (seconds for the whole call), `extra_body`, `extra_headers`."""
        return self._client._create(kwargs)


class _Chat:
    def __init__(self, client: "Client") -> None:
        self.completions = _Completions(client)


class Client:
    """The synchronous client. `Client.from_config("llmroute.toml")` or `Client(config={...})`."""

    def __init__(self, config: Union[Config, Mapping[str, Any], str, os.PathLike, None] = None) -> None:
        self.config = _as_config(config)
        self._engine = Engine(self.config)
        self._transport = SyncTransport()
        self.chat = _Chat(self)

    @classmethod
    def from_config(cls, path: Union[str, os.PathLike]) -> "Client":
        return cls(load_config(path))

    def _send(self, ctx: AttemptContext) -> httpx.Response:
        provider = ctx.deployment.provider
        response = self._transport.open(ctx.request, ctx.timeouts, provider=provider.name,
                                        max_connections=provider.max_connections)
        if response.status_code >= 300:
            try:
                content = response.read()
            finally:
                response.close()
            raise ctx.adapter.error_from_response(response.status_code, response.headers, content)
        return response

    def _create(self, kwargs: Dict[str, Any]) -> Union[ChatCompletion, Stream]:
        prepared = prepare_call(self.config, kwargs)
        run = CallRun(self._engine, prepared, time.monotonic())
        if prepared.stream:
            stream = Stream(run, self)
            stream._open()
            return stream
        while True:
            step = run.next_step(time.monotonic())
            if isinstance(step, Wait):
                time.sleep(step.seconds)
                continue
            ctx = step.attempt
            try:
                response = self._send(ctx)
                try:
                    content = response.read()
                finally:
                    response.close()
                completion, reported = ctx.adapter.parse_completion(response.headers, content)
                return run.succeeded(ctx, completion, reported, time.monotonic(), None)
            except E.ProviderError as error:
                run.failed(ctx, error, time.monotonic())
            except _NETWORK_ERRORS as exc:
                run.failed(ctx, _transport_error(exc, ctx), time.monotonic())

    def health(self) -> Dict[str, Any]:
        return self._engine.health(time.monotonic()) if hasattr(self._engine, "health") else {}

    def close(self) -> None:
        self._transport.close()
        self._engine.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client(config={self.config.source!r}, tiers={list(self.config.tiers)})"


# --------------------------------------------------------------------------------------------------
# async


class AsyncStream:
    """A streamed call for `AsyncClient`: `async with` / `async for`; `.response` after the end."""

    def __init__(self, run: CallRun, client: "AsyncClient") -> None:
        self._run = run
        self._client = client
        self._state: Optional[StreamState] = None
        self._response: Optional[httpx.Response] = None
        self._bytes: Optional[AsyncIterator[bytes]] = None
        self._ready: List[ChatCompletionChunk] = []
        self._final: Optional[ChatCompletion] = None
        self._closed = False

    async def _open(self) -> None:
        run = self._run
        errors = _network_errors()
        while True:
            step = run.next_step(time.monotonic())
            if isinstance(step, Wait):
                await _asleep(step.seconds)
                continue
            ctx = step.attempt
            state = StreamState(run, ctx)
            try:
                self._response = await self._client._send(ctx)
                self._bytes = self._response.aiter_raw()
                finished = True
                async for data in self._bytes:
                    self._ready.extend(state.feed(data, time.monotonic()))
                    if state.content_started:
                        finished = False
                        break
                if finished:
                    self._ready.extend(state.eof(time.monotonic()))
                    self._final = state.finish(time.monotonic())
                    await self._release()
                self._state = state
                return
            except E.ProviderError as error:
                await self._release()
                run.failed(ctx, error, time.monotonic(), partial=state)
            except errors as exc:
                await self._release()
                run.failed(ctx, _transport_error(exc, ctx), time.monotonic(), partial=state)

    def __aiter__(self) -> AsyncIterator[ChatCompletionChunk]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[ChatCompletionChunk]:
        while self._ready:
            yield self._ready.pop(0)
        state = self._state
        if state is None or self._final is not None or self._bytes is None:
            return
        errors = _network_errors()
        try:
            async for data in self._bytes:
                for chunk in state.feed(data, time.monotonic()):
                    yield chunk
            for chunk in state.eof(time.monotonic()):
                yield chunk
        except E.ProviderError as error:
            raise (await self._interrupt(state, error)) from error
        except errors as exc:
            error = _transport_error(exc, state.ctx)
            raise (await self._interrupt(state, error)) from error
        self._final = state.finish(time.monotonic())
        await self._release()

    async def _interrupt(self, state: StreamState, error: E.ProviderError) -> E.StreamInterruptedError:
        await self._release()
        self._run.failed(state.ctx, error, time.monotonic(), content_started=True, partial=state)
        return state.interrupted(error)

    @property
    def response(self) -> ChatCompletion:
        if self._final is None:
            raise RuntimeError("the stream has not finished: iterate it to the end (or await stream.aresponse())")
        return self._final

    async def aresponse(self) -> ChatCompletion:
        if self._final is None:
            async for _ in self:
                pass
        return self.response

    @property
    def route(self):
        return self._run.route

    async def _release(self) -> None:
        if self._response is not None:
            response, self._response = self._response, None
            await response.aclose()

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        state = self._state
        if self._final is None and state is not None and not state.ended:
            await self._release()
            self._run.failed(state.ctx, E.StreamInterruptedError("closed by the caller before the end",
                             partial_text=state.assembler.all_text(), deployment=state.ctx.deployment.id,
                             provider=state.ctx.deployment.provider.name, retryable=False),
                             time.monotonic(), content_started=True, partial=state)
            state.ctx.record.status = "cancelled"
        await self._release()

    close = aclose

    async def __aenter__(self) -> "AsyncStream":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


class _AsyncCompletions:
    def __init__(self, client: "AsyncClient") -> None:
        self._client = client

    async def create(self, **kwargs: Any) -> Union[ChatCompletion, AsyncStream]:
        """Same arguments as `Client.chat.completions.create`."""
        return await self._client._create(kwargs)


class _AsyncChat:
    def __init__(self, client: "AsyncClient") -> None:
        self.completions = _AsyncCompletions(client)


class AsyncClient:
    """The asyncio client, same surface as `Client`. `transport="aiohttp"` uses aiohttp underneath."""

    def __init__(
        self, config: Union[Config, Mapping[str, Any], str, os.PathLike, None] = None, *, transport: str = "httpx"
    ) -> None:
        self.config = _as_config(config)
        self._engine = Engine(self.config)
        self._transport = AsyncTransport(transport)
        self.chat = _AsyncChat(self)

    @classmethod
    def from_config(cls, path: Union[str, os.PathLike], *, transport: str = "httpx") -> "AsyncClient":
        return cls(load_config(path), transport=transport)

    async def _send(self, ctx: AttemptContext) -> httpx.Response:
        provider = ctx.deployment.provider
        response = await self._transport.open(ctx.request, ctx.timeouts, provider=provider.name,
                                              max_connections=provider.max_connections)
        if response.status_code >= 300:
            try:
                content = await response.aread()
            finally:
                await response.aclose()
            raise ctx.adapter.error_from_response(response.status_code, response.headers, content)
        return response

    async def _create(self, kwargs: Dict[str, Any]) -> Union[ChatCompletion, AsyncStream]:
        prepared = prepare_call(self.config, kwargs)
        run = CallRun(self._engine, prepared, time.monotonic())
        if prepared.stream:
            stream = AsyncStream(run, self)
            await stream._open()
            return stream
        errors = _network_errors()
        while True:
            step = run.next_step(time.monotonic())
            if isinstance(step, Wait):
                await _asleep(step.seconds)
                continue
            ctx = step.attempt
            try:
                response = await self._send(ctx)
                try:
                    content = await response.aread()
                finally:
                    await response.aclose()
                completion, reported = ctx.adapter.parse_completion(response.headers, content)
                return run.succeeded(ctx, completion, reported, time.monotonic(), None)
            except E.ProviderError as error:
                run.failed(ctx, error, time.monotonic())
            except errors as exc:
                run.failed(ctx, _transport_error(exc, ctx), time.monotonic())

    def health(self) -> Dict[str, Any]:
        return self._engine.health(time.monotonic()) if hasattr(self._engine, "health") else {}

    async def aclose(self) -> None:
        await self._transport.aclose()
        self._engine.close()

    close = aclose

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"AsyncClient(config={self.config.source!r}, tiers={list(self.config.tiers)})"
