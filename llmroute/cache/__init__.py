"""The response cache: exact and semantic, on an in-process, SQLite or Redis backend (docs/cache.md).

Nothing here opens a file or a socket at import or construction: the backend opens on first use.
"""

from __future__ import annotations

from typing import Any, Optional

from llmroute.cache.backends import Backend, MemoryBackend, RedisBackend, SQLiteBackend
from llmroute._call.cache_step import CacheCall, CachedStream, alookup, lookup
from llmroute.cache.cache_policy import CacheConfig, CacheSettings, CallCache, SemanticConfig, TierCacheConfig, pop_cache_args
from llmroute.cache.semantic import Embedder
from llmroute.cache.service import ResponseCache, open_backend
from llmroute.config import _expand_env

__all__ = [
    "ResponseCache", "CacheConfig", "CacheSettings", "SemanticConfig", "TierCacheConfig", "CallCache",
    "Backend", "MemoryBackend", "SQLiteBackend", "RedisBackend", "Embedder", "CachedStream", "CacheCall",
    "open_cache", "open_backend", "pop_cache_args", "lookup", "alookup",
]


def open_cache(config: Any, *, backend: Optional[Backend] = None, clock: Any = None) -> ResponseCache:
    """The `ResponseCache` a `Config` asks for (`[cache]`, the tiers' `cache`, `[cache.semantic]`)."""
    import time

    settings: CacheSettings = getattr(config.sections, "cache", None) or CacheSettings(CacheConfig())
    semantic = settings.config.semantic
    embedder = None
    if semantic.enabled and semantic.base_url:
        # `${VAR}` in the embedder's key and the Redis URL (which may hold a password) come from the environment.
        api_key = _expand_env(semantic.api_key, source=config.source, key="cache.semantic.api_key") \
            if semantic.api_key else None
        embedder = Embedder(semantic.base_url, semantic.model, api_key=api_key, timeout_s=semantic.timeout_s)
    if settings.config.url and "${" in settings.config.url:
        url = _expand_env(settings.config.url, source=config.source, key="cache.url")
        settings = CacheSettings(settings.config.model_copy(update={"url": url}), settings.tiers)
    return ResponseCache(settings, base_dir=config.base_dir, clock=clock or time.time, backend=backend,
                         embedder=embedder)
