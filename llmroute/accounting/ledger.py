"""The ledger: one record per attempt that may cost money, written off the request path.

Every attempt appends one `LedgerRecord`: successes, errors, streams (interrupted or not),
failed-over attempts and cancelled hedges alike, each with its own tokens and cost, so that spend is
never lost on some path (docs/platforms.md §12.13). Records of one call share `request_id` and differ in
`attempt`.

Sinks share one small interface (`LedgerSink`): `write(record)` never blocks on I/O, `flush()`
writes what is buffered, `close()` flushes and releases the file.

* `SQLiteSink(path, flush_interval_s=1.0)`: the default. WAL mode, `synchronous=NORMAL` (a
  committed batch survives the process being killed; only power loss can take the last batch).
  A background thread (started on the first write, never at import) inserts the buffered records
  in one transaction every `flush_interval_s`. A clean interpreter exit flushes (`atexit`), waiting
  at most `EXIT_WAIT_S` for a write in progress; at exit no thread is started or joined, and a record
  written then (by a finaliser) is written in place.
  **Bound:** a crash (SIGKILL, OOM) loses at most the records written since the last commit, i.e.
  those of the last flush interval (plus the batch being committed at that instant).
  A failed write (disk full, database locked past the 5 s busy timeout) keeps the batch and retries
  at the next interval.
* `JSONLSink(path, flush_interval_s=1.0)`: the same batching, one JSON object per line (Decimal as
  a string).
* `MemorySink()`: a list, for tests and notebooks.
* `CallableSink(fn)`: calls `fn(record)` on the caller's thread; keep it fast. Its exceptions are
  logged, never raised into the call.

SQLite schema (`schema_version` 2), queryable with plain SQL:

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
      cost             TEXT,              -- exact decimal as text; NULL when unpriced (0 only for a cache hit)
      currency         TEXT,              -- USD | CNY; NULL when unpriced
      estimated        INTEGER NOT NULL,  -- 1: cost from estimated usage
      priced           INTEGER NOT NULL,  -- 0: no price was configured (pricing.strict = false)
      price_version    TEXT,
      status           TEXT    NOT NULL,  -- ok | error | cancelled | interrupted | abandoned
      error_type       TEXT,              -- llmroute error class name
      ttft_ms          REAL,
      latency_ms       REAL,
      router_score     REAL,              -- the router's score for this choice, when one routed it
      usage_estimated  INTEGER NOT NULL,  -- 1: the platform sent no usage; tokens were counted locally
      cache            TEXT,              -- hit | semantic-hit | miss | bypass; NULL: the cache was not in play
      cost_saved       TEXT,              -- a cache hit: what the cached answer cost when it was made
      recovery         TEXT,              -- continued | replayed | restarted: how this attempt took up a cut answer
      queued_ms        REAL,              -- time the call waited for a free deployment (client-side queue)
      cache_write_tokens INTEGER,         -- prompt tokens written to an explicit context cache (in input_tokens)
      price_detail     TEXT               -- tier>N, thinking, cache-write, explicit-cache: the rates used beyond the plain ones
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
import sys
import threading
import time
import weakref
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Literal, Mapping, Protocol

from pydantic import ConfigDict, Field, model_validator
from llmroute._runtime.config_model import ConfigModel
from llmroute.errors import ConfigError
from llmroute._runtime.forksafe import hold_at_fork, leave_inherited, renew_at_fork, renew_module_locks
from llmroute._runtime.lifecycle import start_daemon
from llmroute._runtime.secrets import scrub

from llmroute.accounting.cost_value import Cost
from llmroute.accounting.frozen import Fill

if TYPE_CHECKING:
    import sqlite3  # loaded by the first SQLite ledger opened or read: a memory ledger never needs it

__all__ = [
    "LedgerRecord",
    "LedgerSink",
    "SQLiteSink",
    "JSONLSink",
    "MemorySink",
    "CallableSink",
    "LedgerConfig",
    "LedgerHealth",
    "check_ledger_path",
    "read_file_records",
    "SCHEMA_VERSION",
    "COLUMNS",
    "PROBE_METADATA_KEY",
    "is_probe",
    "SHADOW_METADATA_KEY",
    "is_shadow",
]

log = logging.getLogger("llmroute.ledger")

SCHEMA_VERSION = 3  # 2: cache, cost_saved; 3: recovery (later columns are added by presence: queued_ms, cache_write_tokens, price_detail)
Status = Literal["ok", "error", "cancelled", "interrupted", "abandoned"]

# Keep the spool bounded if storage stays broken: past this many unwritten records the oldest are
# dropped, counted in `lost` and logged at ERROR with the count, rather than growing without limit.
# A record is about 1 KB in memory, so the default bound is about 100 MB.
MAX_BUFFERED_RECORDS = 100_000
# On close, a failing write is tried this many times (with a short pause) before the spool is lost.
CLOSE_ATTEMPTS = 3
CLOSE_RETRY_PAUSE_S = 0.2
# At interpreter exit a sink waits at most this long for its writer (a write stuck on a locked or
# unreachable store): the process always ends; what could not be written is counted lost and logged.
EXIT_WAIT_S = 5.0


@dataclass(frozen=True)
class LedgerHealth:
    """What a sink has done with its records: written, still waiting in the spool, lost for good."""

    sink: str
    written: int = 0
    waiting: int = 0
    lost: int = 0
    write_errors: int = 0
    last_error: str | None = None  # the last storage error, scrubbed; None once a write succeeds

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

# Calls llmroute makes to check a deployment (`llmroute health`, `llmroute bench smoke`) carry this
# metadata key (value: which tool): they are paid, so they are recorded, but reports leave them out
# by default and they are attributed to no feature.
PROBE_METADATA_KEY = "llmroute_probe"


def is_probe(record: "LedgerRecord") -> bool:
    return PROBE_METADATA_KEY in (record.metadata or {})


# The metadata mark of shadow comparisons' calls (`[routing.shadow]`, llmroute/routing/shadow.py):
# reports leave them out of cost totals unless asked.
SHADOW_METADATA_KEY = "shadow"


def is_shadow(record: "LedgerRecord") -> bool:
    return (record.metadata or {}).get(SHADOW_METADATA_KEY) == "1"



@dataclass(frozen=True)
class LedgerRecord:
    """One attempt that may have cost money."""

    ts: float
    request_id: str
    attempt: int = 1
    feature: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    tier: str | None = None
    pool: str | None = None
    provider: str | None = None
    provider_kind: str | None = None
    deployment: str | None = None
    model: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    cost: Decimal | None = None
    currency: str | None = None
    estimated: bool = False
    priced: bool = False
    price_version: str | None = None
    status: Status = "ok"
    error_type: str | None = None
    ttft_ms: float | None = None
    latency_ms: float | None = None
    router_score: float | None = None
    usage_estimated: bool = False
    cache: str | None = None
    cost_saved: Decimal | None = None
    recovery: str | None = None  # continued | replayed | restarted (types.Attempt.recovery)
    queued_ms: float | None = None  # the call's wait in the client-side queue (every deployment full)
    cache_write_tokens: int = 0
    price_detail: str | None = None

    @classmethod
    def from_cost(cls, cost: Cost, **kw: Any) -> "LedgerRecord":
        """A record whose token and money fields come from a `Cost` (see cost.py). Made in one step
        (`frozen.Fill`: the request path makes one per attempt), as `LedgerRecord(...)` would."""
        kw.update(
            input_tokens=cost.input_tokens,
            output_tokens=cost.output_tokens,
            cached_tokens=cost.cached_tokens,
            reasoning_tokens=cost.reasoning_tokens,
            cost=cost.amount,
            currency=cost.currency,
            estimated=cost.estimated,
            priced=cost.priced,
            price_version=cost.price_version,
            cache_write_tokens=cost.cache_write_tokens,
            price_detail=cost.price_detail,
        )
        return _FILL_RECORD.make(kw)

    def to_row(self) -> tuple[Any, ...]:
        """Values in `COLUMNS` order, as stored in SQLite."""
        out = []
        for name in COLUMNS:
            v = getattr(self, name)
            if name == "metadata":
                v = json.dumps(dict(v), sort_keys=True, ensure_ascii=False, default=str)
            elif name in _DECIMAL_COLUMNS:
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
            elif name in _DECIMAL_COLUMNS:
                v = None if v is None else Decimal(str(v))
            elif name in _BOOL_COLUMNS:
                v = bool(v)
            kw[name] = v
        return cls(**kw)

    def to_json(self) -> str:
        d = asdict(self)
        for name in _DECIMAL_COLUMNS:
            d[name] = None if d[name] is None else str(d[name])
        d["metadata"] = dict(self.metadata)
        return json.dumps(d, ensure_ascii=False, default=str, separators=(",", ":"))


_FILL_RECORD = Fill(LedgerRecord)


COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(LedgerRecord))
_BOOL_COLUMNS = frozenset({"estimated", "priced", "usage_estimated"})
_DECIMAL_COLUMNS = frozenset({"cost", "cost_saved"})
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
    "queued_ms": "REAL",
    "cache_write_tokens": "INTEGER",
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
    def flush(self) -> object: ...  # what it returns (the batching sinks: whether all was written) is not used
    def close(self) -> None: ...


# Sinks with a buffer still open at interpreter exit get flushed then. A WeakSet, so a sink the
# program dropped is not kept alive by this registry.
_open_sinks: "weakref.WeakSet[_BatchingSink]" = weakref.WeakSet()
_atexit_lock = threading.Lock()
renew_module_locks(__name__, "_atexit_lock")
_atexit_registered = False
_exiting = False  # the exit hook ran: no writer thread starts after it; records are written in place


def shutting_down() -> bool:
    """Is the interpreter exiting? Then no thread may be started or waited for (a thread started
    during finalisation never runs, and `start()` waits for it forever)."""
    return _exiting or sys.is_finalizing()


@contextmanager
def _acquired(lock: Any, timeout_s: float | None) -> Iterator[bool]:
    """`with lock`, waiting at most `timeout_s` (None: for ever); yields whether it was taken."""
    held = lock.acquire(timeout=-1 if timeout_s is None else timeout_s)
    try:
        yield held
    finally:
        if held:
            lock.release()


def _close_open_sinks() -> None:
    global _exiting
    _exiting = True
    for sink in list(_open_sinks):
        try:
            sink.close()
        except Exception:  # noqa: BLE001 - exit must go on
            log.exception("ledger: flush at exit failed for %r", sink)


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
        self.max_spool = MAX_BUFFERED_RECORDS
        self.records_written = 0
        self.write_errors = 0
        self.records_lost = 0
        self.last_error: str | None = None
        self._failing = False  # a failure streak is on: logged once when it starts, once when it ends
        self._overflow_logged = False
        self._lost_reported = 0
        self._in_flight = 0  # records taken from the spool by a write that has not finished
        renew_at_fork(self, "_lock", "_wake")
        hold_at_fork(self, "_io_lock")  # no batch is being written (into SQLite) at a fork
        # Registered now, not at the first write: the exit hook that ends streams still open (registered
        # later, run earlier) writes their rows before this one flushes and closes the sink.
        _register_for_exit(self)

    # --- interface -------------------------------------------------------------------------
    def health(self) -> LedgerHealth:
        with self._lock:
            waiting = len(self._buffer) + self._in_flight
        return LedgerHealth(sink=repr(self), written=self.records_written, waiting=waiting, lost=self.records_lost,
                            write_errors=self.write_errors, last_error=self.last_error)

    def write(self, record: LedgerRecord) -> None:
        dropped = 0
        with self._lock:
            self._buffer.append(record)
            if len(self._buffer) > self.max_spool:
                dropped = len(self._buffer) - self.max_spool
                del self._buffer[:dropped]
                self.records_lost += dropped
            if self._stopping or shutting_down():
                closed = True  # no writer thread now: written in place below, within a bounded wait
            else:
                closed = False
                if self._thread is None:
                    closed = not self._start()  # no thread at exit: written in place below
        if dropped and not self._overflow_logged:  # once per flush interval; flush() reports the totals
            self._overflow_logged = True
            log.error("ledger %r: storage failing and the spool is full (%d records): the oldest unwritten "
                      "records are being lost (%d so far)", self, self.max_spool, self.records_lost)
        if closed:
            # Written after close or at interpreter exit (a stream finalised then): write it now,
            # waiting at most EXIT_WAIT_S for a writer that holds the store.
            if not self.flush(timeout_s=EXIT_WAIT_S):
                self._write_at_exit()

    def _write_at_exit(self) -> None:
        """The store could not take the spool at exit: a sink with a local spool of its own puts it
        there (`PostgresSink`); others leave it to be counted lost by `close()`."""

    def flush(self, timeout_s: float | None = None) -> bool:
        """Write the spool; True if it is empty afterwards. A failure keeps the records for the next try.
        `timeout_s`: wait at most that long for a write in progress (False when it did not end)."""
        with _acquired(self._io_lock, timeout_s) as held:
            if not held:
                return False
            with self._lock:
                batch, self._buffer = self._buffer, []
                self._in_flight = len(batch)  # still waiting, as far as health() is concerned
            if not batch:
                return True
            try:
                self._write_batch(batch)
            except Exception as exc:  # noqa: BLE001 - storage errors never reach a call

                self.write_errors += 1
                self.last_error = scrub(f"{type(exc).__name__}: {exc}")
                with self._lock:
                    self._in_flight = 0
                    self._buffer[:0] = batch
                    overflow = max(0, len(self._buffer) - self.max_spool)
                    del self._buffer[:overflow]
                    self.records_lost += overflow
                    waiting = len(self._buffer)
                if not self._failing or self.records_lost > self._lost_reported:
                    log.error("ledger %r: writing %d record(s) failed (%s); %d waiting in the spool, %d lost; "
                              "retrying every %gs", self, len(batch), self.last_error, waiting, self.records_lost,
                              self.flush_interval_s)
                    self._lost_reported = self.records_lost
                self._failing = True
                self._overflow_logged = False
                return False
            with self._lock:
                self.records_written += len(batch)
                self._in_flight = 0
            self.last_error = None
            if self._failing:
                self._failing = False
                log.warning("ledger %r: storage works again; wrote %d spooled record(s)", self, len(batch))
            with self._lock:
                return not self._buffer

    def close(self) -> None:
        with self._lock:
            self._stopping = True
            thread, self._thread = self._thread, None
        self._wake.set()
        exiting = shutting_down()
        # During finalisation a daemon thread never runs again: joining it would wait in vain.
        if thread is not None and thread is not threading.current_thread() and not sys.is_finalizing():
            thread.join(timeout=EXIT_WAIT_S if exiting else 30)
        for attempt in range(CLOSE_ATTEMPTS):
            if self.flush(timeout_s=EXIT_WAIT_S if exiting else None):
                break
            if exiting:
                self._write_at_exit()
                break
            if attempt + 1 < CLOSE_ATTEMPTS:
                time.sleep(CLOSE_RETRY_PAUSE_S)
        with self._lock:
            lost, self._buffer = len(self._buffer), []
            self.records_lost += lost
        if lost:
            log.error("ledger %r: closing with storage still failing (%s); %d record(s) lost",
                      self, self.last_error, lost)
        with _acquired(self._io_lock, EXIT_WAIT_S if exiting else None) as held:
            if held:
                self._close_io()
        _open_sinks.discard(self)

    def __enter__(self) -> "_BatchingSink":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # --- internals -------------------------------------------------------------------------
    def _start(self) -> bool:
        """Start the writer thread (False: the interpreter is exiting, no thread may start)."""
        _register_for_exit(self)
        self._thread = start_daemon(self._run, f"llmroute-ledger-{type(self).__name__}")
        return self._thread is not None

    def _run(self) -> None:
        while True:
            self._wake.wait(self.flush_interval_s)
            if self._stopping:
                return  # close() does the final flush
            self.flush()

    def _after_fork_in_child(self) -> None:
        """A forked child (its locks are new: `forksafe`): the parent's writer thread does not exist
        here and the records it buffered are the parent's to write. Start afresh (the next write
        starts this process's own thread); the parent's open file or connection is left alone."""
        self._buffer = []
        self._in_flight = 0
        self._thread = None
        for name in ("_conn", "_file"):
            if getattr(self, name, None) is not None:
                leave_inherited(getattr(self, name))
                setattr(self, name, None)

    def _write_batch(self, batch: list[LedgerRecord]) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _close_io(self) -> None:
        pass


def _add_missing_columns(conn: sqlite3.Connection) -> None:
    """Migration: a ledger written by an older version gets the columns added since (NULL in old rows)."""
    have = {row[1] for row in conn.execute("PRAGMA table_info(ledger)")}
    for name in COLUMNS:
        if name not in have:
            conn.execute(f"ALTER TABLE ledger ADD COLUMN {name} {_SQL_TYPES.get(name, 'TEXT').replace(' NOT NULL', '')}")
    conn.execute("INSERT OR REPLACE INTO ledger_meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))


class SQLiteSink(_BatchingSink):
    """The default sink: a SQLite file in WAL mode, written in batches by a background thread."""

    def __init__(self, path: str | os.PathLike[str], flush_interval_s: float = 1.0) -> None:
        super().__init__(flush_interval_s)
        # The driver loads with the sink, never at its first write: that may come at interpreter exit (the last
        # batch of a client closed by the garbage collector), when a module can no longer be imported.
        import sqlite3  # noqa: F401
        self.path = Path(path)
        self._conn: sqlite3.Connection | None = None

    def __repr__(self) -> str:
        return f"SQLiteSink({str(self.path)!r}, flush_interval_s={self.flush_interval_s})"

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = open_wal_sqlite(self.path)
            conn.executescript(SCHEMA_SQL)
            _add_missing_columns(conn)
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
            if conn.in_transaction:  # a full disk makes SQLite roll back by itself
                conn.execute("ROLLBACK")
            raise

    def _close_io(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def open_wal_sqlite(path: Path) -> sqlite3.Connection:
    """A SQLite file for a background writer: its folder created, WAL, synchronous=NORMAL (a committed
    batch survives a killed process), autocommit (the writer opens its own transactions)."""
    if path.parent and not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
    import sqlite3  # loaded when the sink was built (SQLiteSink, the PostgreSQL spool): a memory ledger never does

    conn = sqlite3.connect(str(path), timeout=5.0, check_same_thread=False, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


class JSONLSink(_BatchingSink):
    """One JSON object per line, appended in batches by a background thread."""

    def __init__(self, path: str | os.PathLike[str], flush_interval_s: float = 1.0) -> None:
        super().__init__(flush_interval_s)
        self.path = Path(path)
        self._file: Any = None

    def __repr__(self) -> str:
        return f"JSONLSink({str(self.path)!r}, flush_interval_s={self.flush_interval_s})"

    def _write_batch(self, batch: list[LedgerRecord]) -> None:
        # Whole lines or nothing: the batch goes down in one os.write of an unbuffered file; if that
        # fails part-way (disk full), the file is cut back to where the batch began, so a retry never
        # leaves a torn line or a duplicate behind. A torn tail from a crash is ended with a newline
        # before anything is appended, so it stays a line of its own that readers skip.
        if self._file is None:
            if self.path.parent and not self.path.parent.exists():
                self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "ab", buffering=0)
            size = self._file.seek(0, os.SEEK_END)
            if size:
                with open(self.path, "rb") as f:
                    f.seek(size - 1)
                    if f.read(1) != b"\n":
                        self._file.write(b"\n")
        data = "".join(r.to_json() + "\n" for r in batch).encode("utf-8")
        start = self._file.seek(0, os.SEEK_END)
        try:
            view = memoryview(data)
            while view:
                n = self._file.write(view)
                view = view[n:]
        except BaseException:
            try:
                os.ftruncate(self._file.fileno(), start)
            except OSError:
                # Cannot cut it back: leave a newline so the torn piece stays a line of its own.
                self._close_io()
            raise

    def _close_io(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass
            self._file = None


class MemorySink:
    """Keeps records in a list (`.records`); for tests and notebooks."""

    def health(self) -> LedgerHealth:
        return LedgerHealth(sink="MemorySink()", written=len(self.records))

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.records: list[LedgerRecord] = []
        self.feedback: list[Any]  # feedback.FeedbackRecord, appended by feedback.py (set on the first one)
        renew_at_fork(self, "_lock")

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
        self.written = 0

    def write(self, record: LedgerRecord) -> None:
        try:
            self.fn(record)
        except Exception:  # noqa: BLE001 - a user's sink must not break a call
            self.errors += 1
            log.exception("ledger: the callable sink raised; the record is lost (%d lost in all)", self.errors)
            return
        self.written += 1

    def health(self) -> LedgerHealth:
        return LedgerHealth(sink=f"CallableSink({getattr(self.fn, '__name__', 'fn')})", written=self.written,
                            lost=self.errors, write_errors=self.errors)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


class LedgerConfig(ConfigModel):
    """The `[ledger]` section."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    # sqlite: a database file; jsonl: a text file; memory: kept in the process; none: no ledger;
    # postgres: a shared PostgreSQL database at `url` (ledger_postgres.py), spooling to `spool_path`.
    sink: Literal["sqlite", "jsonl", "memory", "none", "postgres"] = "sqlite"
    path: str = "llmroute-ledger.db"
    url: str | None = None  # postgres only; ${VAR} is expanded at load
    spool_path: str = "llmroute-spool.db"
    # A crash loses at most the records of the last interval.
    flush_interval_s: float = Field(default=1.0, gt=0, le=3600)
    # Records kept in memory while storage fails (retried every interval); past it the oldest are lost.
    max_spool_records: int = Field(default=MAX_BUFFERED_RECORDS, ge=1, le=10_000_000)

    @model_validator(mode="after")
    def _postgres_url(self) -> "LedgerConfig":
        if self.sink == "postgres" and not (self.url or "").startswith(("postgresql://", "postgres://", "${")):
            raise ValueError('sink = "postgres" needs url = "postgresql://user@host:port/database"')
        return self


