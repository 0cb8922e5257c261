"""`llmroute report` and `report(...)` over a real ledger written by the SQLite and JSONL sinks."""

from __future__ import annotations

import calendar
import json
import xml.etree.ElementTree as ET
from decimal import Decimal as D

import pytest

from llmroute.accounting.ledger import JSONLSink, LedgerRecord, SQLiteSink
from llmroute.accounting.prices import ExchangeRates, PriceBook
from llmroute.accounting.report import parse_time, percentile, report
from llmroute.cli.report_command import main
from llmroute.accounting.sinks import read_records

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
    # One row per feature (and currency): the unpriced self-hosted chat attempt joins chat's USD row,
    # counted in unpriced_attempts, instead of forming a second "chat" row.
    assert sorted((r["feature"], r["currency"]) for r in rows) == [("chat", "USD"), ("summarize", "CNY")]
    chat_usd = next(r for r in rows if r["feature"] == "chat")
    assert chat_usd["requests"] == 3 and chat_usd["attempts"] == 4 and chat_usd["errors"] == 1
    assert chat_usd["error_rate"] == pytest.approx(1 / 4)
    assert (chat_usd["input_tokens"], chat_usd["output_tokens"], chat_usd["cached_tokens"]) == (4100, 610, 200)
    assert chat_usd["cost"] == D("0.004784")  # 0.00104 + 0.00156 + 0.002184; the unpriced attempt adds nothing
    assert chat_usd["unpriced_attempts"] == 1  # never counted as 0 cost silently
    assert chat_usd["cost_per_request"] == D("0.002392")  # over the 2 priced requests
    assert chat_usd["latency_p50_ms"] == 200.0 and chat_usd["latency_p95_ms"] == pytest.approx(470.0)
    totals = {t["currency"]: t for t in rows.totals}
    assert totals["USD"]["cost"] == D("0.004784") and totals["CNY"]["cost"] == D("0.5")
    assert totals["USD"]["unpriced_attempts"] == 1 and None not in totals


def test_a_key_with_no_priced_attempt_is_one_unpriced_row():
    recs = [r for r in records() if r.request_id == "d"]
    rows = report(recs, by="feature")
    assert [(r["feature"], r["currency"], r["cost"], r["unpriced_attempts"]) for r in rows] == [("chat", None, None, 1)]


def test_no_feature_is_one_row_shown_as_none(tmp_path):
    from llmroute.accounting.report import to_table

    base = records()
    recs = [LedgerRecord(ts=DAY1, request_id="x", feature=None, cost=D("0.001"), currency="USD", priced=True),
            LedgerRecord(ts=DAY1, request_id="y", feature=None, cost=None, currency=None, priced=False,
                         status="error", error_type="ServerError"),
            base[0]]
    rows = report(recs, by="feature")
    none_rows = [r for r in rows if r["feature"] is None]
    assert len(none_rows) == 1 and none_rows[0]["attempts"] == 2 and none_rows[0]["currency"] == "USD"
    table = to_table(rows, ["feature"])
    assert sum(1 for line in table.splitlines() if line.startswith("(none)")) == 1


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
    # (4000 + 600) x 0.90 per million for the 70B attempts, plus the unpriced box attempt in the same row:
    # Qwen2.5-7B-Instruct is 7b class (SiliconFlow entry), Fireworks 8B at 0.20 -> 110 x 0.20 = 0.000022.
    assert chat["reprice_cost"] == D("0.00414") + D("0.000022") and chat["reprice_currency"] == "USD"
    rows = report(ledger, by="feature", reprice="bailian")  # no classed models there
    assert all(r["reprice_unpriced"] == r["attempts"] for r in rows)
    with pytest.raises(ValueError):
        report(ledger, reprice="nowhere")
    assert PriceBook().class_of(TG70) == "70b"


def test_a_range_or_region_that_can_hold_nothing_is_an_error(ledger, capsys):
    # Both printed a plausible report before: an empty one (until before since), or every attempt
    # "unpriced" at the new platform (a region it has no prices for).
    with pytest.raises(ValueError, match=r"--until \(2026-11-01\) is not after --since \(2026-12-01\)"):
        report(ledger, since="2026-12-01", until="2026-11-01")
    with pytest.raises(ValueError, match="region 'mars' .regions: cn-beijing, singapore, us."):
        report(ledger, reprice="bailian:mars")
    assert report(ledger, reprice="bailian:sg")  # an alias of a region it has: still a report
    assert main(["--ledger", str(ledger), "--reprice", "siliconflow:moon"]) == 2
    assert "--reprice: no prices for platform 'siliconflow' in region 'moon'" in capsys.readouterr().err


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
    assert "chat" in out and "0.004784" in out and "total cur" in out
    csv_path = tmp_path / "r.csv"
    assert main(["--ledger", str(ledger), "--format", "csv", "--out", str(csv_path)]) == 0
    assert csv_path.read_text().splitlines()[0].startswith("feature,requests,")
    cfg = tmp_path / "llmroute.toml"
    cfg.write_text(f'[pricing]\nreporting_currency = "USD"\n[pricing.exchange_rates]\nCNY = 0.14\n[ledger]\npath = "{ledger.name}"\n')
    assert main(["--config", str(cfg), "--format", "json"]) == 0  # ledger path from the config
    doc = json.loads(capsys.readouterr().out)
    assert any(t.get("in_reporting_currency") for t in doc["totals"])


