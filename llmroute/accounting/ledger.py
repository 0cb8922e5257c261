"""The ledger: one record per attempt that may cost money, written off the request path.

Every attempt appends one `LedgerRecord`: successes, errors, streams (interrupted or not),
failed-over attempts and cancelled hedges alike, each with its own tokens and cost, so that spend is
never lost on some path (LESSONS.md 13). Records of one call share `request_id` and differ in
`attempt`.

Sinks share one small interface (`LedgerSink`): `write(record)` never blocks on I/O, `flush()`
writes what is buffered, `close()` flushes and releases the file.

* `SQLiteSink(path, flush_interval_s=1.0)`: the default. WAL mode, `synchronous=NORMAL` (a
  committed batch survives the process being killed; only power loss can take the last batch).
  A background thread (started on the first write, never at import) inserts the buffered records
  in one transaction every `flush_interval_s`. A clean interpreter exit flushes (`atexit`).
  **Bound:** a crash (SIGKILL, OOM) loses at most the records written since the last commit, i.e.
  those of the last flush interval (plus the batch being committed at that instant).
  A failed write (disk full, database locked past the 5 s busy timeout) keeps the batch and retries
  at the next interval.
* `JSONLSink(path, flush_interval_s=1.0)`: the same batching, one JSON object per line (Decimal as
  a string).
* `MemorySink()`: a list, for tests and notebooks.
* `CallableSink(fn)`: calls `fn(record)` on the caller's thread; keep it fast. Its exceptions are
  logged, never raised into the call.

SQLite schema (`schema_version` 1), queryable with plain SQL:

    CREATE TABLE ledger (
      id               INTEGER PRIMARY KEY AUTOINCREMENT,
      ts               REAL    NOT NULL,  -- unix seconds (UTC) when the attempt ended
      request_id       TEXT    NOT NULL,  -- one per call; attempts of a call share it
      attempt          INTEGER NOT NULL,  -- 1, 2, ... in the order they were started
      feature          TEXT,              -- the `feature=` of the call
      metadata         TEXT    NOT NULL,  -- JSON object (tenant, api key name, ...); json_extract() it
      tier             TEXT,
      pool             TEXT,
      provider         TEXT,              -- provider name in [providers]
      provider_kind    TEXT,              -- together, fireworks, siliconflow, bailian, vllm, ...
      deployment       TEXT,              -- "provider:model"
      model            TEXT,
      input_tokens     INTEGER NOT NULL,  -- prompt tokens, cached ones included
      output_tokens    INTEGER NOT NULL,  -- completion tokens, reasoning included
      cached_tokens    INTEGER NOT NULL,
      reasoning_tokens INTEGER NOT NULL,
      cost             TEXT,              -- exact decimal as text; NULL when unpriced (never 0)
      currency         TEXT,              -- USD | CNY; NULL when unpriced
      estimated        INTEGER NOT NULL,  -- 1: cost from estimated usage
      priced           INTEGER NOT NULL,  -- 0: no price was configured (pricing.strict = false)
      price_version    TEXT,
      status           TEXT    NOT NULL,  -- ok | error | cancelled | interrupted | abandoned
      error_type       TEXT,              -- llmroute error class name
      ttft_ms          REAL,
      latency_ms       REAL,
      router_score     REAL,              -- the router's score for this choice, when one routed it
      usage_estimated  INTEGER NOT NULL   -- 1: the platform sent no usage; tokens were counted locally
    );
    CREATE INDEX ledger_ts ON ledger (ts);
    CREATE INDEX ledger_request ON ledger (request_id);
    CREATE TABLE ledger_meta (key TEXT PRIMARY KEY, value TEXT);  -- schema_version

Example: `SELECT feature, currency, SUM(CAST(cost AS REAL)) FROM ledger WHERE ts > strftime('%s','now','-7 days') GROUP BY 1, 2;`
(`docs/ledger.md` has more.)

This module never writes on the request path (except `CallableSink`, by the user's choice), never
opens a file or starts a thread at import, and never raises a storage error into a call.
"""

from __future__ import annotations

import atexit
import json
import logging
import math
import os
import sqlite3
import threading
import weakref
from dataclasses import asdict, dataclass, field, fields
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable, Iterator, Literal, Mapping, Optional, Protocol

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "LedgerRecord",
    "LedgerSink",
    "SQLiteSink",
    "JSONLSink",
    "MemorySink",
    "CallableSink",
    "LedgerConfig",
    "open_sink",
    "read_records",
    "SCHEMA_VERSION",
    "COLUMNS",
]

log = logging.getLogger("llmroute.ledger")

SCHEMA_VERSION = 1
Status = Literal["ok", "error", "cancelled", "interrupted", "abandoned"]

