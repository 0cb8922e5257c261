"""`llmroute report` over a real ledger: the client's own records of calls to the real llama.cpp server
(config-priced), two features, one of them streamed; JSON and HTML from the command, rows from Python."""

from __future__ import annotations

import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from llmroute import Client
from llmroute.accounting.report import report
from tests.accounting._client import config
from tests.providers.helpers import drain
from tests.servers.llamacpp import MODEL_ALIAS

REPO = Path(__file__).resolve().parents[2]
PRICING = {f"local:{MODEL_ALIAS}": {"input_per_million": "0.05", "output_per_million": "0.10", "currency": "USD"}}


@pytest.fixture(scope="module")
def ledger(llama_server, tmp_path_factory):
    """(ledger path, {feature: [cost of each call]}): 3 calls for "keywords", 2 for "summary" (one streamed)."""
    path = tmp_path_factory.mktemp("report") / "ledger.db"
    cfg = config({"local": {"kind": "llamacpp", "base_url": llama_server.base_url}},
                 {"small": [f"local:{MODEL_ALIAS}"]}, pricing=PRICING,
                 ledger={"sink": "sqlite", "path": str(path), "flush_interval_s": 0.05})
    costs: dict[str, list[Decimal]] = {"keywords": [], "summary": []}
    with Client(config=cfg) as client:
        for text in ("今天上海下雨了", "the cat sat on the mat", "prices rose in March"):
            resp = client.chat.completions.create(
                model="small", messages=[{"role": "user", "content": f"Keywords: {text}"}], feature="keywords",
                max_tokens=4)
            costs["keywords"].append(resp.cost.amount)
        resp = client.chat.completions.create(
            model="small", messages=[{"role": "user", "content": "Summarize: rain in Shanghai."}], feature="summary",
            max_tokens=4)
        costs["summary"].append(resp.cost.amount)
        with client.chat.completions.create(
                model="small", messages=[{"role": "user", "content": "Summarize: a cat on a mat."}],
                feature="summary", max_tokens=4, stream=True) as stream:
            drain(stream)
        costs["summary"].append(stream.response.cost.amount)
    assert all(c is not None and c > 0 for cs in costs.values() for c in cs)
    return path, costs


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llmroute", "report", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120)


def test_report_json_groups_by_feature(ledger):
    path, costs = ledger
    out = _cli("--ledger", str(path), "--by", "feature", "--format", "json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    groups = {g["feature"]: g for g in doc["groups"]}
    assert set(groups) == {"keywords", "summary"}
    for feature, expected in costs.items():
        g = groups[feature]
        # llama.cpp closes keep-alive connections after a few requests: a resent request is one more
        # attempt (an error row, priced by estimate), so attempts = requests + resends.
        resends = g["attempts"] - len(expected)
        assert (g["requests"], g["errors"], g["currency"]) == (len(expected), resends, "USD")
        assert Decimal(g["cost"]) == sum(expected)  # exact: a call's cost includes its resend's estimate
        assert g["unpriced_attempts"] == 0 and g["estimated_attempts"] == resends
        assert g["latency_p50_ms"] > 0
    assert groups["summary"]["ttft_p50_ms"] is not None  # the streamed call has a TTFT
    (total,) = doc["totals"]
    assert total["requests"] == 5 and Decimal(total["cost"]) == sum(sum(c) for c in costs.values())


def test_report_html_has_inline_svg_charts(ledger, tmp_path):
    path, _ = ledger
    page = tmp_path / "report.html"
    out = _cli("--ledger", str(path), "--by", "feature,day", "--format", "html", "--out", str(page))
    assert out.returncode == 0, out.stderr
    html = page.read_text(encoding="utf-8")
    assert html.count("<svg") >= 2 and "keywords" in html and "summary" in html
    assert "<script" not in html and "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_report_from_python_is_exact(ledger):
    path, costs = ledger
    rows = report(path, by="feature")
    by_feature = {r["feature"]: r for r in rows}
    for feature, expected in costs.items():
        assert by_feature[feature]["cost"] == sum(expected)  # Decimal, exact
        assert by_feature[feature]["requests"] == len(expected)
    assert rows.totals[0]["cost"] == sum(sum(c) for c in costs.values())
