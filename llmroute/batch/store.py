"""The job store: every batch job, its platform parts, its requests and their results, in SQLite
(`JobStore`, the default) or in PostgreSQL (`store_postgres.PostgresJobStore`, the same tables).

It is the one owner of a job's state, so a process that restarts reads it back and carries on
polling. Each write is its own transaction (WAL, `synchronous=NORMAL`): a result is either stored
with its request or not at all. Schema (all tables prefixed `batch_`):

    batch_jobs(job_id PK, created_at, model, feature, metadata JSON, on_failure, max_resubmits,
               completion_window, state, cancel_requested, finished_at)
    batch_parts(part_id PK, job_id, seq, deployment, content BLOB, input_file_id, platform_job_id,
                state, status JSON, submitted_at, updated_at, next_poll_at, poll_interval_s, cancel_sent, done)
    batch_requests(job_id, custom_id, seq, model, body JSON, deployment, part_id, state, attempts,
                   result JSON, error JSON, served_by, ledgered, PK (job_id, custom_id))
    batch_events(id PK, job_id, ts, kind, detail)    -- every failover choice, submission, state change

Request states: `pending` (needs a platform file), `queued` (in a part), `ok`, `failed` (waiting
for the failover policy), `dead` (failed for good).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Sequence

from llmroute._runtime.forksafe import hold_at_fork, leave_inherited

__all__ = ["JobStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS batch_jobs (
  job_id TEXT PRIMARY KEY, created_at REAL NOT NULL, model TEXT NOT NULL, feature TEXT, metadata TEXT NOT NULL,
  on_failure TEXT NOT NULL, max_resubmits INTEGER NOT NULL, completion_window TEXT NOT NULL,
  state TEXT NOT NULL, cancel_requested INTEGER NOT NULL DEFAULT 0, finished_at REAL);
CREATE TABLE IF NOT EXISTS batch_parts (
  part_id TEXT PRIMARY KEY, job_id TEXT NOT NULL, seq INTEGER NOT NULL, deployment TEXT NOT NULL,
  content BLOB NOT NULL, input_file_id TEXT, platform_job_id TEXT, state TEXT NOT NULL, status TEXT,
  submitted_at REAL, updated_at REAL, next_poll_at REAL NOT NULL DEFAULT 0, poll_interval_s REAL,
  cancel_sent INTEGER NOT NULL DEFAULT 0, done INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS batch_parts_job ON batch_parts (job_id);
CREATE TABLE IF NOT EXISTS batch_requests (
  job_id TEXT NOT NULL, custom_id TEXT NOT NULL, seq INTEGER NOT NULL, model TEXT NOT NULL, body TEXT NOT NULL,
  deployment TEXT, part_id TEXT, state TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, result TEXT,
  error TEXT, served_by TEXT, ledgered INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (job_id, custom_id));
CREATE INDEX IF NOT EXISTS batch_requests_part ON batch_requests (part_id);
CREATE TABLE IF NOT EXISTS batch_events (
  id INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL, ts REAL NOT NULL, kind TEXT NOT NULL, detail TEXT);
"""


def _row(row: Any) -> Dict[str, Any]:
    """A fetched row (never None: from fetchall) as a dict, its JSON columns decoded."""
    d = dict(row)
    for key in ("metadata", "status", "body", "result", "error"):
        if key in d and isinstance(d[key], str):
            d[key] = json.loads(d[key])
    return d


def _dump(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":"))