# Keep the buffer bounded if storage stays broken: past this many unwritten records the oldest are
# dropped (and logged) rather than growing without limit.
MAX_BUFFERED_RECORDS = 1_000_000


@dataclass(frozen=True)
class LedgerRecord:
    """One attempt that may have cost money."""

    ts: float
    request_id: str
    attempt: int = 1
    feature: Optional[str] = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    tier: Optional[str] = None
    pool: Optional[str] = None
    provider: Optional[str] = None
    provider_kind: Optional[str] = None
    deployment: Optional[str] = None
    model: Optional[str] = None
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    cost: Optional[Decimal] = None
    currency: Optional[str] = None
    estimated: bool = False
    priced: bool = False
    price_version: Optional[str] = None
    status: Status = "ok"
    error_type: Optional[str] = None
    ttft_ms: Optional[float] = None
    latency_ms: Optional[float] = None
    router_score: Optional[float] = None
    usage_estimated: bool = False

    @classmethod
    def from_cost(cls, cost: Any, **kw: Any) -> "LedgerRecord":
        """A record whose token and money fields come from a `Cost` (see cost.py)."""
        return cls(
            input_tokens=cost.input_tokens,
            output_tokens=cost.output_tokens,
            cached_tokens=cost.cached_tokens,
            reasoning_tokens=cost.reasoning_tokens,
            cost=cost.amount,
            currency=cost.currency,
            estimated=cost.estimated,
            priced=cost.priced,
            price_version=cost.price_version,
            **kw,
        )

    def to_row(self) -> tuple[Any, ...]:
        """Values in `COLUMNS` order, as stored in SQLite."""
        out = []
        for name in COLUMNS:
            v = getattr(self, name)
            if name == "metadata":
                v = json.dumps(dict(v), sort_keys=True, ensure_ascii=False, default=str)
            elif name == "cost":
                v = None if v is None else str(v)
            elif isinstance(v, bool):
                v = int(v)
            out.append(v)
        return tuple(out)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "LedgerRecord":
        """Inverse of `to_row` / `to_json`: accepts a SQLite row mapping or a parsed JSON line."""
        kw: dict[str, Any] = {}
        present = set(row.keys())
        for name in COLUMNS:
            if name not in present:
                continue
            v = row[name]
            if name == "metadata":
                v = json.loads(v) if isinstance(v, str) else dict(v or {})
            elif name == "cost":
                v = None if v is None else Decimal(str(v))
            elif name in _BOOL_COLUMNS:
                v = bool(v)
            kw[name] = v
        return cls(**kw)

    def to_json(self) -> str:
        d = asdict(self)
        d["cost"] = None if self.cost is None else str(self.cost)
        d["metadata"] = dict(self.metadata)
        return json.dumps(d, ensure_ascii=False, default=str, separators=(",", ":"))


COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(LedgerRecord))
_BOOL_COLUMNS = frozenset({"estimated", "priced", "usage_estimated"})
_SQL_TYPES = {
    "ts": "REAL NOT NULL",
    "request_id": "TEXT NOT NULL",
    "attempt": "INTEGER NOT NULL",
    "metadata": "TEXT NOT NULL",
    "input_tokens": "INTEGER NOT NULL",
    "output_tokens": "INTEGER NOT NULL",
    "cached_tokens": "INTEGER NOT NULL",
    "reasoning_tokens": "INTEGER NOT NULL",
    "estimated": "INTEGER NOT NULL",
    "priced": "INTEGER NOT NULL",
    "usage_estimated": "INTEGER NOT NULL",
    "status": "TEXT NOT NULL",
    "ttft_ms": "REAL",
    "latency_ms": "REAL",
    "router_score": "REAL",
}
SCHEMA_SQL = (
    "CREATE TABLE IF NOT EXISTS ledger (id INTEGER PRIMARY KEY AUTOINCREMENT, "
    + ", ".join(f"{c} {_SQL_TYPES.get(c, 'TEXT')}" for c in COLUMNS)
    + ");\n"
    "CREATE INDEX IF NOT EXISTS ledger_ts ON ledger (ts);\n"
    "CREATE INDEX IF NOT EXISTS ledger_request ON ledger (request_id);\n"
    "CREATE TABLE IF NOT EXISTS ledger_meta (key TEXT PRIMARY KEY, value TEXT);\n"
)
_INSERT_SQL = f"INSERT INTO ledger ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"


class LedgerSink(Protocol):
    def write(self, record: LedgerRecord) -> None: ...
    def flush(self) -> None: ...
    def close(self) -> None: ...


# Sinks with a buffer still open at interpreter exit get flushed then. A WeakSet, so a sink the
# program dropped is not kept alive by this registry.
_open_sinks: "weakref.WeakSet[_BatchingSink]" = weakref.WeakSet()
_atexit_lock = threading.Lock()
_atexit_registered = False


