"""The response cache: exact and semantic, on an in-process, SQLite or Redis backend (docs/cache.md).

Nothing here opens a file or a socket at import or construction: the backend opens on first use.
Importing the package loads none of its modules: each name below loads its module on first use
(PEP 562), so the config (which needs only `cache_policy`) does not load the backends, the semantic
embedder or the HTTP exchange it uses.
"""

from __future__ import annotations

import importlib as _importlib
from typing import TYPE_CHECKING, Any as _Any

if TYPE_CHECKING:  # what type checkers see; at run time each name loads its module on first use
    from llmroute.cache.backends import Backend, MemoryBackend, RedisBackend, SQLiteBackend
    from llmroute.cache.cache_policy import (CacheConfig, CacheSettings, CallCache, SemanticConfig, TierCacheConfig,
                                             pop_cache_args)
    from llmroute.cache.semantic import Embedder
    from llmroute.cache.service import ResponseCache, open_backend

__all__ = [
    "ResponseCache", "CacheConfig", "CacheSettings", "SemanticConfig", "TierCacheConfig", "CallCache",
    "Backend", "MemoryBackend", "SQLiteBackend", "RedisBackend", "Embedder", "open_backend", "pop_cache_args",
]

# public name -> the module (in this package) that defines it
_WHERE = {
    **dict.fromkeys(("Backend", "MemoryBackend", "RedisBackend", "SQLiteBackend"), "backends"),
    **dict.fromkeys(("CacheConfig", "CacheSettings", "CallCache", "SemanticConfig", "TierCacheConfig",
                     "pop_cache_args"), "cache_policy"),
    "Embedder": "semantic",
    "ResponseCache": "service",
    "open_backend": "service",
}


def __getattr__(name: str) -> _Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # the next access is a plain module attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
