"""The cache in one call: the lookup before any attempt, the replay of a hit, the store after a miss.

`begin()` runs at the start of `create()`: it resolves the target (so the key holds the tier or
deployment that will answer), decides whether the cache is in play, and looks the key up. A hit
is answered here: the stored completion (or its chunks, for `stream=True`), with a route whose
`cache` is "hit" or "semantic-hit", one ledger row that costs 0 and carries `cost_saved`, and a
span with `llmroute.cache`. A miss goes on to the attempts; when the call completes, `completed()`
stores the answer if it is complete and came from the keyed target. A streamed miss records its
chunks through `RecordingAssembler`, which the stream's state uses in place of the plain one.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Callable, List, Union

from llmroute.providers.base import StreamAssembler, for_caller, usage_chunks_wanted
from llmroute._call.targets import resolve_target
from llmroute.types import ChatCompletion, ChatCompletionChunk, Route, Usage
from llmroute.cache.cache_policy import CacheConfig, CacheSettings, CallCache, Decision, decide
from llmroute.cache.service import ResponseCache
from llmroute.config import _expand_env

logger = logging.getLogger("llmroute.cache")

if TYPE_CHECKING:
    from llmroute._call.call import CallRun, PreparedCall
    from llmroute._call.engine import Engine
    from llmroute.cache.backends import Backend
    from llmroute.cache.entry import Entry
    from llmroute.cache.key import KeyParts

# The entry codec, the key and the semantic embedder load with the first call the cache is in play for
# (`begin`) or the first semantic cache opened: a client whose config has no cache never loads them.

__all__ = ["CacheCall", "begin", "lookup", "alookup", "open_cache", "RecordingAssembler", "CachedStream", "AsyncCachedStream"]


@dataclass
class CacheCall:
    """One call's dealings with the cache."""

    cache: "ResponseCache"
    outcome: str | None  # "hit" | "semantic-hit" | "miss" | "bypass"
    decision: Decision
    namespace: str = ""
    parts: KeyParts | None = None
    deployments: frozenset[str] = frozenset()
    entry: Entry | None = None
    similarity: float | None = None
    embedding: List[float] | None = None
    chunks: List[ChatCompletionChunk] | None = None
    started_at: float = field(default_factory=time.monotonic)
    store_later: Callable[..., None] | None = None  # AsyncClient's `Offload.submit`: stores off its loop

    @property
    def needs_embedding(self) -> bool:
        """A semantic lookup is due: exact miss, semantic on, an embedder, and a question to embed."""
        return (self.outcome == "miss" and self.decision.semantic and self.cache.embedder is not None
                and self.parts is not None and bool(self.parts.query))

    def semantic_lookup(self, embedding: List[float] | None) -> None:
        """Look among the group's entries with the query's embedding (None: the embedder failed)."""
        if embedding is None or self.parts is None:
            return
        self.embedding = embedding
        threshold = self.cache.config.semantic.threshold
        entry, sim = self.cache.similar(self.namespace, self.parts.group, embedding, threshold, self.parts.query)
        self.similarity = sim
        if entry is not None:
            self.entry, self.outcome = entry, "semantic-hit"
            self.cache.count("miss", -1)
            self.cache.count("semantic-hit")

    def look_again(self) -> None:
        """An exact miss while this client's store of the same key was queued: look once more."""
        assert self.parts is not None
        entry = self.cache.get(self.namespace, self.parts.exact)
        if entry is not None:
            self.entry, self.outcome = entry, "hit"
            self.cache.count("miss", -1)
            self.cache.count("hit")

    # -- a miss: the call goes on --------------------------------------------------------------------
    def assembler(self) -> StreamAssembler:
        return RecordingAssembler(self) if self.outcome == "miss" else StreamAssembler()

    def completed(self, run: "CallRun", completion: ChatCompletion) -> None:
        """The call succeeded: store its answer if it is complete and came from the keyed target."""
        if self.outcome != "miss" or self.parts is None:
            return
        from llmroute.cache.entry import Entry, dump_chunk, dump_completion, storable  # a store: the cache is in use

        route = run.route
        why = storable(completion, route)
        if why is None and route.deployment not in self.deployments:
            why = "answered by a deployment outside the keyed target (fallback or budget downgrade)"
        if why is not None:
            self.cache.count("not_stored")
            return
        answering = next((a for a in reversed(route.attempts) if a.status == "ok"), None)
        cost = answering.cost if answering is not None else None
        now = self.cache.clock()
        chunks = self.chunks if run.prepared.stream else None
        if run.prepared.stream and chunks is None:  # too long to keep chunk by chunk (RecordingAssembler)
            self.cache.count("not_stored")
            return
        entry = Entry(
            completion=dump_completion(completion),
            chunks=[dump_chunk(c) for c in chunks] if chunks is not None else None,
            deployment=route.deployment, provider=route.provider,
            provider_kind=run.engine.deployment(route.deployment).provider.kind if route.deployment else None,
            model=route.model, tier=route.tier,
            cost=cost.amount if cost is not None else None, currency=cost.currency if cost is not None else None,
            created_at=now, expires_at=now + self.decision.ttl_s, query=self.parts.query,
        )
        group = self.parts.group if self.decision.semantic else None
        put = functools.partial(self.cache.put, self.namespace, self.parts.exact, entry, group=group,
                                embedding=self.embedding)
        if self.store_later is not None:
            self.store_later(put, key=(self.namespace, self.parts.exact))
        else:
            put()

    # -- a hit: answered from the entry --------------------------------------------------------------
    def replay(self, engine: "Engine", prepared: "PreparedCall", *,
               is_async: bool = False) -> Union[ChatCompletion, "CachedStream"]:
        from llmroute.accounting.cost import Cost  # pricing loads with the first client, not at import

        entry = self.entry
        assert entry is not None
        target = prepared.target
        completion = entry.completion_model()
        reason = f"{target.reason}; cache {self.outcome}" if target is not None else f"cache {self.outcome}"
        route = Route(provider=entry.provider, deployment=entry.deployment, model=entry.model,
                      tier=target.tier if target is not None else entry.tier, reason=reason,
                      score=target.score if target is not None else None, pool=prepared.pool,
                      feature=prepared.feature, request_id=prepared.request_id, cache=self.outcome,
                      cache_similarity=self.similarity)
        completion.route = route
        priced = entry.cost is not None
        completion.cost = Cost(amount=Decimal(0) if priced else None, currency=entry.currency, priced=priced)
        engine.recorder.cache_hit(prepared, route, completion, entry, outcome=self.outcome,
                                  similarity=self.similarity, started_at=self.started_at, now=time.monotonic())
        if prepared.stream:
            chunks = for_caller(entry.chunk_models(), usage_chunks_wanted(prepared.call.params))
            return (AsyncCachedStream if is_async else CachedStream)(chunks, completion)
        return completion


