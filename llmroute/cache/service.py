"""`ResponseCache`: one client's cache. It owns the backend, reads and writes entries, and never lets
the backend fail a call.

A backend error (Redis down, a corrupt SQLite file, a full disk) becomes a miss or a skipped store,
a warning in the `llmroute.cache` log (at most one a minute per kind), and a count in `stats()`;
after an error the backend is left alone for `retry_after_error_s`. An entry that does not decode is
a miss (`corrupt` count). Times come from `clock` (wall-clock seconds; pass a fake one in tests).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Tuple

from llmroute._runtime.forksafe import renew_at_fork
from llmroute.cache.cache_policy import CacheConfig, CacheSettings

if TYPE_CHECKING:
    from llmroute.cache.backends import Backend
    from llmroute.cache.entry import Entry

# Every client holds a `ResponseCache`, most of them unused: the backends, the entry codec, the key and
# vector helpers load with the first lookup or store, not with the client.

__all__ = ["ResponseCache", "open_backend"]

log = logging.getLogger("llmroute.cache")
WARN_EVERY_S = 60.0


def open_backend(config: CacheConfig, *, base_dir: Path | None = None, redis_client: Any = None) -> Backend:
    """The backend `[cache]` names. Opens nothing yet: files and sockets are opened on first use."""
    from llmroute.cache.backends import MemoryBackend, RedisBackend, SQLiteBackend  # the first lookup or store

    if config.backend == "sqlite":
        path = Path(config.path).expanduser()
        if base_dir is not None and not path.is_absolute():
            path = Path(base_dir) / path
        return SQLiteBackend(path, max_entries=config.max_entries, max_bytes=config.max_bytes)
    if config.backend == "redis":
        return RedisBackend(url=config.url, client=redis_client, prefix=config.key_prefix,
                            timeout_s=config.timeout_s)
    return MemoryBackend(max_entries=config.max_entries, max_bytes=config.max_bytes)


class ResponseCache:
    """`client.cache`: `clear(namespace=...)`, `stats()`, and the lookups and stores of calls."""

    def __init__(self, settings: CacheSettings | None = None, *, base_dir: Path | None = None,
                 clock: Callable[[], float] = time.time, backend: Backend | None = None,
                 embedder: Any = None) -> None:
        self.settings = settings or CacheSettings(CacheConfig())
        self.config = self.settings.config
        self.clock = clock
        self.embedder = embedder
        self._base_dir = base_dir
        self._backend = backend
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        renew_at_fork(self, "_lock")
        self._skip_until = 0.0
        self._warned: Dict[str, float] = {}

    def __repr__(self) -> str:
        return f"ResponseCache(backend={self.config.backend!r})"

    @property
    def backend(self) -> Backend:
        if self._backend is None:
            with self._lock:
                if self._backend is None:
                    self._backend = open_backend(self.config, base_dir=self._base_dir)
        return self._backend

    # -- counters and warnings ---------------------------------------------------------------------
    def count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._counts[name] += n

    def _warn(self, what: str, exc: BaseException) -> None:
        now = time.monotonic()
        with self._lock:
            last = self._warned.get(what)
            if last is not None and now - last < WARN_EVERY_S:
                return
            self._warned[what] = now
        # The exception's text, never a URL or key: Redis errors name host:port at most.
        log.warning("llmroute cache: %s failed on the %s backend (%s: %s); served as a miss",
                    what, self.config.backend, type(exc).__name__, exc)

    def _safe(self, what: str, fn: Callable[[], Any], default: Any) -> Any:
        if self.clock() < self._skip_until:
            self.count("backend_skipped")
            return default
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - a cache never fails a call
            self.count("errors")
            self._skip_until = self.clock() + self.config.retry_after_error_s
            self._warn(what, exc)
            return default

    def _decode(self, data: bytes, now: float) -> Entry | None:
        from llmroute.cache.entry import decode  # a lookup found bytes

        try:
            entry = decode(data)
        except Exception as exc:  # noqa: BLE001
            self.count("corrupt")
            self._warn("decoding an entry", exc)
            return None
        return entry if entry.expires_at > now else None

    # -- entries -------------------------------------------------------------------------------------
    def namespace(self, feature: str | None = None, metadata: Mapping[str, str] | None = None) -> str:
        """The namespace a call with this feature and metadata uses."""
        from llmroute.cache.key import namespace_for  # the cache is in play

        return namespace_for(feature, metadata or {}, self.config.namespace_keys)

    def get(self, namespace: str, key: str) -> Entry | None:
        now = self.clock()
        data = self._safe("a lookup", lambda: self.backend.get(namespace, key, now), None)
        return None if data is None else self._decode(data, now)

    def similar(self, namespace: str, group: str, embedding: List[float], threshold: float,
                query: str | None = None) -> Tuple[Entry | None, float | None]:
        """The most similar live entry of a group, if its cosine similarity reaches `threshold`;
        also the best similarity seen (None when the group is empty). With `query` (and
        `match_numbers` on), only entries whose question has the same numbers and codes compete."""
        from llmroute.cache.key import numbers_of  # a semantic lookup
        from llmroute.cache.vectors import dot, normalize, unpack

        numbers = numbers_of(query) if query is not None and self.config.semantic.match_numbers else None
        now = self.clock()
        limit = self.config.semantic.max_candidates
        records = self._safe("a semantic lookup", lambda: self.backend.group(namespace, group, now, limit), [])
        unit = normalize(embedding)
        best_key: str | None = None
        best_sim: float | None = None
        for key, record in records:
            try:
                question, vector = unpack(record)
            except Exception as exc:  # noqa: BLE001
                self.count("corrupt")
                self._warn("decoding an index record", exc)
                continue
            if numbers is not None and numbers_of(question) != numbers:
                continue
            sim = dot(unit, vector)
            if best_sim is None or sim > best_sim:
                best_key, best_sim = key, sim
        if best_key is not None and best_sim is not None and best_sim >= threshold:
            entry = self.get(namespace, best_key)
            if entry is not None:
                return entry, best_sim
        return None, best_sim

    def put(self, namespace: str, key: str, entry: Entry, *, group: str | None = None,
            embedding: List[float] | None = None) -> bool:
        """Store an entry; with `group` and `embedding`, also its semantic index record."""
        from llmroute.cache.entry import encode  # a store
        from llmroute.cache.vectors import pack

        record = pack(entry.query, embedding) if group is not None and embedding else None
        data = encode(entry)
        if len(data) > self.config.max_entry_bytes:
            self.count("too_large")
            return False
        now = self.clock()

        def store() -> bool:
            self.backend.set(namespace, key, data, expires_at=entry.expires_at, now=now, group=group, record=record)
            return True

        ok = self._safe("a store", store, False)
        if ok:
            self.count("stores")
        return bool(ok)

    # -- controls ------------------------------------------------------------------------------------
    def clear(self, namespace: str | None = None, *, feature: str | None = None,
              metadata: Mapping[str, str] | None = None) -> int:
        """Drop entries: all, one namespace, or the namespace of `feature` + `metadata`. Returns how
        many were dropped (Redis: keys). Unlike lookups, a backend error here is raised."""
        if namespace is None and (feature is not None or metadata is not None):
            namespace = self.namespace(feature, metadata)
        return self.backend.clear(namespace)

    def stats(self) -> Dict[str, Any]:
        """Counters of this process (hits, misses, bypasses, stores, errors, ...) and the backend's size."""
        with self._lock:
            counts = dict(self._counts)
        lookups = counts.get("hit", 0) + counts.get("semantic-hit", 0) + counts.get("miss", 0)
        out: Dict[str, Any] = {"backend": self.config.backend, **counts,
                               "hit_rate": (counts.get("hit", 0) + counts.get("semantic-hit", 0)) / lookups
                               if lookups else None}
        try:
            out["store"] = self.backend.stats(self.clock())
        except Exception as exc:  # noqa: BLE001
            out["store"] = {"error": f"{type(exc).__name__}: {exc}"}
        return out

    def close(self) -> None:
        if self._backend is not None:
            try:
                self._backend.close()
            except Exception:  # noqa: BLE001
                pass
