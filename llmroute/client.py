"""`Client` and `AsyncClient`: the OpenAI-shaped facade, and the thin I/O shells around `call.py`.

Both have the same surface (`client.chat.completions.create(...)`, streams that are context
managers and iterators, `close()`), and both drive the same sans-I/O `CallRun`/`StreamState`; the
only code written twice is the loop that moves bytes (blocking here, awaiting there).
"""

from __future__ import annotations

import copy
import functools
import os
import time
import threading
from typing import (TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Tuple, TypeVar, Union)

from llmroute import errors as E
from llmroute._http.bounded import DEFAULT_READ_LIMITS, ReadLimits

from llmroute._call.cache_step import CacheCall, alookup, lookup, open_cache
from llmroute._runtime.twins import SyncOffload, aclose_shielded, asleep, close_shielded, sleep
from llmroute.cache.cache_policy import pop_cache_args
from llmroute._call.call import AttemptContext, CallRun, StreamState, Wait, prepare_call
from llmroute.openai_surface.resources import AsyncChatCompletions, ChatCompletions
from llmroute._call.server_probe import ServerIdentities
from llmroute.streams import AsyncStream, Stream, _now, _Opened, _running_loop
from llmroute.config import Config, load_config
from llmroute.openai_surface.construction import CallOptions, build_config, call_options, per_call_timeout
from llmroute.openai_surface.not_given import drop_not_given
from llmroute._call.engine import Engine
from llmroute._call.attempt_errors import network_errors, sync_network_errors, transport_error
from llmroute._call.exits import exit_status
from llmroute._runtime.forksafe import renew_at_fork
from llmroute._runtime.lifecycle import ClientLife, OpenStreams, warn_unclosed
from llmroute._call.offload import Offload, cache_blocks, end_cancelled, engine_blocks, mark_unsent
from llmroute._http import exchange as X
from llmroute._http.transport import AsyncTransport, SyncTransport
from llmroute.types import ChatCompletion

if TYPE_CHECKING:
    from llmroute.embeddings import AsyncEmbeddings, Embeddings
    from llmroute.models import AsyncModels, Models

__all__ = ["Client", "AsyncClient", "Stream", "AsyncStream"]


_C = TypeVar("_C", bound="_ClientSurface")


def _with_options(client: _C, options: "CallOptions", views: Callable[[Any], None]) -> _C:
    """A view of `client` with other call options: the same connections, breakers, cache and ledger."""
    view = copy.copy(client)
    view._options = client._options.merged(options)
    view._parent = client._parent or client
    views(view)
    return view


def _exchange(ctx: AttemptContext, limits: ReadLimits) -> X.Exchange:
    """The attempt's request on the one send path (`_http/exchange.py`), within its timeouts, deadline and caps."""
    provider = ctx.deployment.provider
    return X.Exchange(ctx.request, ctx.timeouts, limits, provider=provider.name, deployment=ctx.deployment.id,
                      max_connections=provider.max_connections, deadline=ctx.deadline)


def _answered(ctx: AttemptContext, response: Any) -> bool:
    """Keep the status and headers of an attempt the platform answered (`with_raw_response`); True
    when the body is one JSON document (a server that ignored `stream` sends one). An HTML page where
    an answer was due (a `base_url` that points at a website, a proxy's page) raises the adapter's
    unreadable-response error naming it, before its body is read."""
    ctx.record.http_status = response.status_code
    headers = ctx.record.response_headers = response.headers
    content_type: str = headers.get("content-type", "")
    if content_type.startswith("text/html"):
        raise ctx.adapter.html_answer(content_type)
    return content_type.startswith("application/json")


def _start_gauges(config: Config, balancer: Any) -> Any:
    """The queue-gauge scraper (docs/failover.md, "Load-aware balancing"), when a deployment has gauges to read."""
    from llmroute._call.gauge_scraper import start_gauge_scraper  # loaded with the first client

    return start_gauge_scraper(config, balancer)


def _opened(run: CallRun, ctx: AttemptContext) -> _Opened:
    return _Opened(ctx, StreamState(run, ctx) if ctx.streamed else None, run=run)


def _hedge_due(run: CallRun, hedge: Any) -> _Opened | None:
    """The hedge delay passed with no answer: the second attempt to start, if budget and plan allow."""
    if not hedge.check(_now(), first_token_seen=False):
        return None
    ctx = run.hedge(_now())
    return _opened(run, ctx) if ctx is not None else None


# --------------------------------------------------------------------------------------------------
# sync


