"""Feedback: a quality score attached to a call already in the ledger (`client.feedback(...)`).

A `FeedbackRecord` names the call by its `request_id` (the one its ledger records share) and holds
a score in [0, 1] (a thumbs-up is 1, a thumbs-down 0, a grade anything between), an optional label
and comment, the tier that served the call when known, and, only when the caller passes them, the
conversation's messages (what `llmroute router fit --ledger` learns from; the ledger keeps no
prompts otherwise).

Where it goes depends on the ledger sink (docs/ledger.md):

* SQLite: a `feedback` table in the same file, created on first use (additive: the `ledger`
  table and `schema_version` are untouched, so older readers keep working);
* JSONL: a sibling file `<ledger>.feedback.jsonl`, one object per line, so ledger readers never
  meet a line that is not a cost record;
* memory: the sink's `feedback` list;
* a sink with a `write_feedback(record)` method: that method. Other sinks raise ConfigError.

Feedback is written synchronously on the caller's thread: it is rare and off the request path.
"""

from __future__ import annotations

import json
import math
import sqlite3
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from llmroute.errors import ConfigError, InvalidRequestError
from llmroute._runtime.forksafe import hold_at_fork

__all__ = ["FeedbackRecord", "make_feedback", "write_feedback", "FEEDBACK_SQL"]

FEEDBACK_SQL = (
    "CREATE TABLE IF NOT EXISTS feedback (id INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL NOT NULL, "
    "request_id TEXT NOT NULL, score REAL NOT NULL, label TEXT, comment TEXT, tier TEXT, source TEXT NOT NULL, "
    "messages TEXT);\n"
    "CREATE INDEX IF NOT EXISTS feedback_request ON feedback (request_id);\n"
)
_COLUMNS = ("ts", "request_id", "score", "label", "comment", "tier", "source", "messages")
_lock = threading.Lock()
hold_at_fork(sys.modules[__name__], "_lock")  # no thread of ours is inside SQLite at a fork


@dataclass(frozen=True)
class FeedbackRecord:
    """A quality score for one call. `messages` is the conversation as JSON text, or None."""

    ts: float
    request_id: str
    score: float
    label: str | None = None
    comment: str | None = None
    tier: str | None = None
    source: str = "user"
    messages: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, separators=(",", ":"))


def make_feedback(
    target: Any,
    score: float | bool,
    *,
    now: float,
    label: str | None = None,
    comment: str | None = None,
    messages: Sequence[Mapping[str, Any]] | None = None,
    source: str = "user",
) -> FeedbackRecord:
    """Validate `client.feedback` arguments into a record (no I/O). `target` is a request id (str) or
    a response / stream whose `.route` carries it. InvalidRequestError names the bad argument."""
    tier = None
    if isinstance(target, str):
        request_id = target
    else:
        route = getattr(target, "route", None)
        found = getattr(route, "request_id", None)
        tier = getattr(route, "tier", None)
        if not isinstance(found, str):
            raise InvalidRequestError(
                "expected a request id (str) or a response from this client (its .route.request_id)",
                field="request_id_or_response",
            )
        request_id = found
    if not request_id.strip():
        raise InvalidRequestError("the request id is empty", field="request_id_or_response")
    if isinstance(score, bool):
        score = float(score)
    if not isinstance(score, (int, float)) or not math.isfinite(score) or not 0.0 <= score <= 1.0:
        raise InvalidRequestError(f"must be a number in [0, 1] (or a bool), got {score!r}", field="score")
    for name, value in (("label", label), ("comment", comment), ("source", source)):
        if value is not None and not isinstance(value, str):
            raise InvalidRequestError(f"must be a string, got {type(value).__name__}", field=name)
    text = None
    if messages is not None:
        if not isinstance(messages, (list, tuple)) or not all(isinstance(m, Mapping) for m in messages):
            raise InvalidRequestError("must be a list of message objects", field="messages")
        try:
            text = json.dumps([dict(m) for m in messages], ensure_ascii=False, separators=(",", ":"))
        except (TypeError, ValueError) as exc:
            raise InvalidRequestError(f"not JSON-serialisable ({exc})", field="messages") from None
    return FeedbackRecord(now, request_id, float(score), label, comment, tier, source, text)


def write_feedback(sink: Any, record: FeedbackRecord) -> None:
    """Store `record` next to the ledger `sink` writes (rules in the module doc)."""
    from llmroute.accounting.ledger import JSONLSink, MemorySink, SQLiteSink  # the ledger module loads with the engine

    writer = getattr(sink, "write_feedback", None)
    if callable(writer):
        writer(record)
    elif isinstance(sink, SQLiteSink):
        _write_sqlite(Path(sink.path), record)
    elif isinstance(sink, JSONLSink):
        path = Path(sink.path)
        path = path.with_name(path.name + ".feedback.jsonl")
        with _lock:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a", encoding="utf-8") as f:
                f.write(record.to_json() + "\n")
    elif isinstance(sink, MemorySink):
        with _lock:
            if not hasattr(sink, "feedback"):
                sink.feedback = []
            sink.feedback.append(record)
    elif sink is None:
        raise ConfigError("feedback needs a ledger; [ledger] sink is \"none\"", key="ledger.sink")
    else:
        raise ConfigError(f"the ledger sink {type(sink).__name__} stores no feedback (give it a write_feedback method)",
                          key="ledger.sink")


def _write_sqlite(path: Path, record: FeedbackRecord) -> None:
    with _lock:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(path), timeout=5.0, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(FEEDBACK_SQL)
            conn.execute(f"INSERT INTO feedback ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})",
                         tuple(getattr(record, c) for c in _COLUMNS))
        finally:
            conn.close()
