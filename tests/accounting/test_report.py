"""`llmroute report` and `report(...)` over a real ledger written by the SQLite and JSONL sinks."""

from __future__ import annotations

import calendar
import json
import xml.etree.ElementTree as ET
from decimal import Decimal as D

import pytest

from llmroute.accounting.ledger import JSONLSink, LedgerRecord, SQLiteSink
from llmroute.accounting.prices import ExchangeRates, PriceBook
from llmroute.accounting.report import main, parse_time, percentile, report

DAY1 = float(calendar.timegm((2026, 11, 30, 10, 0, 0)))
DAY2 = DAY1 + 86400
TG70 = "meta-llama/Llama-3.3-70B-Instruct-Turbo"
SF7 = "Qwen/Qwen2.5-7B-Instruct"


def records() -> list[LedgerRecord]:
    def r(ts, rid, attempt, feature, tier, provider, kind, model, inp, out, cached, cost, cur, status="ok",
          latency=None, ttft=None, **kw):  # fmt: skip
        return LedgerRecord(
            ts=ts, request_id=rid, attempt=attempt, feature=feature, tier=tier, provider=provider, provider_kind=kind,
            deployment=f"{provider}:{model}", model=model, input_tokens=inp, output_tokens=out, cached_tokens=cached,
            cost=None if cost is None else D(cost), currency=cur, priced=cost is not None, status=status,
            latency_ms=latency, ttft_ms=ttft, **kw,
        )  # fmt: skip

    return [
        # chat, large: a request that failed over (billed error, then ok), and a plain one.
        r(DAY1, "a", 1, "chat", "large", "tg", "together", TG70, 1000, 0, 0, "0.00104", "USD", "error", 100.0, None),
        r(DAY1 + 1, "a", 2, "chat", "large", "tg", "together", TG70, 1000, 500, 200, "0.00156", "USD", "ok", 300.0, 50.0),
        r(DAY2, "b", 1, "chat", "large", "tg", "together", TG70, 2000, 100, 0, "0.002184", "USD", "ok", 500.0, 70.0),
        # summarize, small, on SiliconFlow in CNY.
        r(DAY2, "c", 1, "summarize", "small", "sf", "siliconflow", SF7, 3000, 300, 1000, "0.5", "CNY", "ok", 200.0, 20.0),
        # an unpriced self-hosted attempt (strict = false).
        r(DAY2, "d", 1, "chat", "small", "box", "vllm", SF7, 100, 10, 0, None, None, "ok", 40.0, 5.0,
          metadata={"tenant": "acme"}),  # fmt: skip
    ]


@pytest.fixture
def ledger(tmp_path):
    path = tmp_path / "ledger.db"
    with SQLiteSink(path) as sink:
        for rec in records():
            sink.write(rec)
    return path


def test_groups_and_totals_by_feature(ledger):
    rows = report(ledger, by=("feature",))
    chat_usd = next(r for r in rows if r["feature"] == "chat" and r["currency"] == "USD")
    assert chat_usd["requests"] == 2 and chat_usd["attempts"] == 3 and chat_usd["errors"] == 1
    assert chat_usd["error_rate"] == pytest.approx(1 / 3)
    assert (chat_usd["input_tokens"], chat_usd["output_tokens"], chat_usd["cached_tokens"]) == (4000, 600, 200)
    assert chat_usd["cost"] == D("0.004784")  # 0.00104 + 0.00156 + 0.002184
    assert chat_usd["cost_per_request"] == D("0.002392")
    assert chat_usd["latency_p50_ms"] == 300.0 and chat_usd["latency_p95_ms"] == pytest.approx(480.0)
    assert chat_usd["ttft_p50_ms"] == 60.0
    unpriced = next(r for r in rows if r["feature"] == "chat" and r["currency"] is None)
    assert unpriced["cost"] is None and unpriced["unpriced_attempts"] == 1  # never 0
    totals = {t["currency"]: t for t in rows.totals}
    assert totals["USD"]["cost"] == D("0.004784") and totals["CNY"]["cost"] == D("0.5")
    assert totals[None]["cost"] is None


def test_by_several_keys_and_metadata(ledger):
    rows = report(ledger, by="feature,tier,day")
    assert {(r["feature"], r["tier"], r["day"], r["currency"]) for r in rows} == {
        ("chat", "large", "2026-11-30", "USD"),
        ("chat", "large", "2026-12-01", "USD"),
        ("chat", "small", "2026-12-01", None),
        ("summarize", "small", "2026-12-01", "CNY"),
    }
    rows = report(ledger, by=["metadata.tenant"])
    assert {r["metadata.tenant"] for r in rows} == {None, "acme"}
    with pytest.raises(ValueError):
        report(ledger, by="colour")


def test_since_until_and_parse_time(ledger):
    rows = report(ledger, by="feature", since="2026-12-01")
    assert sum(r["attempts"] for r in rows) == 3
    rows = report(ledger, by="feature", since="1d", now=DAY2 + 10)
    assert sum(r["attempts"] for r in rows) == 3
    rows = report(ledger, by="feature", until="2026-12-01T00:00:00Z")
    assert sum(r["attempts"] for r in rows) == 2
    assert parse_time("24h", now=1000.0 + 86400) == 1000.0
    with pytest.raises(ValueError):
        parse_time("last tuesday")