def _shadow_runner(client: Union["Client", "AsyncClient"], *, is_async: bool = False) -> Any:
    """The `[routing.shadow]` runner (llmroute/routing/shadow.py) when its rate is above 0, else None."""
    routing = client.config.sections.routing
    if not client.config.raw.routing or routing.shadow.rate <= 0:
        return None
    # loaded on first use of this feature: `import llmroute` stays light
    from llmroute.routing.shadow import AsyncShadowRunner, ShadowRunner

    runner = AsyncShadowRunner if is_async else ShadowRunner
    return runner(client, routing.shadow, small_tier=routing.small_tier, large_tier=routing.large_tier)


def _record_feedback(engine: Engine, target: Any, score: Union[float, bool], *, label: str | None = None,
                     comment: str | None = None, messages: List[Mapping[str, Any]] | None = None,
                     source: str = "user") -> None:
    """`client.feedback(request_id_or_response, score, label=, comment=, messages=)`: the call's
    request id (or its response/stream), a score (True/False for thumbs), an optional label and
    comment, and the conversation's `messages` when `llmroute router fit --ledger` should learn
    from it; `source` says who judged ("user", or "shadow" for a shadow comparison's judge). Stored
    beside the ledger (llmroute/accounting/feedback.py); bad arguments raise
    InvalidRequestError, a ledger that cannot hold feedback ConfigError."""
    # loaded on first use of this feature: `import llmroute` stays light
    from llmroute.accounting.feedback import make_feedback, write_feedback

    record = make_feedback(target, score, now=time.time(), label=label, comment=comment, messages=messages,
                           source=source)
    write_feedback(engine.ledger, record)


# --- async source: views ---
class _AsyncChat:
    def __init__(self, client: "AsyncClient") -> None:
        self.completions = AsyncChatCompletions(client)


def _async_views(view: Any) -> None:
    """A client's (or a `with_options` view's) `chat`, `embeddings` and `models` (docs/embeddings.md)."""
    from llmroute.embeddings import AsyncEmbeddings  # loaded with the first client: `import llmroute` stays light
    from llmroute.models import AsyncModels  # loaded with the first client: `import llmroute` stays light

    view.chat, view.embeddings, view.models = _AsyncChat(view), AsyncEmbeddings(view), AsyncModels(view)
# --- end async source: views ---


# --- generated from views by scripts/gen_sync.py; do not edit ---
class _Chat:
    def __init__(self, client: "Client") -> None:
        self.completions = ChatCompletions(client)


def _sync_views(view: Any) -> None:
    """A client's (or a `with_options` view's) `chat`, `embeddings` and `models` (docs/embeddings.md)."""
    from llmroute.embeddings import Embeddings  # loaded with the first client: `import llmroute` stays light
    from llmroute.models import Models  # loaded with the first client: `import llmroute` stays light

    view.chat, view.embeddings, view.models = _Chat(view), Embeddings(view), Models(view)
# --- end generated: views ---


