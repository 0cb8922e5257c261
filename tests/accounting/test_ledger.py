"""Ledger records, sinks, and what survives a killed process."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from decimal import Decimal
from pathlib import Path

import pydantic
import pytest

from llmroute.accounting.cost import compute_cost
from llmroute.accounting.ledger import (
    COLUMNS,
    CallableSink,
    JSONLSink,
    LedgerConfig,
    LedgerRecord,
    MemorySink,
    SQLiteSink,
    SCHEMA_VERSION,
)
from llmroute.accounting.sinks import open_sink, read_records
from llmroute.accounting.prices import Price

CHILD = Path(__file__).with_name("_ledger_child.py")
REPO = Path(__file__).resolve().parents[2]


def rec(i: int = 0, **kw) -> LedgerRecord:
    base = dict(
        ts=1_767_225_600.0 + i, request_id=f"req-{i}", attempt=1, feature="chat", metadata={"tenant": "acme", "n": i},
        tier="small", pool="interactive", provider="tg", provider_kind="together", deployment="tg:m", model="m",
        input_tokens=1200, output_tokens=300, cached_tokens=200, reasoning_tokens=0, cost=Decimal("0.001232"),
        currency="USD", estimated=False, priced=True, price_version="2026.12.02-1", status="ok", ttft_ms=120.5,
        latency_ms=900.25, router_score=0.73, usage_estimated=False,
    )  # fmt: skip
    base.update(kw)
    return LedgerRecord(**base)


def test_sqlite_round_trip_is_exact(tmp_path):
    path = tmp_path / "l.db"
    records = [rec(0), rec(1, cost=None, currency=None, priced=False, status="error", error_type="RateLimitError",
                          ttft_ms=None, router_score=None, metadata={})]  # fmt: skip
    with SQLiteSink(path, flush_interval_s=5) as sink:
        for r in records:
            sink.write(r)
    assert list(read_records(path)) == records
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    cols = [r[1] for r in conn.execute("PRAGMA table_info(ledger)")]
    assert cols == ["id", *COLUMNS] and "router_score" in cols
    # Plain SQL works on it: exact text costs, NULL (not 0) for the unpriced attempt.
    assert conn.execute("SELECT cost FROM ledger ORDER BY id").fetchall() == [("0.001232",), (None,)]
    assert conn.execute("SELECT json_extract(metadata, '$.tenant') FROM ledger WHERE id = 1").fetchone() == ("acme",)
    assert conn.execute("SELECT value FROM ledger_meta WHERE key = 'schema_version'").fetchone() == (str(SCHEMA_VERSION),)


def test_from_cost_fills_tokens_and_money():
    p = Price(Decimal("0.88"), Decimal("0.88"), Decimal("0.44"), "USD", "v1")
    c = compute_cost(p, prompt_tokens=1200, completion_tokens=300, cached_tokens=200, estimated=True)
    r = LedgerRecord.from_cost(c, ts=1.0, request_id="x", status="cancelled")
    assert (r.cost, r.currency, r.cached_tokens, r.estimated, r.priced, r.price_version) == (
        Decimal("0.001232"), "USD", 200, True, True, "v1")  # fmt: skip


def test_time_filters(tmp_path):
    path = tmp_path / "l.db"
    with SQLiteSink(path) as sink:
        for i in range(10):
            sink.write(rec(i))
    got = [r.request_id for r in read_records(path, since=1_767_225_603.0, until=1_767_225_606.0)]
    assert got == ["req-3", "req-4", "req-5"]


def test_writes_from_many_threads_all_land(tmp_path):
    path = tmp_path / "l.db"
    sink = SQLiteSink(path, flush_interval_s=0.05)

    def work(t):
        for i in range(300):
            sink.write(rec(t * 1000 + i))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sink.close()
    ids = [r.request_id for r in read_records(path)]
    assert len(ids) == len(set(ids)) == 2400
    assert sink.records_written == 2400


def test_write_is_buffered_until_flush(tmp_path):
    path = tmp_path / "l.db"
    sink = SQLiteSink(path, flush_interval_s=3600)
    sink.write(rec(0))
    assert not path.exists()  # nothing on the caller's thread
    sink.flush()
    assert len(list(read_records(path))) == 1
    sink.write(rec(1))
    sink.close()
    sink.write(rec(2))  # a straggler after close is still written
    assert [r.request_id for r in read_records(path)] == ["req-0", "req-1", "req-2"]


def test_a_failed_write_is_retried_not_lost(tmp_path):
    class Flaky(SQLiteSink):
        fails = 1

        def _write_batch(self, batch):
            if self.fails:
                self.fails -= 1
                raise sqlite3.OperationalError("database is locked")
            super()._write_batch(batch)

    path = tmp_path / "l.db"
    sink = Flaky(path, flush_interval_s=3600)
    sink.write(rec(0))
    sink.flush()
    assert sink.write_errors == 1
    sink.write(rec(1))
    sink.close()
    assert [r.request_id for r in read_records(path)] == ["req-0", "req-1"]


def test_jsonl_sink_and_truncated_last_line(tmp_path):
    path = tmp_path / "l.jsonl"
    with JSONLSink(path) as sink:
        sink.write(rec(0))
        sink.write(rec(1, cost=None, priced=False))
    lines = path.read_text().splitlines()
    assert json.loads(lines[0])["cost"] == "0.001232"
    assert list(read_records(path)) == [rec(0), rec(1, cost=None, priced=False)]
    with open(path, "a") as f:
        f.write('{"ts": 1.0, "request_id": "cut sh')  # a crash mid-line
    assert len(list(read_records(path))) == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n{}\n")
    with pytest.raises(ValueError):
        list(read_records(bad))


def test_memory_and_callable_sinks():
    mem = MemorySink()
    mem.write(rec(0))
    assert mem.records == [rec(0)]
    seen = []
    ok = CallableSink(seen.append)
    ok.write(rec(1))
    assert seen == [rec(1)]

    def boom(_):
        raise RuntimeError("user sink broke")

    bad = CallableSink(boom)
    bad.write(rec(2))  # must not raise into the call
    assert bad.errors == 1
    with pytest.raises(TypeError):
        CallableSink("not callable")  # type: ignore[arg-type]


def test_ledger_config_and_open_sink(tmp_path):
    assert LedgerConfig().path == "llmroute-ledger.db" and LedgerConfig().flush_interval_s == 1.0
    with pytest.raises(pydantic.ValidationError):
        LedgerConfig(flush_interval_s=0)
    with pytest.raises(pydantic.ValidationError):
        LedgerConfig.model_validate({"paht": "x"})
    assert open_sink(LedgerConfig(sink="none")) is None
    assert isinstance(open_sink(LedgerConfig(sink="memory")), MemorySink)
    s = open_sink(LedgerConfig(sink="jsonl", path="x.jsonl"), base_dir=tmp_path)
    assert isinstance(s, JSONLSink) and s.path == tmp_path / "x.jsonl"
    s = open_sink(LedgerConfig(), base_dir=tmp_path)
    assert isinstance(s, SQLiteSink) and s.path == tmp_path / "llmroute-ledger.db"
    assert not s.path.exists()  # opening creates nothing


def _child(args, **kw):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen([sys.executable, str(CHILD), *args], stdout=subprocess.PIPE, text=True, env=env, **kw)


def test_clean_exit_flushes_without_close(tmp_path):
    path = tmp_path / "l.db"
    proc = _child([str(path), "3600", "exit", "500"])
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert len(out.splitlines()) == 500
    assert len(list(read_records(path))) == 500


def test_killed_process_loses_at_most_the_last_flush_interval(tmp_path):
    interval = 0.2
    # Generous slack for a loaded machine: a commit that takes long, a writer thread scheduled late.
    slack = 2.0
    path = tmp_path / "l.db"
    proc = _child([str(path), str(interval), "load"])
    served: list[tuple[int, float]] = []
    try:
        start = None
        for line in proc.stdout:
            seq, t = line.split()
            served.append((int(seq), float(t)))
            start = start or served[0][1]
            # Run long enough that many records are older than the bound, then kill mid-load.
            if served[-1][1] - start > 3 * (interval + slack) / 2 + 1 and len(served) > 1000:
                break
        t_kill = time.monotonic()
        os.kill(proc.pid, signal.SIGKILL)
        for line in proc.stdout:  # lines already in the pipe were served too
            seq, t = line.split()
            served.append((int(seq), float(t)))
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL

    written = sorted(int(r.request_id) for r in read_records(path))
    n = len(written)
    # What reached the database is exactly a prefix of what was served: nothing torn, nothing twice.
    assert written == list(range(n))
    # At most one record can be in the sink but not yet reported (killed between write and print).
    assert n <= len(served) + 1
    old_enough = [seq for seq, t in served if t < t_kill - (interval + slack)]
    assert len(old_enough) > 100  # the bound below has teeth
    assert max(old_enough) < n, "a record older than the last flush interval was lost"
    lost = len(served) - n
    print(f"served {len(served)}, written {n}, lost {lost} (bound: the last {interval}s of records)")
