"""Where cache entries live: in process, in a SQLite file, or in Redis.

Every backend stores opaque bytes under (namespace, key), with an absolute expiry time, and, for
the semantic cache, an index record (question + embedding, see vectors.py) per key of a semantic
group (the request minus its last user message), listed by `group()`. Times are passed
in (wall-clock seconds), so expiry is tested with a fake clock. A backend may raise anything: the
`ResponseCache` that owns it turns every failure into a miss, a warning and a counter.

* `MemoryBackend`: a `cachetools.LRUCache` bounded in bytes, and in entries; the least recently used
  entry goes first.
* `SQLiteBackend(path)`: one table in a WAL-mode file; survives restarts and is shared by the
  processes of one machine. Expired rows and the oldest rows past `max_entries` are pruned every
  64 writes.
* `RedisBackend(url=... | client=...)`: `SET ... PX ttl`; a semantic group is a sorted set of keys
  scored by expiry. Pass `client=` to reuse an existing `redis.Redis` connection.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Protocol, Tuple, TypeVar

from llmroute._runtime.forksafe import hold_at_fork, leave_inherited, renew_at_fork

if TYPE_CHECKING:
    import sqlite3

__all__ = ["Backend", "MemoryBackend", "SQLiteBackend", "RedisBackend"]

_T = TypeVar("_T")


class Backend(Protocol):
    name: str

    def get(self, namespace: str, key: str, now: float) -> bytes | None: ...
    def set(self, namespace: str, key: str, value: bytes, *, expires_at: float, now: float,
            group: str | None = None, record: bytes | None = None) -> None: ...
    def group(self, namespace: str, group: str, now: float, limit: int) -> List[Tuple[str, bytes]]: ...
    def clear(self, namespace: str | None = None) -> int: ...
    def stats(self, now: float) -> Dict[str, Any]: ...
    def close(self) -> None: ...


class MemoryBackend:
    name = "memory"

    def __init__(self, *, max_entries: int, max_bytes: int) -> None:
        from cachetools import LRUCache

        self.max_entries = max_entries
        self._lock = threading.Lock()
        renew_at_fork(self, "_lock")
        # value: (bytes, expires_at); the cache's size is the sum of the values' byte lengths
        self._lru: Any = LRUCache(maxsize=max_bytes, getsizeof=lambda v: len(v[0]) or 1)
        self._groups: Dict[Tuple[str, str], Dict[str, bytes]] = {}  # key -> index record

    def get(self, namespace: str, key: str, now: float) -> bytes | None:
        with self._lock:
            item: Tuple[bytes, float] | None = self._lru.get((namespace, key))
            if item is None:
                return None
            if item[1] <= now:
                del self._lru[(namespace, key)]
                return None
            return item[0]

    def set(self, namespace: str, key: str, value: bytes, *, expires_at: float, now: float,
            group: str | None = None, record: bytes | None = None) -> None:
        with self._lock:
            if len(value) > self._lru.maxsize:
                return
            self._lru[(namespace, key)] = (value, expires_at)
            while len(self._lru) > self.max_entries:
                self._lru.popitem()
            if group is not None and record is not None:
                self._groups.setdefault((namespace, group), {})[key] = record

    def group(self, namespace: str, group: str, now: float, limit: int) -> List[Tuple[str, bytes]]:
        from cachetools import Cache

        with self._lock:
            records = self._groups.get((namespace, group))
            if not records:
                return []
            out = []
            for key, record in list(records.items()):
                try:  # a peek: the base class's lookup does not reorder the LRU
                    item = Cache.__getitem__(self._lru, (namespace, key))
                except KeyError:
                    item = None
                if item is None or item[1] <= now:
                    del records[key]  # evicted or expired
                    continue
                out.append((key, record))
                if len(out) >= limit:
                    break
            return out

    def clear(self, namespace: str | None = None) -> int:
        with self._lock:
            if namespace is None:
                n = len(self._lru)
                self._lru.clear()
                self._groups.clear()
                return n
            doomed = [k for k in self._lru.keys() if k[0] == namespace]
            for k in doomed:
                del self._lru[k]
            for g in [g for g in self._groups if g[0] == namespace]:
                del self._groups[g]
            return len(doomed)

    def stats(self, now: float) -> Dict[str, Any]:
        with self._lock:
            return {"backend": self.name, "entries": len(self._lru), "bytes": self._lru.currsize,
                    "max_entries": self.max_entries, "max_bytes": self._lru.maxsize}

    def close(self) -> None:
        pass


_SQLITE_SCHEMA = """
CREATE TABLE IF NOT EXISTS cache_entries (
  ns TEXT NOT NULL, key TEXT NOT NULL, grp TEXT, value BLOB NOT NULL, record BLOB,
  expires_at REAL NOT NULL, created_at REAL NOT NULL, size INTEGER NOT NULL,
  PRIMARY KEY (ns, key)
);
CREATE INDEX IF NOT EXISTS cache_entries_grp ON cache_entries (ns, grp);
CREATE INDEX IF NOT EXISTS cache_entries_expires ON cache_entries (expires_at);
"""


class SQLiteBackend:
    name = "sqlite"
    PRUNE_EVERY = 64

    def __init__(self, path: "str | os.PathLike[str]", *, max_entries: int, max_bytes: int,
                 timeout_s: float = 1.0) -> None:
        self.path = Path(path)
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s
        self._conn: "sqlite3.Connection | None" = None
        self._lock = threading.Lock()
        self._writes = 0
        hold_at_fork(self, "_lock")  # no thread of ours is inside SQLite at a fork

    def _after_fork_in_child(self) -> None:
        leave_inherited(self._conn)  # the child opens its own connection
        self._conn = None

    def __repr__(self) -> str:
        return f"SQLiteBackend({str(self.path)!r})"

    def _db(self) -> sqlite3.Connection:
        import sqlite3

        if self._conn is None:
            if not self.path.parent.exists():
                self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(str(self.path), timeout=self.timeout_s, check_same_thread=False,
                                   isolation_level=None)
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.executescript(_SQLITE_SCHEMA)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def _reset(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None

    def _run(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        import sqlite3

        with self._lock:
            try:
                return fn(self._db())
            except sqlite3.DatabaseError:
                self._reset()  # reopen next time: the file may have been replaced or repaired
                raise

    def get(self, namespace: str, key: str, now: float) -> bytes | None:
        row = self._run(lambda db: db.execute(
            "SELECT value FROM cache_entries WHERE ns = ? AND key = ? AND expires_at > ?",
            (namespace, key, now)).fetchone())
        return None if row is None else bytes(row[0])

    def set(self, namespace: str, key: str, value: bytes, *, expires_at: float, now: float,
            group: str | None = None, record: bytes | None = None) -> None:
        def write(db: sqlite3.Connection) -> None:
            db.execute("INSERT OR REPLACE INTO cache_entries (ns, key, grp, value, record, expires_at, created_at, size) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                       (namespace, key, group, value, record, expires_at, now, len(value)))
            self._writes += 1
            if self._writes % self.PRUNE_EVERY == 0:
                self._prune(db, now)

        self._run(write)

    def _prune(self, db: sqlite3.Connection, now: float) -> None:
        db.execute("DELETE FROM cache_entries WHERE expires_at <= ?", (now,))
        count, size = db.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM cache_entries").fetchone()
        if count > self.max_entries or size > self.max_bytes:
            # Drop the oldest rows: a tenth past the bound, so pruning does not run on every write.
            keep = int(min(self.max_entries, count * self.max_bytes / max(size, 1)) * 0.9)
            db.execute("DELETE FROM cache_entries WHERE rowid IN (SELECT rowid FROM cache_entries "
                       "ORDER BY created_at LIMIT ?)", (max(0, count - keep),))

    def group(self, namespace: str, group: str, now: float, limit: int) -> List[Tuple[str, bytes]]:
        rows = self._run(lambda db: db.execute(
            "SELECT key, record FROM cache_entries WHERE ns = ? AND grp = ? AND expires_at > ? AND record IS NOT NULL "
            "ORDER BY created_at DESC LIMIT ?", (namespace, group, now, limit)).fetchall())
        return [(r[0], bytes(r[1])) for r in rows]

    def clear(self, namespace: str | None = None) -> int:
        if namespace is None:
            return self._run(lambda db: db.execute("DELETE FROM cache_entries").rowcount)
        return self._run(lambda db: db.execute("DELETE FROM cache_entries WHERE ns = ?", (namespace,)).rowcount)

    def stats(self, now: float) -> Dict[str, Any]:
        count, size, live = self._run(lambda db: db.execute(
            "SELECT COUNT(*), COALESCE(SUM(size), 0), COALESCE(SUM(expires_at > ?), 0) FROM cache_entries",
            (now,)).fetchone())
        return {"backend": self.name, "path": str(self.path), "entries": count, "live_entries": live,
                "bytes": size, "max_entries": self.max_entries, "max_bytes": self.max_bytes}

    def close(self) -> None:
        with self._lock:
            self._reset()


def _ns_id(namespace: str) -> str:
    return hashlib.sha256(namespace.encode()).hexdigest()[:16]


class RedisBackend:
    """Entries under `<prefix>:<namespace hash>:e:<key>`; a group's keys in the sorted set `...:g:<group>`
    (scored by expiry) and its index records in the hash `...:r:<group>`."""

    name = "redis"

    def __init__(self, *, url: str | None = None, client: Any = None, prefix: str = "llmroute:cache",
                 timeout_s: float = 0.25) -> None:
        if client is None and not url:
            raise ValueError("RedisBackend needs url= or client=")
        self.url = url
        self.prefix = prefix
        self.timeout_s = timeout_s
        self._client = client
        self._owns_client = client is None

    def __repr__(self) -> str:  # the URL may hold a password: show only the prefix
        return f"RedisBackend(prefix={self.prefix!r})"

    def _redis(self) -> Any:
        if self._client is None:
            import redis

            self._client = redis.Redis.from_url(self.url or "", socket_timeout=self.timeout_s,
                                                socket_connect_timeout=self.timeout_s, retry_on_timeout=False)
        return self._client

    def _entry_key(self, namespace: str, key: str) -> str:
        return f"{self.prefix}:{_ns_id(namespace)}:e:{key}"

    def _group_key(self, namespace: str, group: str) -> str:
        return f"{self.prefix}:{_ns_id(namespace)}:g:{group}"

    def get(self, namespace: str, key: str, now: float) -> bytes | None:
        value: bytes | None = self._redis().get(self._entry_key(namespace, key))
        return value

    def set(self, namespace: str, key: str, value: bytes, *, expires_at: float, now: float,
            group: str | None = None, record: bytes | None = None) -> None:
        ttl_ms = max(1, int((expires_at - now) * 1000))
        pipe = self._redis().pipeline(transaction=False)
        pipe.set(self._entry_key(namespace, key), value, px=ttl_ms)
        pipe.hset(f"{self.prefix}:namespaces", _ns_id(namespace), namespace)
        if group is not None and record is not None:
            gkey = self._group_key(namespace, group)
            rkey = gkey.replace(":g:", ":r:", 1)
            pipe.zadd(gkey, {key: expires_at})
            pipe.hset(rkey, key, record)
            for k in (gkey, rkey):
                pipe.pexpire(k, ttl_ms, gt=True)
                pipe.pexpire(k, ttl_ms, nx=True)
        pipe.execute()

    def group(self, namespace: str, group: str, now: float, limit: int) -> List[Tuple[str, bytes]]:
        r = self._redis()
        gkey = self._group_key(namespace, group)
        rkey = gkey.replace(":g:", ":r:", 1)
        expired = r.zrangebyscore(gkey, "-inf", now)
        if expired:
            pipe = r.pipeline(transaction=False)
            pipe.zrem(gkey, *expired)
            pipe.hdel(rkey, *expired)
            pipe.execute()
        keys = r.zrevrangebyscore(gkey, "+inf", f"({now}", start=0, num=limit)
        if not keys:
            return []
        records = r.hmget(rkey, keys)
        return [((k.decode() if isinstance(k, bytes) else k), v) for k, v in zip(keys, records) if v is not None]

    def _scan_delete(self, pattern: str) -> int:
        r = self._redis()
        n = 0
        batch: List[Any] = []
        for k in r.scan_iter(match=pattern, count=500):
            batch.append(k)
            if len(batch) >= 500:
                n += r.unlink(*batch)
                batch = []
        if batch:
            n += r.unlink(*batch)
        return n

    def clear(self, namespace: str | None = None) -> int:
        if namespace is None:
            return self._scan_delete(f"{self.prefix}:*")
        self._redis().hdel(f"{self.prefix}:namespaces", _ns_id(namespace))
        return self._scan_delete(f"{self.prefix}:{_ns_id(namespace)}:*")

    def stats(self, now: float) -> Dict[str, Any]:
        r = self._redis()
        entries = sum(1 for _ in r.scan_iter(match=f"{self.prefix}:*:e:*", count=1000))
        return {"backend": self.name, "prefix": self.prefix, "entries": entries,
                "namespaces": len(r.hkeys(f"{self.prefix}:namespaces"))}

    def close(self) -> None:
        if self._owns_client and self._client is not None:
            self._client.close()
            self._client = None