class _ClientSurface:
    """What `Client` and `AsyncClient` share beyond the call itself: health, feedback, repr."""

    config: Config
    _engine: Engine

    def health(self) -> Dict[str, Any]:
        """Breaker state of every deployment: `{"provider:model": snapshot}` (see `llmroute health`)."""
        return self._engine.health(_now())

    def feedback(self, request_id_or_response: Any, score: Union[float, bool], *, label: str | None = None,
                 comment: str | None = None, messages: List[Mapping[str, Any]] | None = None,
                 source: str = "user") -> None:
        """Attach a quality score in [0, 1] to a call in the ledger (a short synchronous write); see
        `_record_feedback`."""
        _record_feedback(self._engine, request_id_or_response, score, label=label, comment=comment, messages=messages,
                         source=source)

    def __del__(self) -> None:
        life = getattr(self, "_life", None)
        if life is None or life.closed or getattr(self, "_parent", None) is not None:  # a view closes nothing
            return
        try:
            warn_unclosed(self)
            self._finalise(life)
        except Exception:  # noqa: BLE001 - nothing may escape a finaliser (nor at interpreter exit)
            pass

    def _finalise(self, life: ClientLife) -> None:
        """Close a client the garbage collector found open (`close()`, without awaiting)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        config = getattr(self, "config", None)  # None while __init__ has not set it (a bad config)
        if config is None:
            return f"{type(self).__name__}(not configured)"
        return f"{type(self).__name__}(config={config.source!r}, tiers={list(config.tiers)})"

    _options: CallOptions
    _parent: Any = None  # the client a `with_options()` view was made from

    @property
    def base_url(self) -> Any:
        """The base URL of the client's one provider (an `httpx.URL`, as openai-python's), or None when
        several are configured."""
        providers = list(self.config.providers.values())
        if len(providers) != 1:
            return None
        from llmroute._http.httpx_values import url_value  # httpx's URL type: loaded when asked for

        return url_value(providers[0].base_url)

    @property
    def timeout(self) -> float | None:
        """The client's timeout: a whole call's by default (`with_options`, or a config client's), or
        each attempt's on a `Client(base_url=...)` built with one (None: the config's deadlines)."""
        return self._options.timeout_s if self._options.timeout_s is not None else self._options.attempt_timeout_s

    @property
    def max_retries(self) -> int | None:
        """The client's retries per deployment (None: the config's `[resilience] max_retries`)."""
        return self._options.max_retries

    def _call_args(self, kwargs: Dict[str, Any]) -> Tuple[Dict[str, Any], int | None]:
        """A call's arguments with the client's options filled in, and its max_retries. An argument given
        as openai-python's `NOT_GIVEN` or `omit` is left out, as openai-python leaves it out."""
        kwargs = drop_not_given(kwargs)  # a copy
        max_retries = self._options.apply(kwargs)
        if "timeout" in kwargs:
            kwargs["timeout"] = per_call_timeout(kwargs["timeout"])
        return kwargs, max_retries

    def _setup(self, config: Union[Config, Mapping[str, Any], str, os.PathLike[str], None], *, api_key: str | None,
               base_url: Any, timeout: Any, max_retries: int | None, default_headers: Mapping[str, str] | None,
               organization: str | None, project: str | None, prices: Mapping[str, Mapping[str, Any]] | None,
               ledger: Any, read_limits: ReadLimits | None) -> None:
        """What `Client(...)` and `AsyncClient(...)` build alike: options, config, engine, gauges, cache."""
        self._options = call_options(timeout=timeout, max_retries=max_retries, default_headers=default_headers)
        self.config = build_config(config, api_key=api_key, base_url=base_url, timeout=timeout,
                                   max_retries=max_retries, prices=prices, organization=organization,
                                   project=project)
        self._options = self._options.for_config(self.config)
        self.read_limits = read_limits or DEFAULT_READ_LIMITS
        self._engine = Engine(self.config, ledger=ledger)
        self._engine.identities = ServerIdentities()  # docs/failover.md, "Knowing what a server can do"
        self._engine.gauges = _start_gauges(self.config, self._engine.balancer)
        self.cache = open_cache(self.config)