def begin(cache: "ResponseCache" | None, engine: "Engine", prepared: "PreparedCall",
          call: CallCache) -> CacheCall | None:
    """Decide and look up (exact key). None: the cache is not in play for this call."""
    if cache is None or (call.mode is None and not cache.settings.in_use):
        return None
    from llmroute.cache.key import UnkeyableError, key_parts, target_id  # the cache is in play for this call

    started = time.monotonic()
    target = prepared.target = resolve_target(engine.config, prepared)
    decision = decide(cache.settings, call, target.tier, prepared.call.params)
    if not decision.use:
        if decision.outcome is None:
            return None
        cache.count(decision.outcome)
        if call.mode is not False:
            warn_bypass(cache, target.tier, decision.reason)
        return CacheCall(cache, decision.outcome, decision, started_at=started)
    try:
        parts = key_parts(target_id(target.tier, target.deployments), prepared.messages, prepared.call.params,
                          prepared.call.extra_body)
    except UnkeyableError as exc:
        cache.count("bypass")
        warn_bypass(cache, target.tier, f"the request cannot be keyed ({exc})")
        return CacheCall(cache, "bypass", decision, started_at=started)
    namespace = cache.namespace(prepared.feature, prepared.metadata)
    entry = cache.get(namespace, parts.exact)
    outcome = "hit" if entry is not None else "miss"
    cache.count(outcome)
    return CacheCall(cache, outcome, decision, namespace, parts, frozenset(d.id for d in target.deployments),
                     entry=entry, started_at=started)


_BYPASS_WARNED: set[tuple[int, str | None, str]] = set()  # (cache id, tier, reason) already logged
_BYPASS_LOCK = threading.Lock()


def warn_bypass(cache: "ResponseCache", tier: str | None, reason: str) -> None:
    """The cache is on but skipped this call: say why, once per (tier, reason) for this cache."""
    key = (id(cache), tier, reason)
    with _BYPASS_LOCK:
        if key in _BYPASS_WARNED:
            return
        _BYPASS_WARNED.add(key)
    logger.warning("llmroute cache: calls to %s bypass the cache: %s (said once per tier and reason)",
                   f"tier {tier!r}" if tier else "this target", reason)


def lookup(cache: "ResponseCache" | None, engine: "Engine", prepared: "PreparedCall", call: CallCache,
           transport: Any = None) -> CacheCall | None:
    """`begin()`, then a semantic lookup if one is due (the embedding fetched on this thread)."""
    cached = begin(cache, engine, prepared, call)
    if cached is not None and cached.needs_embedding and cached.parts is not None:  # (needs_embedding: parts set)
        cached.semantic_lookup(cached.cache.embedder.embed(cached.parts.query, transport))
    prepared.cache = cached
    return cached


