"""The job store in PostgreSQL: `JobStore`'s tables and statements in a shared database.

With `[ledger] sink = "postgres"` (and no `[batch] store` of its own) jobs live in the ledger's
database, so any process of the fleet, on any machine, can resume polling a job another one started.
The tables are `JobStore`'s (`store.py`), created on first use by llmroute (serialized across
processes by an advisory lock): `REAL` columns are `double precision`, the part file is `bytea`,
`batch_events.id` is a `bigserial`. Each write is one transaction, as in SQLite. A connection that
breaks is dropped; the next operation opens a new one (the failed operation raises: nothing half
written). psycopg (3) is imported on first use, never at import.
"""

from __future__ import annotations

import threading
import zlib
from typing import Any, Dict, Iterable, List

from llmroute.accounting.ledger_postgres import _redact, connect
from llmroute._runtime.forksafe import renew_at_fork
from llmroute.batch.store import _SCHEMA, JobStore, _row

__all__ = ["PostgresJobStore", "PG_SCHEMA"]

PG_SCHEMA = [
    statement.strip()
    for statement in _SCHEMA.replace("INTEGER PRIMARY KEY AUTOINCREMENT", "BIGSERIAL PRIMARY KEY")
    .replace("REAL", "DOUBLE PRECISION").replace("BLOB", "BYTEA").split(";")
    if statement.strip()
]


def _pg(sql: str) -> str:
    """The statement with psycopg's placeholders (the shared statements use `?` and no literal `%`)."""
    return sql.replace("?", "%s")


class PostgresJobStore(JobStore):
    """`JobStore` over PostgreSQL at `url`. Safe to share between threads (one connection, locked)."""

    def __init__(self, url: str, *, connect_timeout_s: float = 3.0) -> None:
        self.url = url
        self.path = _redact(url)  # type: ignore[assignment]  # where, in messages
        self.connect_timeout_s = connect_timeout_s
        self._lock = threading.RLock()
        self._conn: Any = None
        renew_at_fork(self, "_lock")  # JobStore._after_fork_in_child: the child connects anew

    def __repr__(self) -> str:
        return f"PostgresJobStore({_redact(self.url)!r})"

    def _db(self) -> Any:
        if self._conn is None or self._conn.closed or self._conn.broken:
            from psycopg.rows import dict_row

            conn = connect(self.url, self.connect_timeout_s)
            try:
                with conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (zlib.crc32(b"llmroute-batch-store"),))
                    for statement in PG_SCHEMA:
                        conn.execute(statement)
            except BaseException:
                conn.close()
                raise
            conn.row_factory = dict_row
            self._conn = conn
        return self._conn

    def _run(self, statements: Iterable[tuple[str, Iterable[Any]]], fetch: str = "") -> Any:
        import psycopg

        with self._lock:
            try:
                db = self._db()
                with db.transaction():
                    for sql, args in statements:
                        cur = db.execute(_pg(sql), tuple(args))
                    if fetch == "dicts":
                        return cur.fetchall()
                    if fetch == "tuples":
                        return [tuple(r.values()) for r in cur.fetchall()]
                return None
            except (psycopg.OperationalError, psycopg.InterfaceError):
                self.close()
                raise

    def _write(self, sql: str, args: Iterable[Any] = ()) -> None:
        self._run([(sql, args)])

    def _many(self, statements: Iterable[tuple[str, Iterable[Any]]]) -> None:
        self._run(list(statements))

    def _all(self, sql: str, args: Iterable[Any] = ()) -> List[Dict[str, Any]]:
        return [_row(r) for r in self._run([(sql, args)], fetch="dicts")]

    def _tuples(self, sql: str, args: Iterable[Any] = ()) -> List[tuple[Any, ...]]:
        rows: List[tuple[Any, ...]] = self._run([(sql, args)], fetch="tuples")
        return rows

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                try:
                    self._conn.close()
                except Exception:  # noqa: BLE001 - it may already be broken
                    pass
                self._conn = None