class Client(_ClientSurface):
    """The synchronous client. `Client.from_config("llmroute.toml")` or `Client(config={...})`.

    Its calls are generated from `AsyncClient`'s (scripts/gen_sync.py); what it does its own way is written
    here: hedge races on threads, every step on the caller's thread, blocking close."""

    chat: _Chat
    embeddings: Embeddings
    models: Models

    def __init__(self, config: Union[Config, Mapping[str, Any], str, os.PathLike[str], None] = None, *,
                 api_key: str | None = None, base_url: Any = None, timeout: Any = None,
                 max_retries: int | None = None, default_headers: Mapping[str, str] | None = None,
                 organization: str | None = None, project: str | None = None,
                 prices: Mapping[str, Mapping[str, Any]] | None = None,
                 ledger: Any = None, read_limits: ReadLimits | None = None) -> None:
        """`config`: a Config, a dict or a TOML path; with none, `Client()` reads `$LLMROUTE_CONFIG` or
        `./llmroute.toml`, and `Client(base_url=..., api_key=...)` calls one OpenAI-compatible server by
        its own model ids (`prices`: its prices per model id; without them its cost is None, with a
        warning). `timeout` (seconds or an `httpx.Timeout`), `max_retries` and `default_headers` are
        every call's defaults, as in openai-python (llmroute/openai_surface/construction.py).
        `ledger`: a callable taking each `LedgerRecord`, or a sink object, instead of `[ledger]`'s.
        `read_limits`: caps on what one response may make the client read (`bounded.ReadLimits`)."""
        self._setup(config, api_key=api_key, base_url=base_url, timeout=timeout, max_retries=max_retries,
                    default_headers=default_headers, organization=organization, project=project, prices=prices,
                    ledger=ledger, read_limits=read_limits)
        self._transport = SyncTransport()
        self._offload = SyncOffload()  # the steps run on the caller's thread
        self._hedge_pool: Any = None
        self._pool_lock = threading.Lock()
        renew_at_fork(self, "_pool_lock")  # free in a forked child before its first call, too
        self._life = ClientLife("Client")
        self._streams = OpenStreams()  # ended as abandoned by close()
        _sync_views(self)
        self._shadow = _shadow_runner(self)

    @classmethod
    def from_config(cls, path: Union[str, os.PathLike[str]], *, ledger: Any = None) -> "Client":
        return cls(load_config(path), ledger=ledger)

    def _renew_if_forked(self) -> None:
        if self._life.check():  # first call in a forked child: its own connections and threads
            self._transport, self._hedge_pool, self._pool_lock = SyncTransport(), None, threading.Lock()

    def _lookup(self, prepared: Any, cache_args: Any) -> CacheCall | None:
        return lookup(self.cache, self._engine, prepared, cache_args, self._transport)

    def _start(self, op: _Opened) -> Any:
        """Open a racing attempt in a hedge thread: its future."""
        with self._pool_lock:
            if self._hedge_pool is None:
                from concurrent.futures import ThreadPoolExecutor  # loaded by the first hedge race

                # A cancelled loser keeps its thread until its server answers or its own timeout
                # fires (a sync request cannot be interrupted while it waits for headers), so the
                # pool is sized like the connection pools: one thread per connection the providers
                # allow. A smaller pool queued later races behind losers. Threads start on demand.
                connections = sum(p.max_connections for p in self.config.providers.values())
                self._hedge_pool = ThreadPoolExecutor(max_workers=max(16, connections),
                                                      thread_name_prefix="llmroute-hedge")
        return self._hedge_pool.submit(self._open, op)

    def _first_done(self, running: Dict[Any, _Opened], timeout: float | None) -> Any:
        from concurrent.futures import FIRST_COMPLETED, wait  # loaded with the first hedge race

        done, _ = wait(running, timeout=timeout, return_when=FIRST_COMPLETED)
        return done

    def _stop(self, handle: Any, op: _Opened) -> None:
        """A racing attempt that lost or was given up: its thread stops reading (a wait for headers cannot
        be interrupted; the thread ends when its server answers or its own timeout fires)."""
        op.cancelled = True
        if op.response is not None:
            op.response.close()

    _stopped = _stop

    def close(self) -> None:
        if self._shadow is not None:
            self._shadow.close()
        self._life.closed = True
        self._streams.abandon_all()  # their rows, slots and permits, before the ledger closes
        if getattr(self, "_batches", None) is not None:
            self._batches.close()
        self._transport.close()
        if self._hedge_pool is not None:
            self._hedge_pool.shutdown(wait=False)
        self._engine.close()
        self.cache.close()

    def _finalise(self, life: ClientLife) -> None:
        self.close()

    # --- generated from AsyncClient by scripts/gen_sync.py; do not edit ---
    def with_options(self, *, timeout: Any = None, max_retries: int | None = None,
                     default_headers: Mapping[str, str] | None = None) -> "Client":
        """This client with other call defaults (openai-python's `with_options`): the same connections,
        breakers, cache and ledger; closing either closes both."""
        return _with_options(self, call_options(timeout=timeout, max_retries=max_retries,
                                                default_headers=default_headers), _sync_views)

    copy = with_options

    def _send(self, ctx: AttemptContext) -> tuple[Any, X.Exchange]:
        """Send the attempt's request (a non-2xx answer raises the adapter's error); the response, body unread."""
        ex = _exchange(ctx, self.read_limits)
        try:
            return X.send(self._transport, ex, ctx.adapter.error_from_response), ex
        finally:
            if not ex.sent:
                ctx.not_sent()
            ctx.connected(ex.connect_s)

    def _open(self, op: _Opened) -> _Opened:
        """Send one attempt and read it up to its first content (streams) or whole (plain calls)."""
        ctx, state = op.ctx, op.state
        try:
            try:
                op.response, ex = self._send(ctx)
            except E.InvalidRequestError:  # a request the transport cannot build: the caller's, unsent
                raise
            except E.ProviderError as error:
                if not ctx.correct_request(error):
                    raise
                op.response, ex = self._send(ctx)
            whole_json = _answered(ctx, op.response)
            if op.cancelled:  # a hedge race was decided while this one was connecting (Client's threads)
                op.response.close()
                return op
            if state is None or (whole_json and not op.run.prepared.stream):  # a plain answer, read as one
                op.state = None
                content = X.read(op.response, ex)
                op.parsed = op.run.parse_answer(ctx, op.response.headers, content, self.read_limits)
                return op
            state.bound(self.read_limits)
            if whole_json:  # a stream answered with one JSON body: read as its stream at its end
                state.answered_whole()
            op.chunks = X.chunks(op.response, ex)
            for data in op.chunks:
                op.rest = state.feed_each(data, _now())  # taken up to the first content; the stream takes the rest
                for chunk in op.rest:
                    op.ready.append(chunk)
                    if state.content_started:
                        return op
            op.ready.extend(state.eof(_now()))
            op.at_end = True
            op.response.close()
        except E.InvalidRequestError:
            raise
        except E.ProviderError as error:
            op.error = error
        except sync_network_errors() as exc:
            op.error = transport_error(exc, ctx, state)
        except BaseException:  # a cancelled task (async), KeyboardInterrupt, a bug of ours
            if op.response is not None:
                close_shielded(op.response)
            raise
        if op.error is not None and op.response is not None:
            op.response.close()
        return op

    def _attempts(self, run: CallRun) -> _Opened:
        """Walk the plan until an attempt opens; failures go back to the plan, which raises when done.
        Whatever else ends the walk (a cancelled task (async), KeyboardInterrupt, a bug) abandons the call's attempts."""
        try:
            return self._walk(run)
        except E.LLMRouteError:
            raise
        except BaseException as exc:
            run.abandon(_now(), exc)
            raise

    def _walk(self, run: CallRun) -> _Opened:
        while True:
            if self._offload.inline:  # no thread hop to make: no coroutine to wrap the step in either
                step = run.next_step(_now())
            else:
                step = self._offload.run(run.next_step, _now(), undo=mark_unsent)
            if isinstance(step, Wait):
                sleep(step.seconds)
                continue
            ctx = step
            hedge = run.hedge_plan(ctx, _now())
            if hedge is None or hedge.hedge_at is None:
                op = self._open(_opened(run, ctx))
                if op.error is None:
                    return op
                if self._life.closed:  # its pools were closed under it: the call ends as abandoned
                    raise E.ClientClosedError("the client was closed while this call was in flight") from op.error
                run.failed(ctx, op.error, _now(), partial=op.state)
                continue
            winner = self._race(run, ctx, hedge)
            if winner is not None:
                return winner

    def _race(self, run: CallRun, ctx: AttemptContext, hedge: Any) -> _Opened | None:
        """Hedging: past the hedge delay with no first token, race the next deployment; keep the first."""
        first = _opened(run, ctx)
        running = {self._start(first): first}
        try:
            return self._race_loop(run, hedge, running)
        except BaseException:  # the caller's end (run.settle) records them; their attempts are stopped
            for handle, op in running.items():
                self._stop(handle, op)
            raise

    def _race_loop(self, run: CallRun, hedge: Any, running: Dict[Any, _Opened]) -> _Opened | None:
        checked = False
        while running:
            timeout = None if checked else max(0.0, hedge.hedge_at - _now())
            done = self._first_done(running, timeout)
            if not done:
                checked = True
                second = self._offload.run(_hedge_due, run, hedge, undo=mark_unsent)
                if second is not None:
                    running[self._start(second)] = second
                continue
            for handle in done:
                op = running.pop(handle)
                if op.error is None:
                    for loser_handle, loser in running.items():
                        self._stopped(loser_handle, loser)
                        run.cancelled(loser.ctx, _now(), partial=loser.state)
                    return op
                run.failed(op.ctx, op.error, _now(), partial=op.state)
        return None

    def _create(self, kwargs: Dict[str, Any]) -> Union[ChatCompletion, Stream]:
        self._renew_if_forked()
        kwargs, max_retries = self._call_args(kwargs)
        kwargs, cache_args = pop_cache_args(kwargs)
        original = dict(kwargs) if self._shadow is not None else None  # prepare_call pops from kwargs
        prepared = prepare_call(self.config, kwargs)
        prepared.max_retries = max_retries
        cached = self._lookup(prepared, cache_args)
        if cached is not None and cached.entry is not None:
            return cached.replay(self._engine, prepared, is_async=False)  # type: ignore[return-value]  # a CachedStream stands in for a Stream (the same members)
        # Admission (budget reservation, limits) may be a Redis round trip: in a worker thread (Client).
        if self._offload.inline:
            run = CallRun(self._engine, prepared, _now(), wall=time.time)
        else:
            run = self._offload.run(functools.partial(CallRun, self._engine, prepared, _now(), wall=time.time),
                                          undo=end_cancelled)
        try:
            op = self._attempts(run)
            if prepared.stream:
                stream = Stream(run, op, self._attempts)
                self._streams.add(stream)
                if original is not None:  # [routing.shadow]: offered once the stream has ended
                    stream._when_ended(functools.partial(self._shadow.offer, original))
                return stream
            if op.state is not None:  # a plain call read as a stream: the caller gets the assembled answer
                with Stream(run, op, self._attempts) as stream:
                    self._streams.add(stream)  # close() on another thread ends it as abandoned
                    result = stream.get_final_completion()
            else:
                completion, reported = op.parsed  # type: ignore[misc]  # set (not None) for a plain call: state is None
                result = run.succeeded(op.ctx, completion, reported, _now(), None)
        except BaseException as exc:  # every exit: slots, permits and records are settled once
            run.settle(exit_status(exc), exc, _now())
            raise
        if original is not None:
            self._shadow.offer(original, result)  # [routing.shadow]: never waits for the shadow
        return result

    @property
    def batches(self) -> Any:
        """Batch jobs on the platforms' batch APIs (`llmroute.batch.Batches`, docs/batch.md)."""
        if getattr(self, "_batches", None) is None:
            from llmroute.batch import Batches  # loaded on first use of this feature: `import llmroute` stays light

            self._batches = Batches(self)
        return self._batches

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
    # --- end generated: AsyncClient ---


