"""The response cache: exact and semantic, on an in-process, SQLite or Redis backend (docs/cache.md).

Nothing here opens a file or a socket at import or construction: the backend opens on first use.
"""

from __future__ import annotations


from llmroute.cache.backends import Backend, MemoryBackend, RedisBackend, SQLiteBackend
from llmroute.cache.cache_policy import CacheConfig, CacheSettings, CallCache, SemanticConfig, TierCacheConfig, pop_cache_args
from llmroute.cache.semantic import Embedder
from llmroute.cache.service import ResponseCache, open_backend

__all__ = [
    "ResponseCache", "CacheConfig", "CacheSettings", "SemanticConfig", "TierCacheConfig", "CallCache",
    "Backend", "MemoryBackend", "SQLiteBackend", "RedisBackend", "Embedder", "open_backend", "pop_cache_args",
]
