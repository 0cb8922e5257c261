"""A ledger named by its `[ledger]` section or its location (a file path or a postgresql:// URL):
`open_sink` opens its sink, `read_records` reads its records, whichever kind it is. The file sinks
live in `ledger.py`, the PostgreSQL one in `ledger_postgres.py` (which loads psycopg, an extra, only
when it connects)."""

from __future__ import annotations

import os
from typing import Iterator

from llmroute.accounting.ledger import JSONLSink, LedgerConfig, LedgerRecord, LedgerSink, MemorySink, SQLiteSink, read_file_records, resolve_path
from llmroute.accounting.ledger_postgres import PostgresSink, is_postgres_url, read_postgres

__all__ = ["open_sink", "read_records"]


def open_sink(config: LedgerConfig, *, base_dir: str | os.PathLike[str] | None = None) -> LedgerSink | None:
    """The sink a `[ledger]` section asks for. Relative paths resolve against `base_dir` (the config
    file's folder, if the caller wants that) or the working directory. Opens nothing yet: the file
    is created on the first flush."""
    if config.sink == "none":
        return None
    if config.sink == "memory":
        return MemorySink()
    if config.sink == "postgres":
        spool = resolve_path(config.spool_path, base_dir)
        return PostgresSink(config.url or "", spool_path=spool, flush_interval_s=config.flush_interval_s)
    path = resolve_path(config.path, base_dir)
    sink = JSONLSink(path, config.flush_interval_s) if config.sink == "jsonl" else SQLiteSink(path, config.flush_interval_s)
    sink.max_spool = config.max_spool_records
    return sink


def read_records(
    path: str | os.PathLike[str], *, since: float | None = None, until: float | None = None
) -> Iterator[LedgerRecord]:
    """Records in a ledger file (SQLite or JSONL, told apart by content) or a PostgreSQL ledger
    (a postgresql:// URL), oldest first.

    `since` <= ts < `until` (unix seconds) when given. Raises FileNotFoundError for a missing file
    and ValueError for a file that is neither format.
    """
    if is_postgres_url(path):
        yield from read_postgres(str(path), since=since, until=until)
        return
    yield from read_file_records(path, since=since, until=until)