# --------------------------------------------------------------------------------------------------
# async


def _offload_for(engine: Engine, cache: Any) -> Offload:
    """The worker threads an `AsyncClient` runs its blocking steps on (inline when none blocks)."""
    offload = Offload(inline=not (engine_blocks(engine) or cache_blocks(cache)))
    if not offload.inline and engine.fleet is not None:
        engine.fleet.breakers.later = offload.submit  # breaker publishes and probe give-backs
    return offload


class AsyncClient(_ClientSurface):
    """The asyncio client, same surface as `Client`.

    `transport="auto"` (the default) and `"aiohttp"` run on aiohttp; `"httpx"` on httpx's async pool.
    Steps that may block (shared state in Redis, a cache backend) run in worker threads (`_call/offload.py`)."""

    chat: _AsyncChat
    embeddings: AsyncEmbeddings
    models: AsyncModels

    def __init__(
        self, config: Union[Config, Mapping[str, Any], str, os.PathLike[str], None] = None, *, transport: str = "auto",
        api_key: str | None = None, base_url: Any = None, timeout: Any = None, max_retries: int | None = None,
        default_headers: Mapping[str, str] | None = None, organization: str | None = None,
        project: str | None = None, prices: Mapping[str, Mapping[str, Any]] | None = None,
        ledger: Any = None, read_limits: ReadLimits | None = None,
    ) -> None:
        """As `Client(...)`; `transport` picks the HTTP library."""
        self._setup(config, api_key=api_key, base_url=base_url, timeout=timeout, max_retries=max_retries,
                    default_headers=default_headers, organization=organization, project=project, prices=prices,
                    ledger=ledger, read_limits=read_limits)
        self._transport = AsyncTransport(transport)
        self._transport_name = transport
        self._offload = _offload_for(self._engine, self.cache)  # shared state and cache I/O off the loop
        self._life = ClientLife("AsyncClient")
        self._streams = OpenStreams()  # ended as abandoned by aclose()
        _async_views(self)
        self._shadow = _shadow_runner(self, is_async=True)

    @classmethod
    def from_config(cls, path: Union[str, os.PathLike[str]], *, transport: str = "auto",
                    ledger: Any = None) -> "AsyncClient":
        return cls(load_config(path), transport=transport, ledger=ledger)

    def _renew_if_forked(self) -> None:
        if self._life.check(_running_loop()):  # first call in a forked child: its own connections
            self._transport = AsyncTransport(self._transport_name)
            self._offload = _offload_for(self._engine, self.cache)  # and threads (the parent's are not here)

    async def _lookup(self, prepared: Any, cache_args: Any) -> CacheCall | None:
        offload = None if self._offload.inline else self._offload
        return await alookup(self.cache, self._engine, prepared, cache_args, self._transport, offload)

    def _start(self, op: _Opened) -> Any:
        """Open a racing attempt in a task of its own."""
        import asyncio

        return asyncio.ensure_future(self._open(op))

    async def _first_done(self, running: Dict[Any, _Opened], timeout: float | None) -> Any:
        import asyncio

        done, _ = await asyncio.wait(running, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        return done

    def _stop(self, handle: Any, op: _Opened) -> None:
        """A racing attempt given up: its task is cancelled."""
        handle.cancel()

    async def _stopped(self, handle: Any, op: _Opened) -> None:
        """A racing attempt that lost: its task cancelled, and waited for."""
        import asyncio

        handle.cancel()
        try:
            await handle
        except asyncio.CancelledError:
            pass

    async def aclose(self) -> None:
        if self._shadow is not None:
            await self._shadow.aclose()  # shadows still running call through this client: before closing it
        self._life.closed = True
        self._streams.abandon_all()  # their rows, slots and permits, before the ledger closes
        if getattr(self, "_batches", None) is not None:
            await self._batches.aclose()
        await self._transport.aclose()
        if self._offload.inline:
            self._close_services()
        else:  # waits for the stores and publishes still queued, then flushes to Redis: off the loop
            import asyncio

            await asyncio.get_running_loop().run_in_executor(None, self._close_services)

    def _close_services(self) -> None:
        self._offload.close()
        self._engine.close()
        self.cache.close()

    def _finalise(self, life: ClientLife) -> None:
        """Closed by the garbage collector: nothing here may await, the pools are closed on their own loops."""
        life.closed = True
        self._streams.abandon_all()
        self._offload.close(wait=False)
        self._engine.close()
        self._transport.close_later()  # each loop's pools, on their own loop

    close = aclose

    # --- async source: AsyncClient ---
    def with_options(self, *, timeout: Any = None, max_retries: int | None = None,
                     default_headers: Mapping[str, str] | None = None) -> "AsyncClient":
        """This client with other call defaults (openai-python's `with_options`): the same connections,
        breakers, cache and ledger; closing either closes both."""
        return _with_options(self, call_options(timeout=timeout, max_retries=max_retries,
                                                default_headers=default_headers), _async_views)

    copy = with_options

    async def _send(self, ctx: AttemptContext) -> tuple[Any, X.Exchange]:
        """Send the attempt's request (a non-2xx answer raises the adapter's error); the response, body unread."""
        ex = _exchange(ctx, self.read_limits)
        try:
            return await X.asend(self._transport, ex, ctx.adapter.error_from_response), ex
        finally:
            if not ex.sent:
                ctx.not_sent()
            ctx.connected(ex.connect_s)

    async def _open(self, op: _Opened) -> _Opened:
        """Send one attempt and read it up to its first content (streams) or whole (plain calls)."""
        ctx, state = op.ctx, op.state
        try:
            try:
                op.response, ex = await self._send(ctx)
            except E.InvalidRequestError:  # a request the transport cannot build: the caller's, unsent
                raise
            except E.ProviderError as error:
                if not ctx.correct_request(error):
                    raise
                op.response, ex = await self._send(ctx)
            whole_json = _answered(ctx, op.response)
            if op.cancelled:  # a hedge race was decided while this one was connecting (Client's threads)
                await op.response.aclose()
                return op
            if state is None or (whole_json and not op.run.prepared.stream):  # a plain answer, read as one
                op.state = None
                content = await X.aread(op.response, ex)
                op.parsed = op.run.parse_answer(ctx, op.response.headers, content, self.read_limits)
                return op
            state.bound(self.read_limits)
            if whole_json:  # a stream answered with one JSON body: read as its stream at its end
                state.answered_whole()
            op.chunks = X.achunks(op.response, ex)
            async for data in op.chunks:
                op.rest = state.feed_each(data, _now())  # taken up to the first content; the stream takes the rest
                for chunk in op.rest:
                    op.ready.append(chunk)
                    if state.content_started:
                        return op
            op.ready.extend(state.eof(_now()))
            op.at_end = True
            await op.response.aclose()
        except E.InvalidRequestError:
            raise
        except E.ProviderError as error:
            op.error = error
        except network_errors() as exc:
            op.error = transport_error(exc, ctx, state)
        except BaseException:  # a cancelled task (async), KeyboardInterrupt, a bug of ours
            if op.response is not None:
                await aclose_shielded(op.response)
            raise
        if op.error is not None and op.response is not None:
            await op.response.aclose()
        return op

    async def _attempts(self, run: CallRun) -> _Opened:
        """Walk the plan until an attempt opens; failures go back to the plan, which raises when done.
        Whatever else ends the walk (a cancelled task (async), KeyboardInterrupt, a bug) abandons the call's attempts."""
        try:
            return await self._walk(run)
        except E.LLMRouteError:
            raise
        except BaseException as exc:
            run.abandon(_now(), exc)
            raise

    async def _walk(self, run: CallRun) -> _Opened:
        while True:
            if self._offload.inline:  # no thread hop to make: no coroutine to wrap the step in either
                step = run.next_step(_now())
            else:
                step = await self._offload.run(run.next_step, _now(), undo=mark_unsent)
            if isinstance(step, Wait):
                await asleep(step.seconds)
                continue
            ctx = step
            hedge = run.hedge_plan(ctx, _now())
            if hedge is None or hedge.hedge_at is None:
                op = await self._open(_opened(run, ctx))
                if op.error is None:
                    return op
                if self._life.closed:  # its pools were closed under it: the call ends as abandoned
                    raise E.ClientClosedError("the client was closed while this call was in flight") from op.error
                run.failed(ctx, op.error, _now(), partial=op.state)
                continue
            winner = await self._race(run, ctx, hedge)
            if winner is not None:
                return winner

    async def _race(self, run: CallRun, ctx: AttemptContext, hedge: Any) -> _Opened | None:
        """Hedging: past the hedge delay with no first token, race the next deployment; keep the first."""
        first = _opened(run, ctx)
        running = {self._start(first): first}
        try:
            return await self._race_loop(run, hedge, running)
        except BaseException:  # the caller's end (run.settle) records them; their attempts are stopped
            for handle, op in running.items():
                self._stop(handle, op)
            raise

    async def _race_loop(self, run: CallRun, hedge: Any, running: Dict[Any, _Opened]) -> _Opened | None:
        checked = False
        while running:
            timeout = None if checked else max(0.0, hedge.hedge_at - _now())
            done = await self._first_done(running, timeout)
            if not done:
                checked = True
                second = await self._offload.run(_hedge_due, run, hedge, undo=mark_unsent)
                if second is not None:
                    running[self._start(second)] = second
                continue
            for handle in done:
                op = running.pop(handle)
                if op.error is None:
                    for loser_handle, loser in running.items():
                        await self._stopped(loser_handle, loser)
                        run.cancelled(loser.ctx, _now(), partial=loser.state)
                    return op
                run.failed(op.ctx, op.error, _now(), partial=op.state)
        return None

    async def _create(self, kwargs: Dict[str, Any]) -> Union[ChatCompletion, AsyncStream]:
        self._renew_if_forked()
        kwargs, max_retries = self._call_args(kwargs)
        kwargs, cache_args = pop_cache_args(kwargs)
        original = dict(kwargs) if self._shadow is not None else None  # prepare_call pops from kwargs
        prepared = prepare_call(self.config, kwargs)
        prepared.max_retries = max_retries
        cached = await self._lookup(prepared, cache_args)
        if cached is not None and cached.entry is not None:
            return cached.replay(self._engine, prepared, is_async=True)  # type: ignore[return-value]  # a CachedStream stands in for a Stream (the same members)
        # Admission (budget reservation, limits) may be a Redis round trip: in a worker thread (AsyncClient).
        if self._offload.inline:
            run = CallRun(self._engine, prepared, _now(), wall=time.time)
        else:
            run = await self._offload.run(functools.partial(CallRun, self._engine, prepared, _now(), wall=time.time),
                                          undo=end_cancelled)
        try:
            op = await self._attempts(run)
            if prepared.stream:
                stream = AsyncStream(run, op, self._attempts)
                self._streams.add(stream)
                if original is not None:  # [routing.shadow]: offered once the stream has ended
                    stream._when_ended(functools.partial(self._shadow.offer, original))
                return stream
            if op.state is not None:  # a plain call read as a stream: the caller gets the assembled answer
                async with AsyncStream(run, op, self._attempts) as stream:
                    self._streams.add(stream)  # close() on another thread ends it as abandoned
                    result = await stream.get_final_completion()
            else:
                completion, reported = op.parsed  # type: ignore[misc]  # set (not None) for a plain call: state is None
                result = run.succeeded(op.ctx, completion, reported, _now(), None)
        except BaseException as exc:  # every exit: slots, permits and records are settled once
            run.settle(exit_status(exc), exc, _now())
            raise
        if original is not None:
            self._shadow.offer(original, result)  # [routing.shadow]: never waits for the shadow
        return result

    @property
    def batches(self) -> Any:
        """Batch jobs on the platforms' batch APIs (`llmroute.batch.AsyncBatches`, docs/batch.md)."""
        if getattr(self, "_batches", None) is None:
            from llmroute.batch import AsyncBatches  # loaded on first use of this feature: `import llmroute` stays light

            self._batches = AsyncBatches(self)
        return self._batches

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()
    # --- end async source: AsyncClient ---
