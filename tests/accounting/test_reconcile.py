"""`llmroute report --reconcile`: a month of synthetic ledger rows against a platform export with known
differences, each found on its day and model with its cause; every other day matches to the cent.

The ledger rows are priced by the shipped table (compute_cost) as a call would be; the export is what
the platform would bill for the same traffic, plus the differences planted below.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import replace
from datetime import datetime, timezone
from decimal import Decimal

import pytest

from llmroute.accounting.cost import compute_cost
from llmroute.accounting.ledger import LedgerRecord
from llmroute.accounting.prices import load_price_table
from llmroute.accounting.reconcile import parse_offset, read_export, reconcile
from llmroute.cli.report_command import main as report_main

TABLE = load_price_table()
PLUS = TABLE.get("bailian", "cn-beijing", "qwen-plus")
FLASH = TABLE.get("bailian", "cn-beijing", "qwen-flash")
DAYS = [f"2026-11-{d:02d}" for d in range(1, 31)]


def _ts(day: str, hour: int) -> float:
    return datetime.fromisoformat(day).replace(hour=hour, tzinfo=timezone.utc).timestamp()


def _record(day: str, hour: int, model: str, price, prompt: int, completion: int, cached: int = 0, *,
            n: int, priced: bool = True, estimated: bool = False, kind: str = "bailian") -> LedgerRecord:
    cost = compute_cost(price if priced else None, prompt_tokens=prompt, completion_tokens=completion,
                        cached_tokens=cached, estimated=estimated)
    return LedgerRecord.from_cost(cost, ts=_ts(day, hour), request_id=f"{day}-{model}-{n}", provider=kind,
                                  provider_kind=kind, deployment=f"{kind}:{model}", model=model,
                                  usage_estimated=estimated)


def _bill(price, prompt: int, completion: int, cached: int = 0) -> Decimal:
    return compute_cost(price, prompt_tokens=prompt, completion_tokens=completion, cached_tokens=cached).amount


def month():
    """(ledger records, export rows as dicts): identical except for the planted differences."""
    records: list[LedgerRecord] = []
    export: dict[tuple[str, str], dict] = {}

    def bill(day, model, prompt, completion, cached, amount):
        row = export.setdefault((day, model), {"date": day, "model": model, "input_tokens": 0, "output_tokens": 0,
                                               "cached_tokens": 0, "amount": Decimal(0)})
        row["input_tokens"] += prompt
        row["output_tokens"] += completion
        row["cached_tokens"] += cached
        row["amount"] += amount

    for i, day in enumerate(DAYS):
        for n in range(4):
            prompt, completion, cached = 1000 + 100 * i + 10 * n, 200 + n, 300 if n % 2 else 0
            for model, price in (("qwen-plus", PLUS), ("qwen-flash", FLASH)):
                unpriced = day == "2026-11-10" and model == "qwen-flash" and n < 2
                records.append(_record(day, 9 + n, model, price, prompt, completion, cached, n=n, priced=not unpriced))
                if not (day == "2026-11-25" and model == "qwen-flash"):  # not on the bill
                    bill(day, model, prompt, completion, cached, _bill(price, prompt, completion, cached))
        # Another platform's traffic on the same days: not in a Bailian export, left out by --platform.
        records.append(_record(day, 12, "accounts/fireworks/models/gpt-oss-120b",
                               TABLE.get("fireworks", None, "accounts/fireworks/models/gpt-oss-120b"), 500, 50,
                               n=9, kind="fireworks"))
    # 11-05 qwen-plus: someone called qwen-plus with the same key from outside llmroute.
    bill("2026-11-05", "qwen-plus", 10_000, 500, 0, _bill(PLUS, 10_000, 500))
    # 11-15 qwen-plus: one answer came without usage; llmroute counted 1180 + 190 tokens, the bill says 1234 + 210.
    records.append(_record("2026-11-15", 20, "qwen-plus", PLUS, 1180, 190, n=7, estimated=True))
    bill("2026-11-15", "qwen-plus", 1234, 210, 0, _bill(PLUS, 1234, 210))
    # 11-20 qwen-plus: a 200K-token prompt the ledger priced at the first tier (an old catalogue without
    # tiers); the bill prices it at the 128K-256K tier.
    first_tier = replace(PLUS, tiers=())
    records.append(_record("2026-11-20", 21, "qwen-plus", first_tier, 200_000, 1000, n=8))
    bill("2026-11-20", "qwen-plus", 200_000, 1000, 0, _bill(PLUS, 200_000, 1000))
    # 11-28: qwen-max on the bill, never called through llmroute.
    bill("2026-11-28", "qwen-max", 5000, 400, 0, Decimal("0.0126"))
    return records, list(export.values())


def _csv(rows) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=["date", "model", "input_tokens", "output_tokens", "cached_tokens", "amount",
                                        "currency"], lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({**r, "amount": str(r["amount"]), "currency": "CNY"})
    return buf.getvalue()


EXPECTED = {
    ("2026-11-05", "qwen-plus"): "requests made outside llmroute: the bill counts 10500 more tokens",
    ("2026-11-10", "qwen-flash"): "unpriced traffic: 2 attempt(s) with no price",
    ("2026-11-15", "qwen-plus"): "estimated usage: 1 attempt(s)",
    ("2026-11-20", "qwen-plus"): "tier or thinking rates: the same tokens cost more on the bill (1 request(s) with "
                                 "prompts over 131072 tokens)",
    ("2026-11-25", "qwen-flash"): "not on the bill",
    ("2026-11-28", "qwen-max"): "requests made outside llmroute: the ledger has no call",
}


def test_a_month_reconciles_with_each_planted_difference_found():
    records, export_rows = month()
    export = read_export(_csv(export_rows), name="bill.csv")
    rows = reconcile(records, export, platform="bailian")
    assert len(rows) == 30 * 2 + 1
    off = {(r.day, r.model): r for r in rows if not r.matches}
    assert set(off) == set(EXPECTED)
    for key, cause in EXPECTED.items():
        assert off[key].cause.startswith(cause), (key, off[key].cause)
    for r in rows:
        if (r.day, r.model) not in EXPECTED:
            assert r.difference == 0 and r.ledger_input == r.platform_input and r.currency == "CNY", r
    # The planted differences, to the cent: the tier day is billed 200000 x (2.4 - 0.8) + 1000 x (20 - 2) more.
    tier = off[("2026-11-20", "qwen-plus")]
    assert tier.difference == Decimal("0.338")
    assert off[("2026-11-05", "qwen-plus")].difference == _bill(PLUS, 10_000, 500) == Decimal("0.009")
    unpriced = off[("2026-11-10", "qwen-flash")]
    assert unpriced.difference == sum(_bill(FLASH, 1000 + 900 + 10 * n, 200 + n, 300 if n % 2 else 0) for n in (0, 1))
    assert off[("2026-11-25", "qwen-flash")].platform_amount is None
    # Without --platform, only the export's models are compared: the Fireworks rows stay out either way.
    assert [r.model for r in reconcile(records, export) if "fireworks" in r.model] == []


def test_the_command_prints_each_day_and_model_and_the_causes(tmp_path, capsys):
    records, export_rows = month()
    ledger = tmp_path / "ledger.jsonl"
    ledger.write_text("".join(r.to_json() + "\n" for r in records), encoding="utf-8")
    bill = tmp_path / "bill.csv"
    bill.write_text(_csv(export_rows), encoding="utf-8")
    assert report_main(["--ledger", str(ledger), "--reconcile", str(bill), "--platform", "bailian"]) == 0
    out = capsys.readouterr().out
    assert "55 of 61 day/model rows match:" in out
    for (day, model), cause in EXPECTED.items():
        assert f"  {day} {model}: {cause}" in out
    assert "2026-11-20  qwen-plus" in out
    # JSON export (a list of objects under "data") reads the same; --format json keeps amounts exact.
    doc = {"data": [{**r, "amount": str(r["amount"])} for r in export_rows]}
    bill_json = tmp_path / "bill.json"
    bill_json.write_text(json.dumps(doc), encoding="utf-8")
    assert report_main(["--ledger", str(ledger), "--reconcile", str(bill_json), "--platform", "bailian",
                        "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {(r["day"], r["model"]) for r in rows if r["cause"] != "matches"} == set(EXPECTED)
    assert Decimal(next(r for r in rows if r["day"] == "2026-11-20" and r["model"] == "qwen-plus")["difference"]) == Decimal("0.338")


@pytest.mark.parametrize("tolerance", ["-0.01", "inf", "NaN"])
def test_a_tolerance_that_would_decide_every_row_is_refused(tmp_path, capsys, tolerance):
    # inf called every planted difference a match, a negative one or NaN none, even an exact row.
    records, export_rows = month()
    ledger = tmp_path / "ledger.jsonl"
    ledger.write_text("".join(r.to_json() + "\n" for r in records), encoding="utf-8")
    bill = tmp_path / "bill.csv"
    bill.write_text(_csv(export_rows), encoding="utf-8")
    assert report_main(["--ledger", str(ledger), "--reconcile", str(bill), "--tolerance", tolerance]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and f"--tolerance must be a finite amount >= 0, got {tolerance!r}" in captured.err


def test_bill_days_follow_the_bill_timezone():
    rec = _record("2026-11-01", 20, "qwen-plus", PLUS, 1000, 10, n=0)  # 20:00 UTC = 04:00 on the 2nd in Beijing
    text = f"date,model,input_tokens,output_tokens,amount\n2026-11-02,qwen-plus,1000,10,{rec.cost}\n"
    rows = reconcile([rec], read_export(text, name="b.csv"), offset=parse_offset("+08:00"))
    assert [(r.day, r.cause) for r in rows] == [("2026-11-02", "matches")]
    rows = reconcile([rec], read_export(text, name="b.csv"))
    assert rows[0].cause.startswith("requests made outside llmroute")


@pytest.mark.parametrize("text, message", [
    ("day,model,tokens\n2026-11-01,qwen-plus,5\n", "b.csv: no amount column"),
    ("date,model,input_tokens,amount\n2026-11-01,qwen-plus,12.5,0.1\n", "b.csv:2: input_tokens '12.5' must be a whole"),
    ("date,model,amount\nyesterday,qwen-plus,0.1\n", "b.csv:2: date 'yesterday' is not a date"),
    ("date,model,amount\n2026-11-01,qwen-plus,0.1\n2026-11-02,qwen-plus,lots\n", "b.csv:3: amount 'lots' is not a number"),
    ('[{"date": "2026-11-01", "model": "", "amount": 1}]', "b.csv: [0]: the model is empty"),
    ("{not json", "b.csv:1: not valid JSON"),
])
def test_a_bad_export_names_the_file_and_line(text, message):
    with pytest.raises(ValueError) as e:
        read_export(text, name="b.csv")
    assert str(e.value).startswith(message), str(e.value)


def test_console_column_names_and_currency_marks_are_read():
    text = "日期,模型名称,输入Token,输出Token,缓存命中Token,金额\n2026/11/01,qwen-plus,1000,10,0,¥0.00082\n"
    [row] = read_export(text, name="console.csv")
    assert (row.day, row.model, row.input_tokens, row.amount, row.currency) == (
        "2026-11-01", "qwen-plus", 1000, Decimal("0.00082"), "CNY")


def test_fireworks_billing_metrics_csv_compares_tokens():
    # docs.fireworks.ai/accounts/exporting-billing-metrics: one row per usage event, tokens and no dollars.
    text = ("email,start_time,end_time,usage_type,accelerator_type,accelerator_seconds,base_model_name,model_bucket,"
            "parameter_count,prompt_tokens,completion_tokens\n"
            "a@example.com,2026-11-03 10:00:01 UTC,2026-11-03 10:00:02 UTC,TEXT_COMPLETION_INFERENCE_USAGE,,0,"
            "accounts/fireworks/models/gpt-oss-120b,,,500,50\n"
            "a@example.com,2026-11-03 11:00:01 UTC,2026-11-03 11:00:02 UTC,TEXT_COMPLETION_INFERENCE_USAGE,,0,"
            "accounts/fireworks/models/gpt-oss-120b,,,700,70\n")
    [row] = read_export(text, name="billing_metrics.csv")
    assert (row.day, row.input_tokens, row.output_tokens, row.amount) == ("2026-11-03", 1200, 120, None)
    price = TABLE.get("fireworks", None, "accounts/fireworks/models/gpt-oss-120b")
    recs = [_record("2026-11-03", 10, "accounts/fireworks/models/gpt-oss-120b", price, 500, 50, n=0, kind="fireworks")]
    [only] = reconcile(recs, [row], platform="fireworks")
    assert only.cause.startswith("requests made outside llmroute: the bill counts 770 more tokens")
    recs.append(_record("2026-11-03", 11, "accounts/fireworks/models/gpt-oss-120b", price, 700, 70, n=1,
                        kind="fireworks"))
    [both] = reconcile(recs, [row], platform="fireworks")
    assert both.matches and both.difference is None and both.platform_amount is None
