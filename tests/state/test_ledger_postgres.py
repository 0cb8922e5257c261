"""The PostgreSQL ledger against a real PostgreSQL: one row per record id, batches replayed without
doubles, a spool while the server is stopped, `report` and budgets read it, the schema migrates."""

from __future__ import annotations

import json
import time
import uuid
from decimal import Decimal

import psycopg
import pytest

import llmroute as L
from llmroute.accounting.ledger import LedgerConfig, LedgerRecord
from llmroute.accounting.sinks import open_sink, read_records
from llmroute.accounting.ledger_postgres import PostgresSink, ensure_schema
from llmroute.accounting.report import report
from llmroute.cli.report_command import main as report_main
from tests.accounting._client import MESSAGES, config, provider


def _records(n: int, *, ts: float | None = None, feature: str = "chat") -> list[LedgerRecord]:
    ts = time.time() if ts is None else ts
    rid = uuid.uuid4().hex
    return [LedgerRecord(ts=ts + i * 1e-3, request_id=rid, attempt=i + 1, feature=feature,
                         metadata={"tenant": "t1", "n": str(i)}, deployment="tg:m", provider="tg", model="m",
                         input_tokens=10 + i, output_tokens=5, cost=Decimal("0.000000123") * (i + 1), currency="USD",
                         priced=True, status="ok" if i % 2 == 0 else "error", latency_ms=12.5)
            for i in range(n)]


def _count(url: str, table: str = "ledger") -> int:
    with psycopg.connect(url) as conn:
        return conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]


def test_rows_round_trip_exactly_and_a_replayed_batch_is_counted_once(pg_url, tmp_path):
    records = _records(5)
    sink = PostgresSink(pg_url, spool_path=tmp_path / "spool.db", flush_interval_s=60)
    for r in [*records, records[1]]:  # a duplicate within one batch, too
        sink.write(r)
    sink.flush()
    for r in records[:3]:  # the same records again: a batch replayed after a timeout that did commit
        sink.write(r)
    sink.close()
    assert _count(pg_url) == 5
    back = list(read_records(pg_url))
    assert back == records  # cost exact (numeric), metadata as written, booleans, floats
    assert sink.outages == 0 and sink.spooled == 0


def test_stopped_server_spools_then_replays_nothing_lost_nothing_doubled(postgres_server, pg_url, tmp_path, caplog):
    sink = PostgresSink(pg_url, spool_path=tmp_path / "spool.db", flush_interval_s=60, connect_timeout_s=1)
    first = _records(4)
    for r in first:
        sink.write(r)
    sink.flush()
    postgres_server.stop_server()
    try:
        during = _records(7)
        for r in during:
            sink.write(r)
        sink.flush()
        sink.write(during[0])  # a duplicate spooled too
        sink.flush()
        assert not sink.available and sink.spooled == 8 and sink.outages == 1
        assert sink.spool.count() == 7
        assert sum("PostgreSQL unreachable" in m for m in caplog.messages) == 1  # once per outage
    finally:
        postgres_server.start()
    after = _records(2)
    for r in after:
        sink.write(r)
    sink.close()
    assert sink.available and sink.replayed == 7 and sink.spool.count() == 0
    ids = [(r.request_id, r.attempt) for r in read_records(pg_url)]
    assert len(ids) == len(set(ids)) == 13
    assert set(ids) == {(r.request_id, r.attempt) for r in first + during + after}


def test_schema_is_created_and_migrated_forward(pg_url):
    with psycopg.connect(pg_url, autocommit=True) as conn:
        ensure_schema(conn)
        conn.execute("ALTER TABLE ledger DROP COLUMN router_score")  # an older schema without this column
        ensure_schema(conn)
        cols = {r[0] for r in conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'ledger'")}
        version = conn.execute("SELECT value FROM ledger_meta WHERE key = 'schema_version'").fetchone()[0]
        indexes = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'ledger'")}
    assert "router_score" in cols and "record_id" in cols and version == "1"
    assert {"ledger_ts", "ledger_request", "ledger_pkey"} <= indexes


def test_report_reads_postgres_like_sqlite(pg_url, tmp_path, capsys):
    records = _records(6)
    sink = open_sink(LedgerConfig(sink="postgres", url=pg_url, spool_path=str(tmp_path / "s.db")))
    for r in records:
        sink.write(r)
    sink.close()
    rows = report(pg_url, by=["feature"])
    (row,) = list(rows)
    assert row["input_tokens"] == sum(r.input_tokens for r in records)
    assert Decimal(str(row["cost"])) == sum(r.cost for r in records)
    assert report_main(["--ledger", pg_url, "--by", "feature", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert Decimal(str(out["groups"][0]["cost"])) == sum(r.cost for r in records)
    cfg = tmp_path / "llmroute.toml"  # the config's [ledger] URL is the default ledger
    cfg.write_text(f'[ledger]\nsink = "postgres"\nurl = "{pg_url}"\n')
    assert report_main(["--config", str(cfg), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert Decimal(str(out["groups"][0]["cost"])) == sum(r.cost for r in records)


def test_budget_spend_is_restored_from_postgres_after_restart(pg_url, tmp_path, together_server):
    model = "meta-llama/Llama-3.3-70B-Instruct-Turbo"
    cfg = config({"tg": provider("together", together_server)}, {"large": [f"tg:{model}"]},
                 ledger={"sink": "postgres", "url": pg_url, "spool_path": str(tmp_path / "spool.db")},
                 budgets=[{"name": "daily", "max_cost": "0.01", "currency": "USD"}])
    spent = [LedgerRecord(ts=time.time(), request_id=uuid.uuid4().hex, cost=Decimal("0.00999"), currency="USD",
                          priced=True, input_tokens=1, output_tokens=1)]
    sink = PostgresSink(pg_url, spool_path=tmp_path / "other.db")
    for r in spent:
        sink.write(r)
    sink.close()
    with L.Client(config=cfg) as client:  # a restarted process: today's spend comes back from PostgreSQL
        with pytest.raises(L.BudgetExceededError) as info:
            client.chat.completions.create(model="large", messages=MESSAGES, max_tokens=50)
    assert info.value.spent == Decimal("0.00999")
    assert _count(pg_url) == 1  # nothing was sent, nothing recorded


def test_a_config_without_url_is_refused_at_load():
    with pytest.raises(L.ConfigError) as info:
        L.Client(config={"providers": {}, "tiers": {}, "ledger": {"sink": "postgres"}})
    assert "ledger" in str(info.value) and "url" in str(info.value)
