"""The PostgreSQL ledger sink: one row per attempt in a shared database, with a local spool.

    [ledger]
    sink = "postgres"
    url = "postgresql://llmroute@127.0.0.1:5432/llmroute"
    spool_path = "llmroute-spool.db"

`PostgresSink` is a batching sink like `SQLiteSink`: `write` appends to a buffer, a background
thread inserts the buffer every `flush_interval_s` in one transaction (COPY into a temp table, then
one INSERT). Each row's primary key is its record id (`request_id:attempt`), and the insert is
`ON CONFLICT (record_id) DO NOTHING`, so a batch written twice (a replay after a timeout whose commit did land) is counted once.

While PostgreSQL is unreachable (refused, timed out, restarting), a batch goes to the spool, a
local SQLite file (WAL, same durability as `SQLiteSink`), and the writer logs one WARNING per
outage. Each flush first replays the spool (oldest first, deleting rows only after PostgreSQL
committed them), so nothing is lost and, by the primary key, nothing is doubled. Processes on one
host may share a spool file. Loss bound on a killed process: the records of the last flush interval,
as with SQLite.

The schema is created on first connect and migrated forward (columns the record gained are added);
`docs/ledger.md` documents it. psycopg (3) is imported on first connect, never at import.
"""

from __future__ import annotations

import json
import logging
import os
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from llmroute.accounting.ledger import COLUMNS, LedgerRecord, _BatchingSink, open_wal_sqlite, select_sql

if TYPE_CHECKING:
    import sqlite3  # the spool is opened through ledger.open_wal_sqlite

__all__ = ["PostgresSink", "read_postgres", "is_postgres_url", "record_id_of", "PG_SCHEMA_VERSION"]

log = logging.getLogger("llmroute.ledger")

PG_SCHEMA_VERSION = 1
# Rows replayed from the spool per PostgreSQL transaction.
REPLAY_CHUNK = 5000

_PG_TYPES = {
    "ts": "double precision NOT NULL",
    "request_id": "text NOT NULL",
    "attempt": "integer NOT NULL",
    "metadata": "jsonb NOT NULL DEFAULT '{}'",
    "input_tokens": "bigint NOT NULL DEFAULT 0",
    "output_tokens": "bigint NOT NULL DEFAULT 0",
    "cached_tokens": "bigint NOT NULL DEFAULT 0",
    "reasoning_tokens": "bigint NOT NULL DEFAULT 0",
    "cache_write_tokens": "bigint NOT NULL DEFAULT 0",
    "cost": "numeric",
    "estimated": "boolean NOT NULL DEFAULT false",
    "priced": "boolean NOT NULL DEFAULT false",
    "usage_estimated": "boolean NOT NULL DEFAULT false",
    "status": "text NOT NULL",
    "ttft_ms": "double precision",
    "latency_ms": "double precision",
    "router_score": "double precision",
    "queued_ms": "double precision",
}