def _long_ledger(tmp_path):
    """Records with long model and deployment names, several providers and days: the wide case."""
    path = tmp_path / "wide.db"
    model = "accounts/fireworks/models/qwen3-vl-30b-a3b-instruct-with-a-very-long-fine-tune-suffix"
    with SQLiteSink(path) as sink:
        for i in range(30):
            sink.write(LedgerRecord(
                ts=DAY1 + i * 3600, request_id=f"r{i}", feature=f"feature-number-{i % 3}-for-reports",
                tier="large" if i % 2 else "small", provider="fw", provider_kind="fireworks",
                deployment=f"fw:{model}", model=model, input_tokens=100 * (i + 1) * (i + 1), output_tokens=7 * i + 1,
                cost=D(1) / D(3) * D(i + 1) / D(1000), currency="USD", priced=True, latency_ms=100.0 + 40 * i,
                ttft_ms=10.0 + i))
    return path


def test_terminal_table_fits_120_columns_and_wide_shows_everything(tmp_path, capsys):
    path = _long_ledger(tmp_path)
    assert main(["--ledger", str(path), "--by", "feature,tier,provider,model,day"]) == 0
    narrow = capsys.readouterr().out
    assert max(len(line) for line in narrow.splitlines()) <= 120
    assert "…" in narrow and "--wide" in narrow  # long model names cut, and the way to see them
    assert main(["--ledger", str(path), "--by", "feature,tier,provider,model,day", "--wide"]) == 0
    wide = capsys.readouterr().out
    assert "accounts/fireworks/models/qwen3-vl-30b-a3b-instruct-with-a-very-long-fine-tune-suffix" in wide
    assert "latency_p50_ms" in wide and "cached_tokens" in wide and max(len(l) for l in wide.splitlines()) > 120


def test_csv_amounts_at_currency_precision(tmp_path):
    path = _long_ledger(tmp_path)
    out = tmp_path / "r.csv"
    assert main(["--ledger", str(path), "--by", "tier", "--format", "csv", "--out", str(out)]) == 0
    import csv as _csv

    rows = list(_csv.DictReader(out.open()))
    for row in rows:
        for col in ("cost", "cost_per_request"):
            whole, _, frac = row[col].partition(".")
            assert len(frac) == 6, (col, row[col])  # 0.000001 of the currency, not 28 digits
    # The JSON keeps the exact Decimal (a third of a cent is not rounded away there).
    exact = report(path, by="tier")
    assert len(str(exact[0]["cost"]).split(".")[1]) > 6


def test_latency_by_length_buckets(tmp_path, capsys):
    from llmroute.accounting.report import latency_by_length

    path = _long_ledger(tmp_path)
    rows = latency_by_length(r for r in read_records(path))
    inputs = {r["bucket"]: r for r in rows if r["tokens"] == "input"}
    outputs = {r["bucket"]: r for r in rows if r["tokens"] == "output"}
    # inputs are 100 x (i + 1)^2: 100 (i=0) in 0-256; 400, 900 in 256-1K; 1600..3600 (i=3..5) in 1K-4K ...
    assert inputs["0-256"]["attempts"] == 1 and inputs["256-1K"]["attempts"] == 2 and inputs["1K-4K"]["attempts"] == 3
    assert sum(r["attempts"] for r in inputs.values()) == 30 and sum(r["attempts"] for r in outputs.values()) == 30
    # latency grows with i, so the longest prompts are the slowest bucket: the view shows it.
    assert inputs[">=16K"]["latency_p95_ms"] > inputs["0-256"]["latency_p95_ms"]
    assert outputs["0-64"]["attempts"] == 9  # 7i + 1 < 64 for i = 0..8; i = 9 gives 64, the next bucket
    assert main(["--ledger", str(path), "--by", "tier", "--by-length"]) == 0
    text = capsys.readouterr().out
    assert "latency by length" in text and ">=16K" in text


def test_html_tables_scroll_inside_the_page(tmp_path):
    path = _long_ledger(tmp_path)
    out = tmp_path / "r.html"
    assert main(["--ledger", str(path), "--by", "feature,tier,provider,model,day", "--format", "html",
                 "--out", str(out)]) == 0
    page = out.read_text()
    assert ".scroll { overflow-x: auto" in page
    assert page.count('<div class="scroll"><table>') == 3  # groups, totals, latency by length
    assert "Latency by length" in page


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