def _close_open_sinks() -> None:
    for sink in list(_open_sinks):
        try:
            sink.close()
        except Exception:  # noqa: BLE001 - exit must go on
            log.exception("ledger: flush at exit failed for %r", sink)


# What forked children inherited from their parent's sinks: held, never closed in the child.
_inherited_io: list[Any] = []


def _sinks_after_fork_in_child() -> None:
    for sink in list(_open_sinks):
        sink._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_sinks_after_fork_in_child)


def _register_for_exit(sink: "_BatchingSink") -> None:
    global _atexit_registered
    with _atexit_lock:
        if not _atexit_registered:
            atexit.register(_close_open_sinks)
            _atexit_registered = True
    _open_sinks.add(sink)


class _BatchingSink:
    """Buffer records; a daemon thread writes them every `flush_interval_s`."""

    def __init__(self, flush_interval_s: float = 1.0) -> None:
        if not (flush_interval_s > 0 and math.isfinite(flush_interval_s)):
            raise ValueError(f"flush_interval_s must be > 0, got {flush_interval_s!r}")
        self.flush_interval_s = float(flush_interval_s)
        self._buffer: list[LedgerRecord] = []
        self._lock = threading.Lock()  # guards _buffer and the thread handle
        self._io_lock = threading.Lock()  # one writer at a time, batches in order
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.records_written = 0
        self.write_errors = 0

    # --- interface -------------------------------------------------------------------------
    def write(self, record: LedgerRecord) -> None:
        with self._lock:
            self._buffer.append(record)
            if len(self._buffer) > MAX_BUFFERED_RECORDS:
                dropped = len(self._buffer) - MAX_BUFFERED_RECORDS
                del self._buffer[:dropped]
                log.error("ledger: storage failing; dropped %d oldest unwritten records", dropped)
            if self._stopping:
                closed = True
            else:
                closed = False
                if self._thread is None:
                    self._start()
        if closed:
            # Written after close (e.g. a late thread during shutdown): write it now.
            self.flush()

    def flush(self) -> None:
        with self._io_lock:
            with self._lock:
                batch, self._buffer = self._buffer, []
            if not batch:
                return
            try:
                self._write_batch(batch)
                self.records_written += len(batch)
            except Exception:  # noqa: BLE001 - storage errors never reach a call
                self.write_errors += 1
                log.exception("ledger: writing %d records failed; will retry", len(batch))
                with self._lock:
                    self._buffer[:0] = batch

    def close(self) -> None:
        with self._lock:
            self._stopping = True
            thread, self._thread = self._thread, None
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=30)
        self.flush()
        with self._io_lock:
            self._close_io()
        _open_sinks.discard(self)

    def __enter__(self) -> "_BatchingSink":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # --- internals -------------------------------------------------------------------------
    def _start(self) -> None:
        _register_for_exit(self)
        self._thread = threading.Thread(target=self._run, name=f"llmroute-ledger-{type(self).__name__}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            self._wake.wait(self.flush_interval_s)
            if self._stopping:
                return  # close() does the final flush
            self.flush()

    def _after_fork_in_child(self) -> None:
        """A forked child: the parent's writer thread does not exist here, its locks may have been held
        at the fork, and the records it buffered are the parent's to write. Start afresh (the next
        write starts this process's own thread); the parent's open file or connection is left alone."""
        self._lock = threading.Lock()
        self._io_lock = threading.Lock()
        self._wake = threading.Event()
        self._buffer = []
        self._thread = None
        for name in ("_conn", "_file"):
            if getattr(self, name, None) is not None:
                _inherited_io.append(getattr(self, name))
                setattr(self, name, None)

    def _write_batch(self, batch: list[LedgerRecord]) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _close_io(self) -> None:
        pass


class SQLiteSink(_BatchingSink):
    """The default sink: a SQLite file in WAL mode, written in batches by a background thread."""

    def __init__(self, path: str | os.PathLike[str], flush_interval_s: float = 1.0) -> None:
        super().__init__(flush_interval_s)
        self.path = Path(path)
        self._conn: sqlite3.Connection | None = None

    def __repr__(self) -> str:
        return f"SQLiteSink({str(self.path)!r}, flush_interval_s={self.flush_interval_s})"

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            if self.path.parent and not self.path.parent.exists():
                self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(str(self.path), timeout=5.0, check_same_thread=False, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.executescript(SCHEMA_SQL)
            conn.execute(
                "INSERT OR IGNORE INTO ledger_meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
            )
            self._conn = conn
        return self._conn

    def _write_batch(self, batch: list[LedgerRecord]) -> None:
        conn = self._connect()
        rows = [r.to_row() for r in batch]
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany(_INSERT_SQL, rows)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _close_io(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class JSONLSink(_BatchingSink):
    """One JSON object per line, appended in batches by a background thread."""

    def __init__(self, path: str | os.PathLike[str], flush_interval_s: float = 1.0) -> None:
        super().__init__(flush_interval_s)
        self.path = Path(path)
        self._file: Any = None

    def __repr__(self) -> str:
        return f"JSONLSink({str(self.path)!r}, flush_interval_s={self.flush_interval_s})"

    def _write_batch(self, batch: list[LedgerRecord]) -> None:
        if self._file is None:
            if self.path.parent and not self.path.parent.exists():
                self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "a", encoding="utf-8")
        self._file.write("".join(r.to_json() + "\n" for r in batch))
        self._file.flush()

    def _close_io(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class MemorySink:
    """Keeps records in a list (`.records`); for tests and notebooks."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.records: list[LedgerRecord] = []

    def write(self, record: LedgerRecord) -> None:
        with self._lock:
            self.records.append(record)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


class CallableSink:
    """Calls `fn(record)` for each record, on the caller's thread. Exceptions are logged, not raised."""

    def __init__(self, fn: Callable[[LedgerRecord], Any]) -> None:
        if not callable(fn):
            raise TypeError(f"CallableSink needs a callable, got {type(fn).__name__}")
        self.fn = fn
        self.errors = 0

    def write(self, record: LedgerRecord) -> None:
        try:
            self.fn(record)
        except Exception:  # noqa: BLE001 - a user's sink must not break a call
            self.errors += 1
            log.exception("ledger: the callable sink raised")

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


class LedgerConfig(BaseModel):
    """The `[ledger]` section."""

    model_config = ConfigDict(extra="forbid")

    # sqlite: a database file; jsonl: a text file; memory: kept in the process; none: no ledger.
    sink: Literal["sqlite", "jsonl", "memory", "none"] = "sqlite"
    path: str = "llmroute-ledger.db"
    # A crash loses at most the records of the last interval.
    flush_interval_s: float = Field(default=1.0, gt=0, le=3600)


def open_sink(config: LedgerConfig, *, base_dir: str | os.PathLike[str] | None = None) -> LedgerSink | None:
    """The sink a `[ledger]` section asks for. Relative paths resolve against `base_dir` (the config
    file's folder, if the caller wants that) or the working directory. Opens nothing yet: the file
    is created on the first flush."""
    if config.sink == "none":
        return None
    if config.sink == "memory":
        return MemorySink()
    path = Path(config.path).expanduser()
    if base_dir is not None and not path.is_absolute():
        path = Path(base_dir) / path
    if config.sink == "jsonl":
        return JSONLSink(path, config.flush_interval_s)
    return SQLiteSink(path, config.flush_interval_s)


def _is_sqlite(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


def read_records(
    path: str | os.PathLike[str], *, since: float | None = None, until: float | None = None
) -> Iterator[LedgerRecord]:
    """Records in a ledger file (SQLite or JSONL, told apart by content), oldest first.

    `since` <= ts < `until` (unix seconds) when given. Raises FileNotFoundError for a missing file
    and ValueError for a file that is neither format.
    """
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"no ledger at {p}")
    if _is_sqlite(p):
        yield from _read_sqlite(p, since, until)
        return
    with open(p, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = LedgerRecord.from_row(json.loads(line))
            except (ValueError, TypeError) as e:
                # A crash can cut the last line short; anything else is not a ledger.
                if f.readline() == "":
                    log.warning("ledger %s: ignoring a truncated last line %d", p, n)
                    return
                raise ValueError(f"{p}:{n}: not a ledger record ({e})") from None
            if (since is None or rec.ts >= since) and (until is None or rec.ts < until):
                yield rec


def _read_sqlite(p: Path, since: float | None, until: float | None) -> Iterator[LedgerRecord]:
    conn = sqlite3.connect(f"file:{p}?mode=ro", uri=True, timeout=5.0)
    try:
        conn.row_factory = sqlite3.Row
        have = {row[1] for row in conn.execute("PRAGMA table_info(ledger)")}
        if not have:
            raise ValueError(f"{p}: a SQLite file with no `ledger` table")
        cols = [c for c in COLUMNS if c in have]
        where, args = [], []
        if since is not None:
            where.append("ts >= ?")
            args.append(since)
        if until is not None:
            where.append("ts < ?")
            args.append(until)
        sql = f"SELECT {', '.join(cols)} FROM ledger"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY ts, id"
        for row in conn.execute(sql, args):
            yield LedgerRecord.from_row(row)
    finally:
        conn.close()