def check_ledger_path(config: LedgerConfig, base_dir: str | os.PathLike[str] | None) -> None:
    """Refuse, at load, a ledger path that cannot be written: a folder, a read-only place, a file of
    another format. Raises ConfigError naming `ledger.path`; touches nothing."""
    if config.sink not in ("sqlite", "jsonl"):
        return
    path = resolve_path(config.path, base_dir)
    key = "ledger.path"
    if path.is_dir():
        raise ConfigError(f"{path} is a directory; give a file name", key=key)
    if path.exists():
        if not os.access(path, os.W_OK):
            raise ConfigError(f"{path} is not writable", key=key)
        if config.sink == "sqlite" and path.stat().st_size and not _is_sqlite(path):
            raise ConfigError(f"{path} exists and is not a SQLite database", key=key)
        if config.sink == "jsonl" and _is_sqlite(path):
            raise ConfigError(f"{path} is a SQLite database, not a JSONL file", key=key)
        return
    parent = path.parent
    while not parent.exists():  # the sink creates missing folders: the first existing one must be writable
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError(f"{parent} is not a directory, so {path} cannot be created", key=key)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"cannot create {path}: {parent} is not writable", key=key)


def resolve_path(path: str, base_dir: str | os.PathLike[str] | None) -> Path:
    out = Path(path).expanduser()
    if base_dir is not None and not out.is_absolute():
        out = Path(base_dir) / out
    return out


