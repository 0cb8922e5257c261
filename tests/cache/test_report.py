"""Cache hits in the ledger file and the report: hit rate and money saved per feature and tier; a ledger
written before the cache columns existed gets them added and still reads."""

from __future__ import annotations

import sqlite3
from decimal import Decimal

from llmroute import Client
from llmroute.accounting.ledger import COLUMNS, SCHEMA_VERSION, SQLiteSink
from llmroute.accounting.sinks import read_records
from llmroute.accounting.report import report
from llmroute.cli.report_command import main as report_main
from tests.cache.conftest import DEP, MESSAGES, cache_config


def test_report_shows_hit_rate_and_money_saved_per_feature_and_tier(vllm_server, tmp_path, capsys):
    ledger = tmp_path / "ledger.db"
    cfg = cache_config(vllm_server, ledger={"sink": "sqlite", "path": str(ledger)},
                       tiers={"t": {"deployments": [DEP]}, "u": {"deployments": [DEP]}})
    with Client(config=cfg) as client:
        def ask(feature, model="t", **kw):
            return client.chat.completions.create(model=model, messages=MESSAGES, temperature=0, feature=feature, **kw)

        faq = [ask("faq") for _ in range(4)]  # 1 miss, 3 hits
        chat = [ask("chat"), ask("chat", max_tokens=3)]  # 2 misses
        other_tier = [ask("faq", model="u") for _ in range(2)]  # 1 miss, 1 hit
        ask("faq", cache=False)  # a bypass: not a lookup
    one = faq[0].cost.amount
    rows = {(r["feature"], r["tier"]): r for r in report(ledger, by="feature,tier")}
    assert rows[("faq", "t")]["cache_hits"] == 3 and rows[("faq", "t")]["cache_hit_rate"] == 0.75
    assert rows[("faq", "t")]["cost_saved"] == 3 * one and rows[("faq", "t")]["cost"] == 2 * one  # + the bypass
    assert rows[("chat", "t")]["cache_hit_rate"] == 0 and rows[("chat", "t")]["cost_saved"] == 0
    assert rows[("faq", "u")]["cache_hit_rate"] == 0.5 and rows[("faq", "u")]["cost_saved"] == other_tier[0].cost.amount
    assert chat[1].route.cache == "miss"
    by_outcome = {r["cache"]: r["requests"] for r in report(ledger, by="cache")}
    assert by_outcome == {"hit": 4, "miss": 4, "bypass": 1}
    assert report_main(["--ledger", str(ledger), "--by", "feature"]) == 0
    table = capsys.readouterr().out
    assert "cache_hit_rate" in table and "cost_saved" in table and "66.7%" in table  # faq: 4 hits of 6 lookups


def test_an_old_ledger_gets_the_cache_columns_and_keeps_its_rows(tmp_path):
    path = tmp_path / "old.db"
    old_columns = [c for c in COLUMNS if c not in ("cache", "cost_saved")]
    con = sqlite3.connect(path)
    con.execute(f"CREATE TABLE ledger (id INTEGER PRIMARY KEY AUTOINCREMENT, {', '.join(old_columns)})")
    con.execute("CREATE TABLE ledger_meta (key TEXT PRIMARY KEY, value TEXT)")
    con.execute("INSERT INTO ledger_meta VALUES ('schema_version', '1')")
    con.execute("INSERT INTO ledger (ts, request_id, attempt, metadata, input_tokens, output_tokens, cached_tokens, "
                "reasoning_tokens, cost, currency, estimated, priced, status, usage_estimated) "
                "VALUES (1.0, 'old', 1, '{}', 5, 6, 0, 0, '0.5', 'USD', 0, 1, 'ok', 0)")
    con.commit()
    con.close()
    from llmroute.accounting.ledger import LedgerRecord

    with SQLiteSink(path) as sink:
        sink.write(LedgerRecord(ts=2.0, request_id="new", cache="hit", cost=Decimal(0), currency="USD", priced=True,
                                cost_saved=Decimal("0.5")))
    old, new = read_records(path)
    assert (old.request_id, old.cache, old.cost_saved, old.cost) == ("old", None, None, Decimal("0.5"))
    assert (new.cache, new.cost_saved) == ("hit", Decimal("0.5"))
    con = sqlite3.connect(path)
    assert con.execute("SELECT value FROM ledger_meta WHERE key='schema_version'").fetchone() == (str(SCHEMA_VERSION),)
    con.close()