def test_reporting_currency_totals(ledger):
    rows = report(ledger, by="feature", rates=ExchangeRates("USD", {"CNY": D("0.14")}))
    summ = next(r for r in rows if r["feature"] == "summarize")
    assert summ["cost_in_reporting_currency"] == D("0.070")
    total = next(t for t in rows.totals if t.get("in_reporting_currency"))
    assert total["cost"] == D("0.004784") + D("0.070") and total["requests"] == 4
    assert total["unpriced_attempts"] == 1


def test_reprice_at_another_platform(ledger):
    rows = report(ledger, by="feature", reprice="fireworks")
    chat = next(r for r in rows if r["feature"] == "chat" and r["currency"] == "USD")
    # 70B class on Fireworks is $0.90 in = out, no cached rate: (4000 + 600) x 0.90 per million.
    assert chat["reprice_cost"] == D("0.00414") and chat["reprice_currency"] == "USD"
    unpriced_row = next(r for r in rows if r["currency"] is None)
    # Qwen2.5-7B-Instruct is 7b class (SiliconFlow entry): Fireworks 8B at 0.20 -> 110 x 0.20.
    assert unpriced_row["reprice_cost"] == D("0.000022")
    rows = report(ledger, by="feature", reprice="bailian")  # no classed models there
    assert all(r["reprice_unpriced"] == r["attempts"] for r in rows)
    with pytest.raises(ValueError):
        report(ledger, reprice="nowhere")
    assert PriceBook().class_of(TG70) == "70b"


def test_jsonl_ledger_and_records_iterable(tmp_path):
    path = tmp_path / "l.jsonl"
    with JSONLSink(path) as sink:
        for rec in records():
            sink.write(rec)
    a = report(path, by="feature,tier")
    b = report(records(), by="feature,tier")
    assert list(a) == list(b) and a.totals == b.totals


def test_percentile():
    assert percentile([], 50) is None
    assert percentile([5.0], 95) == 5.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([10.0, 20.0], 95) == pytest.approx(19.5)


def test_cli_json_shape(ledger, capsys):
    assert main(["--ledger", str(ledger), "--by", "feature,tier,provider,model,day", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"groups", "totals"}
    for g in doc["groups"]:
        for k in ("feature", "tier", "provider", "model", "day", "requests", "input_tokens", "output_tokens",
                  "cached_tokens", "cost", "currency"):  # fmt: skip
            assert k in g
    usd = sum(D(g["cost"]) for g in doc["groups"] if g["currency"] == "USD")
    assert usd == D("0.004784")  # amounts are exact decimal strings, not floats
    assert {t["currency"] for t in doc["totals"]} == {"USD", "CNY", None}


def test_cli_table_csv_and_config(ledger, tmp_path, capsys):
    assert main(["--ledger", str(ledger), "--by", "feature", "--since", "3650d"]) == 0
    out = capsys.readouterr().out
    assert "chat" in out and "0.004784" in out and "total currency" in out
    csv_path = tmp_path / "r.csv"
    assert main(["--ledger", str(ledger), "--format", "csv", "--out", str(csv_path)]) == 0
    assert csv_path.read_text().splitlines()[0].startswith("feature,requests,")
    cfg = tmp_path / "llmroute.toml"
    cfg.write_text(f'[pricing]\nreporting_currency = "USD"\n[pricing.exchange_rates]\nCNY = 0.14\n[ledger]\npath = "{ledger.name}"\n')
    assert main(["--config", str(cfg), "--format", "json"]) == 0  # ledger path from the config
    doc = json.loads(capsys.readouterr().out)
    assert any(t.get("in_reporting_currency") for t in doc["totals"])


def test_cli_errors_are_one_line(tmp_path, capsys):
    assert main(["--ledger", str(tmp_path / "missing.db")]) == 2
    assert "no ledger" in capsys.readouterr().err
    (tmp_path / "x.db").write_text("")
    assert main(["--ledger", str(tmp_path / "x.db"), "--by", "nope"]) == 2
    assert "unknown key 'nope'" in capsys.readouterr().err
    bad = tmp_path / "bad.toml"
    bad.write_text("[pricing]\nstrict = 3\n")
    assert main(["--ledger", str(tmp_path / "x.db"), "--config", str(bad)]) == 2


def test_cli_html_has_charts_and_needs_no_server(ledger, tmp_path, capsys):
    out = tmp_path / "r.html"
    assert main(["--ledger", str(ledger), "--by", "feature,tier", "--format", "html", "--out", str(out),
                 "--config", _rates_config(tmp_path)]) == 0  # fmt: skip
    text = out.read_text()
    assert text.startswith("<!doctype html>")
    assert "<script" not in text and "http://" not in text.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in text
    svgs = [s for s in text.split("<svg")[1:]]
    assert len(svgs) == 2  # CNY converted to USD: one currency, two charts
    assert "cost per feature per day (USD)" in text and "cost share by tier (USD)" in text
    for chunk in svgs:
        ET.fromstring("<svg" + chunk.split("</svg>")[0] + "</svg>")  # well-formed SVG
    # One bar segment per (day, feature) with priced cost: 2026-11-30 chat, 2026-12-01 chat, summarize.
    assert text.count("<rect x=") - text.count('width="10" height="10"') - text.count('width="12" height="12"') == 3
    assert "large:" in text and "small:" in text


def _rates_config(tmp_path) -> str:
    cfg = tmp_path / "rates.toml"
    cfg.write_text('[pricing]\nreporting_currency = "USD"\n[pricing.exchange_rates]\nCNY = 0.14\n')
    return str(cfg)