def _is_sqlite(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


def read_file_records(
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
    yield from _read_jsonl(p, since, until)


def _read_jsonl(p: Path, since: float | None, until: float | None) -> Iterator[LedgerRecord]:
    # A crash or a full disk can leave a torn line (the start of a record, no end): it is skipped with
    # a warning. A record written twice (same request_id, attempt and ts) is read once. A line that is
    # not a record at all means the file is not a ledger.
    seen: set[tuple[Any, ...]] = set()
    torn = 0
    with open(p, encoding="utf-8", errors="replace", newline="\n") as f:  # lines end at \n only
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = LedgerRecord.from_row(json.loads(line))
            except (ValueError, TypeError) as e:
                if line.startswith('{"ts":'):
                    torn += 1
                    log.warning("ledger %s: skipping a torn line %d (a write was cut short)", p, n)
                    continue
                raise ValueError(f"{p}:{n}: not a ledger record ({e})") from None
            identity = (rec.request_id, rec.attempt, rec.ts)
            if identity in seen:
                continue
            seen.add(identity)
            if (since is None or rec.ts >= since) and (until is None or rec.ts < until):
                yield rec


def select_sql(cols: list[str], table: str, since: float | None, until: float | None, *, order: str,
               mark: str = "?") -> tuple[str, list[float]]:
    """SELECT of `cols` with `since` <= ts < `until` (each when given), in `order`; `mark`: the
    driver's placeholder."""
    where, args = [], []
    if since is not None:
        where.append(f"ts >= {mark}")
        args.append(since)
    if until is not None:
        where.append(f"ts < {mark}")
        args.append(until)
    sql = f"SELECT {', '.join(cols)} FROM {table}"
    if where:
        sql += " WHERE " + " AND ".join(where)
    return sql + f" ORDER BY {order}", args


def _read_sqlite(p: Path, since: float | None, until: float | None) -> Iterator[LedgerRecord]:
    import sqlite3  # a SQLite ledger is read

    conn = sqlite3.connect(f"file:{p}?mode=ro", uri=True, timeout=5.0)
    try:
        conn.row_factory = sqlite3.Row
        have = {row[1] for row in conn.execute("PRAGMA table_info(ledger)")}
        if not have:
            raise ValueError(f"{p}: a SQLite file with no `ledger` table")
        cols = [c for c in COLUMNS if c in have]
        sql, args = select_sql(cols, "ledger", since, until, order="ts, id")
        for row in conn.execute(sql, args):
            yield LedgerRecord.from_row(row)
    finally:
        conn.close()