def is_postgres_url(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(("postgresql://", "postgres://"))


def record_id_of(record: LedgerRecord) -> str:
    """The record's id: its own `record_id` when it has one, else `request_id:attempt`."""
    own = getattr(record, "record_id", None)
    return own if own else f"{record.request_id}:{record.attempt}"


def _pg_type(column: str) -> str:
    return _PG_TYPES.get(column, "text")


def _schema_sql(table: str) -> list[str]:
    cols = ", ".join(f"{c} {_pg_type(c)}" for c in COLUMNS)
    return [
        f"CREATE TABLE IF NOT EXISTS {table} (record_id text PRIMARY KEY, {cols})",
        f"CREATE INDEX IF NOT EXISTS {table}_ts ON {table} (ts)",
        f"CREATE INDEX IF NOT EXISTS {table}_request ON {table} (request_id)",
        f"CREATE TABLE IF NOT EXISTS {table}_meta (key text PRIMARY KEY, value text)",
    ]


def _pg_row(record: LedgerRecord) -> tuple[Any, ...]:
    out: list[Any] = [record_id_of(record)]
    for name in COLUMNS:
        v = getattr(record, name)
        if name == "metadata":
            v = json.dumps(dict(v), sort_keys=True, ensure_ascii=False, default=str)
        elif isinstance(v, (dict, list)):
            v = json.dumps(v, ensure_ascii=False, default=str)
        out.append(v)
    return tuple(out)


def _check_table(table: str) -> str:
    if not table.replace("_", "").isalnum() or not table[0].isalpha():
        raise ValueError(f"table must be a plain SQL identifier, got {table!r}")
    return table


class _Spool:
    """Records PostgreSQL could not take yet, in a local SQLite file (one row per record id)."""

    def __init__(self, path: Path) -> None:
        import sqlite3  # noqa: F401  # with the spool, not at its first write (maybe at interpreter exit): ledger.SQLiteSink
        self.path = path
        self._conn: sqlite3.Connection | None = None

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = open_wal_sqlite(self.path)
            conn.execute("CREATE TABLE IF NOT EXISTS spool (record_id TEXT PRIMARY KEY, record TEXT NOT NULL)")
            self._conn = conn
        return self._conn

    def add(self, batch: list[LedgerRecord]) -> None:
        conn = self._connect()
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany("INSERT OR IGNORE INTO spool (record_id, record) VALUES (?, ?)",
                             [(record_id_of(r), r.to_json()) for r in batch])
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def pending(self) -> bool:
        if self._conn is None and not self.path.exists():
            return False
        return self._connect().execute("SELECT 1 FROM spool LIMIT 1").fetchone() is not None

    def count(self) -> int:
        if self._conn is None and not self.path.exists():
            return 0
        return int(self._connect().execute("SELECT COUNT(*) FROM spool").fetchone()[0])

    def oldest(self, n: int) -> list[tuple[str, LedgerRecord]]:
        rows = self._connect().execute("SELECT record_id, record FROM spool ORDER BY rowid LIMIT ?", (n,)).fetchall()
        return [(rid, LedgerRecord.from_row(json.loads(text))) for rid, text in rows]

    def remove(self, record_ids: list[str]) -> None:
        conn = self._connect()
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany("DELETE FROM spool WHERE record_id = ?", [(r,) for r in record_ids])
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class PostgresSink(_BatchingSink):
    """Batched, idempotent inserts into PostgreSQL; a local SQLite spool while it is unreachable."""

    def __init__(self, url: str, *, spool_path: str | os.PathLike[str] = "llmroute-spool.db",
                 flush_interval_s: float = 1.0, table: str = "ledger", connect_timeout_s: float = 3.0) -> None:
        super().__init__(flush_interval_s)
        if not is_postgres_url(url):
            raise ValueError("url must start with postgresql:// or postgres://")
        self.url = url
        self.table = _check_table(table)
        self.connect_timeout_s = connect_timeout_s
        self.spool = _Spool(Path(spool_path))
        self._conn: Any = None
        self._outage = False
        self.spooled = 0  # records written to the spool (counter)
        self.replayed = 0  # records replayed from the spool into PostgreSQL
        self.outages = 0

    def __repr__(self) -> str:
        return f"PostgresSink({_redact(self.url)!r}, table={self.table!r}, spool={str(self.spool.path)!r})"

    @property
    def available(self) -> bool:
        """False while the last write found PostgreSQL unreachable."""
        return not self._outage

    # -- I/O (writer thread) ------------------------------------------------------------------
    def _connect(self) -> Any:
        if self._conn is None or self._conn.closed:
            conn = connect(self.url, self.connect_timeout_s)
            try:
                ensure_schema(conn, self.table)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def _insert(self, records: list[LedgerRecord]) -> None:
        """COPY the batch into a session temp table, then one INSERT ... ON CONFLICT DO NOTHING."""
        conn = self._connect()
        cols = ", ".join(("record_id", *COLUMNS))
        incoming = f"{self.table}_incoming"
        with conn.transaction():
            conn.execute(f"CREATE TEMP TABLE IF NOT EXISTS {incoming} (LIKE {self.table}) ON COMMIT DELETE ROWS")
            with conn.cursor() as cur:
                with cur.copy(f"COPY {incoming} ({cols}) FROM STDIN") as copy:
                    for r in records:
                        copy.write_row(_pg_row(r))
                cur.execute(f"INSERT INTO {self.table} ({cols}) SELECT {cols} FROM {incoming} "
                            f"ON CONFLICT (record_id) DO NOTHING")

    def _write_batch(self, batch: list[LedgerRecord]) -> None:
        import psycopg

        try:
            self._replay()
            self._insert(batch)
        except (psycopg.OperationalError, psycopg.InterfaceError, OSError) as exc:
            self._drop_connection()
            if not self._outage:
                self._outage = True
                self.outages += 1
                log.warning("ledger: PostgreSQL unreachable (%s); spooling records to %s until it returns",
                            type(exc).__name__, self.spool.path)
            self.spool.add(batch)  # raises only if the local disk fails: the batch is then kept and retried
            self.spooled += len(batch)
            return
        if self._outage:
            self._outage = False
            log.warning("ledger: PostgreSQL is back; spool replayed")

    def _write_at_exit(self) -> None:
        """At interpreter exit a write in progress held PostgreSQL past the exit wait: what is left
        goes to the local spool through a connection of its own (replayed by the next writer)."""
        with self._lock:
            batch, self._buffer = self._buffer, []
        if not batch:
            return
        spool = _Spool(self.spool.path)
        try:
            spool.add(batch)
            self.spooled += len(batch)
        except Exception:  # noqa: BLE001 - exit must go on: close() counts them lost
            with self._lock:
                self._buffer[:0] = batch
        finally:
            spool.close()

    def _replay(self) -> None:
        while self.spool.pending():
            chunk = self.spool.oldest(REPLAY_CHUNK)
            if not chunk:
                return
            self._insert([rec for _, rec in chunk])
            self.spool.remove([rid for rid, _ in chunk])  # after PostgreSQL committed: a crash here only re-inserts
            self.replayed += len(chunk)

    def replay(self) -> int:
        """Replay the spool now (the writer does it before each batch); returns the rows replayed."""
        with self._io_lock:
            before = self.replayed
            self._replay()
            return self.replayed - before

    def _drop_connection(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # noqa: BLE001 - it is already broken
                pass
            self._conn = None

    def _close_io(self) -> None:
        self._drop_connection()
        self.spool.close()


def _redact(url: str) -> str:
    """The URL without its password."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    user = f"{parts.username}:***@" if parts.username else ""
    return urlunsplit((parts.scheme, user + host, parts.path, parts.query, parts.fragment))


def connect(url: str, connect_timeout_s: float = 3.0) -> Any:
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - depends on the extra
        raise ImportError('the PostgreSQL ledger needs psycopg: pip install "llmroute[postgres]"') from exc
    return psycopg.connect(url, connect_timeout=max(1, int(round(connect_timeout_s))), autocommit=True,
                           options="-c statement_timeout=30000")


def ensure_schema(conn: Any, table: str = "ledger") -> None:
    """Create the table and indexes if missing and add any column the record gained since.
    Serialized across processes by an advisory lock (concurrent CREATE TABLE IF NOT EXISTS races)."""
    lock_id = zlib.crc32(f"llmroute-ledger:{table}".encode())
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_id,))
        for sql in _schema_sql(table):
            conn.execute(sql)
        have = {row[0] for row in conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s AND table_schema = current_schema()",
            (table,))}
        for column in COLUMNS:
            if column not in have:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {_pg_type(column).replace(' NOT NULL', '')}")
        conn.execute(
            f"INSERT INTO {table}_meta (key, value) VALUES ('schema_version', %s) "
            f"ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value", (str(PG_SCHEMA_VERSION),))


def read_postgres(url: str, *, since: float | None = None, until: float | None = None,
                  table: str = "ledger") -> Iterator[LedgerRecord]:
    """Records in a PostgreSQL ledger, oldest first; `since` <= ts < `until` when given."""
    table = _check_table(table)
    conn = connect(url)
    try:
        have = {row[0] for row in conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s AND table_schema = current_schema()",
            (table,))}
        if not have:
            raise ValueError(f"{_redact(url)}: no `{table}` table")
        cols = [c for c in COLUMNS if c in have]
        sql, args = select_sql(cols, table, since, until, order="ts, record_id", mark="%s")
        with conn.cursor() as cur:
            cur.execute(sql, args)
            while True:
                rows = cur.fetchmany(2000)
                if not rows:
                    break
                for row in rows:
                    yield LedgerRecord.from_row(dict(zip(cols, row)))
    finally:
        conn.close()