class JobStore:
    """SQLite at `path` (created with its tables on first use). Safe to share between threads."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        hold_at_fork(self, "_lock")  # no thread of ours is inside SQLite at a fork

    def _after_fork_in_child(self) -> None:
        leave_inherited(self._conn)  # the child opens its own connection
        self._conn = None

    def __repr__(self) -> str:
        return f"JobStore({str(self.path)!r})"

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(str(self.path), timeout=5.0, check_same_thread=False, isolation_level=None)
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.executescript(_SCHEMA)
            self._conn = conn
        return self._conn

    def _write(self, sql: str, args: Iterable[Any] = ()) -> None:
        with self._lock:
            db = self._db()
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute(sql, tuple(args))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def _many(self, statements: Iterable[tuple[str, Iterable[Any]]]) -> None:
        """Several writes in one transaction: all of them or none."""
        with self._lock:
            db = self._db()
            db.execute("BEGIN IMMEDIATE")
            try:
                for sql, args in statements:
                    db.execute(sql, tuple(args))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def _all(self, sql: str, args: Iterable[Any] = ()) -> List[Dict[str, Any]]:
        with self._lock:
            return [_row(r) for r in self._db().execute(sql, tuple(args)).fetchall()]

    def _tuples(self, sql: str, args: Iterable[Any] = ()) -> List[tuple[Any, ...]]:
        with self._lock:
            return [tuple(r) for r in self._db().execute(sql, tuple(args)).fetchall()]

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    # -- jobs ------------------------------------------------------------------------------------
    def create_job(self, job: Mapping[str, Any], requests: Sequence[Mapping[str, Any]], now: float) -> None:
        statements: List[tuple[str, Iterable[Any]]] = [(
            "INSERT INTO batch_jobs (job_id, created_at, model, feature, metadata, on_failure, max_resubmits, "
            "completion_window, state) VALUES (?,?,?,?,?,?,?,?,?)",
            (job["job_id"], now, job["model"], job.get("feature"), _dump(job.get("metadata") or {}),
             job["on_failure"], job["max_resubmits"], job["completion_window"], "running"),
        )]
        for seq, r in enumerate(requests):
            statements.append((
                "INSERT INTO batch_requests (job_id, custom_id, seq, model, body, deployment, state) "
                "VALUES (?,?,?,?,?,?,?)",
                (job["job_id"], r["custom_id"], seq, r["model"], _dump(r["body"]), r["deployment"], "pending"),
            ))
        statements.append(("INSERT INTO batch_events (job_id, ts, kind, detail) VALUES (?,?,?,?)",
                           (job["job_id"], now, "created", f"{len(requests)} requests")))
        self._many(statements)

    def job(self, job_id: str) -> Dict[str, Any] | None:
        rows = self._all("SELECT * FROM batch_jobs WHERE job_id = ?", (job_id,))
        return rows[0] if rows else None

    def jobs(self) -> List[Dict[str, Any]]:
        return self._all("SELECT * FROM batch_jobs ORDER BY created_at")

    def set_job_state(self, job_id: str, state: str, now: float) -> None:
        finished = now if state in ("done", "cancelled") else None
        self._write("UPDATE batch_jobs SET state = ?, finished_at = ? WHERE job_id = ?", (state, finished, job_id))

    def request_cancel(self, job_id: str) -> None:
        self._write("UPDATE batch_jobs SET cancel_requested = 1 WHERE job_id = ?", (job_id,))

    def event(self, job_id: str, now: float, kind: str, detail: str = "") -> None:
        self._write("INSERT INTO batch_events (job_id, ts, kind, detail) VALUES (?,?,?,?)", (job_id, now, kind, detail))

    def events(self, job_id: str) -> List[Dict[str, Any]]:
        return self._all("SELECT ts, kind, detail FROM batch_events WHERE job_id = ? ORDER BY id", (job_id,))

    # -- parts -----------------------------------------------------------------------------------
    def add_part(self, job_id: str, part_id: str, deployment: str, content: bytes, custom_ids: List[str],
                 now: float) -> None:
        seq = len(self._all("SELECT part_id FROM batch_parts WHERE job_id = ?", (job_id,)))
        statements: List[tuple[str, Iterable[Any]]] = [(
            "INSERT INTO batch_parts (part_id, job_id, seq, deployment, content, state, updated_at) "
            "VALUES (?,?,?,?,?,?,?)", (part_id, job_id, seq, deployment, content, "submitting", now))]
        statements += [("UPDATE batch_requests SET part_id = ?, state = 'queued' WHERE job_id = ? AND custom_id = ?",
                        (part_id, job_id, cid)) for cid in custom_ids]
        statements.append(("INSERT INTO batch_events (job_id, ts, kind, detail) VALUES (?,?,?,?)",
                           (job_id, now, "part", f"{part_id}: {len(custom_ids)} requests, {len(content)} bytes "
                                                 f"to {deployment}")))
        self._many(statements)

    def parts(self, job_id: str) -> List[Dict[str, Any]]:
        """The job's parts without their file bytes (`part_content` reads those)."""
        return self._all("SELECT part_id, job_id, seq, deployment, input_file_id, platform_job_id, state, status, "
                         "submitted_at, updated_at, next_poll_at, poll_interval_s, cancel_sent, done "
                         "FROM batch_parts WHERE job_id = ? ORDER BY seq", (job_id,))

    def part_content(self, part_id: str) -> bytes:
        rows = self._tuples("SELECT content FROM batch_parts WHERE part_id = ?", (part_id,))
        return bytes(rows[0][0]) if rows else b""

    def update_part(self, part_id: str, **fields: Any) -> None:
        if "status" in fields:
            fields["status"] = _dump(fields["status"])
        names = ", ".join(f"{k} = ?" for k in fields)
        self._write(f"UPDATE batch_parts SET {names} WHERE part_id = ?", (*fields.values(), part_id))

    # -- requests --------------------------------------------------------------------------------
    def requests(self, job_id: str, *, state: str | None = None, part_id: str | None = None
                 ) -> List[Dict[str, Any]]:
        sql, args = "SELECT * FROM batch_requests WHERE job_id = ?", [job_id]
        if state is not None:
            sql += " AND state = ?"
            args.append(state)
        if part_id is not None:
            sql += " AND part_id = ?"
            args.append(part_id)
        return self._all(sql + " ORDER BY seq", args)

    def unledgered(self, job_id: str) -> List[Dict[str, Any]]:
        """Requests with a batch outcome not yet in the ledger."""
        return self._all("SELECT * FROM batch_requests WHERE job_id = ? AND ledgered = 0 AND state IN "
                         "('ok', 'failed', 'dead') AND (served_by IS NULL OR served_by != 'online') ORDER BY seq",
                         (job_id,))

    def part_sizes(self, job_id: str) -> Dict[str, int]:
        rows = self._tuples("SELECT part_id, COUNT(*) FROM batch_requests WHERE job_id = ? "
                            "AND part_id IS NOT NULL GROUP BY part_id", (job_id,))
        return {part_id: int(n) for part_id, n in rows}

    def counts(self, job_id: str) -> Dict[str, int]:
        rows = self._tuples("SELECT state, COUNT(*) FROM batch_requests WHERE job_id = ? GROUP BY state", (job_id,))
        return {state: int(n) for state, n in rows}

    def finish_part(self, part_id: str, job_id: str, outcomes: Mapping[str, Mapping[str, Any]], now: float,
                    status: Mapping[str, Any]) -> None:
        """A part's results, stored with the part marked done, in one transaction."""
        statements: List[tuple[str, Iterable[Any]]] = []
        for cid, outcome in outcomes.items():
            if outcome.get("result") is not None:
                statements.append((
                    "UPDATE batch_requests SET state = 'ok', result = ?, error = NULL, served_by = 'batch', "
                    "ledgered = 0 WHERE job_id = ? AND custom_id = ? AND part_id = ? AND state = 'queued'",
                    (_dump(outcome["result"]), job_id, cid, part_id)))
            else:
                statements.append((
                    "UPDATE batch_requests SET state = 'failed', error = ?, ledgered = 0 "
                    "WHERE job_id = ? AND custom_id = ? AND part_id = ? AND state = 'queued'",
                    (_dump(outcome["error"]), job_id, cid, part_id)))
        statements.append(("UPDATE batch_parts SET done = 1, status = ?, state = ?, updated_at = ? WHERE part_id = ?",
                           (_dump(status), status.get("state"), now, part_id)))
        self._many(statements)

    def set_request(self, job_id: str, custom_id: str, **fields: Any) -> None:
        for key in ("result", "error", "body"):
            if key in fields:
                fields[key] = _dump(fields[key])
        names = ", ".join(f"{k} = ?" for k in fields)
        self._write(f"UPDATE batch_requests SET {names} WHERE job_id = ? AND custom_id = ?",
                    (*fields.values(), job_id, custom_id))

    def mark_ledgered(self, job_id: str, custom_ids: Iterable[str]) -> None:
        self._many(("UPDATE batch_requests SET ledgered = 1 WHERE job_id = ? AND custom_id = ?", (job_id, cid))
                   for cid in custom_ids)