async def alookup(cache: "ResponseCache" | None, engine: "Engine", prepared: "PreparedCall", call: CallCache,
                  transport: Any = None, offload: Any = None) -> CacheCall | None:
    """`lookup()` for `AsyncClient`: the embedding is awaited; with `offload` (an `offload.Offload`)
    the backend's lookups run in its worker threads and the store after a miss is handed to it."""
    if offload is None:
        cached = begin(cache, engine, prepared, call)
    else:
        stores_before = offload.keyed_done()
        cached = await offload.run(begin, cache, engine, prepared, call)
        if cached is not None and cached.outcome == "miss" and cached.parts is not None \
                and await offload.wait_queued((cached.namespace, cached.parts.exact), since=stores_before):
            await offload.run(cached.look_again)  # this client's store of that key was still queued
    if cached is not None and cached.needs_embedding and cached.parts is not None:  # (needs_embedding: parts set)
        embedding = await cached.cache.embedder.aembed(cached.parts.query, transport)
        if offload is None:
            cached.semantic_lookup(embedding)
        else:
            await offload.run(cached.semantic_lookup, embedding)
    if cached is not None and offload is not None:
        cached.store_later = offload.submit
    prepared.cache = cached
    return cached


MAX_RECORDED_CHUNKS = 20_000


class RecordingAssembler(StreamAssembler):
    """A `StreamAssembler` that also keeps the chunks, for the cache entry of a streamed miss. The
    attempt that finishes the call hands its chunks over when it builds the completion."""

    def __init__(self, owner: CacheCall) -> None:
        super().__init__()
        self._owner = owner
        self._chunks: List[ChatCompletionChunk] | None = []

    def add(self, chunk: ChatCompletionChunk) -> None:
        super().add(chunk)
        if self._chunks is not None:
            self._chunks.append(chunk)
            if len(self._chunks) > MAX_RECORDED_CHUNKS:  # a very long stream is not cached: its chunks
                self._chunks = None                       # would cost about 1.5 KB each to keep

    def completion(self, usage: Usage, fallback_model: str) -> ChatCompletion:
        self._owner.chunks = self._chunks
        return super().completion(usage, fallback_model)


class CachedStream:
    """A hit replayed as a stream: the same surface as `Stream` and `AsyncStream` (iterate or
    `async for`, context manager, `.response`, `.route`, `close()`), no delays between chunks."""

    def __init__(self, chunks: List[ChatCompletionChunk], completion: ChatCompletion) -> None:
        self._chunks = chunks
        self._final = completion
        self._next = iter(chunks)

    def __iter__(self) -> "CachedStream":
        return self

    def __next__(self) -> ChatCompletionChunk:
        return next(self._next)

    def __aiter__(self) -> "CachedStream":
        return self

    async def __anext__(self) -> ChatCompletionChunk:
        try:
            return next(self._next)
        except StopIteration:
            raise StopAsyncIteration from None

    @property
    def response(self) -> ChatCompletion:
        return self._final

    async def aresponse(self) -> ChatCompletion:
        return self._final

    def get_final_completion(self) -> ChatCompletion:
        """As `Stream.get_final_completion`: the whole answer (a hit has it already)."""
        return self._final

    @property
    def route(self) -> Route | None:
        return self._final.route

    def close(self) -> None:
        pass

    async def aclose(self) -> None:
        pass

    def __enter__(self) -> "CachedStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    async def __aenter__(self) -> "CachedStream":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        pass


class AsyncCachedStream(CachedStream):
    """`CachedStream` for `AsyncClient`, whose streams' `close()` is awaited."""

    async def close(self) -> None:  # type: ignore[override]  # awaited, as AsyncStream.close
        pass

    async def get_final_completion(self) -> ChatCompletion:  # type: ignore[override]  # awaited, as AsyncStream's
        """As `AsyncStream.get_final_completion` (awaited)."""
        return self._final


def open_cache(config: Any, *, backend: Backend | None = None, clock: Any = None) -> ResponseCache:
    """The `ResponseCache` a `Config` asks for (`[cache]`, the tiers' `cache`, `[cache.semantic]`)."""
    import time

    settings: CacheSettings = getattr(config.sections, "cache", None) or CacheSettings(CacheConfig())
    if settings.in_use:
        # A config that uses the cache loads its parts with the client: never first during a call's store,
        # which for a stream finished by the garbage collector may run while the interpreter exits.
        from llmroute.cache import backends, entry, key, vectors  # noqa: F401
    semantic = settings.config.semantic
    embedder = None
    if semantic.enabled and semantic.base_url:
        from llmroute.cache.semantic import Embedder  # a semantic cache is configured

        # `${VAR}` in the embedder's key and the Redis URL (which may hold a password) come from the environment.
        api_key = _expand_env(semantic.api_key, source=config.source, key="cache.semantic.api_key") \
            if semantic.api_key else None
        embedder = Embedder(semantic.base_url, semantic.model, api_key=api_key, timeout_s=semantic.timeout_s)
    if settings.config.url and "${" in settings.config.url:
        url = _expand_env(settings.config.url, source=config.source, key="cache.url")
        settings = CacheSettings(settings.config.model_copy(update={"url": url}), settings.tiers)
    return ResponseCache(settings, base_dir=config.base_dir, clock=clock or time.time, backend=backend,
                         embedder=embedder)
