"""The result document, the summary table and the HTML report, from a hand-built run."""

from __future__ import annotations

import re

import pytest

from llmroute.bench.html import line_chart, nice_ticks, render_html
from llmroute.bench.document import build_report, summary_text
from llmroute.bench.runner import BenchRun, LevelRun, LoadPlan
from llmroute.bench.stats import RequestRecord


def _run(target="small", ttft_by_level=None):
    ttft_by_level = ttft_by_level or {5: 0.1, 20: 0.12, 50: 0.7}
    plan = LoadPlan(targets=[target], concurrency=list(ttft_by_level), requests=20)
    run = BenchRun(plan=plan)
    run.records.append(RequestRecord(target=target, level=0, phase="first", index=0, start_s=100.0, ok=True,
                                     e2e_s=3.0, ttft_s=2.5, output_tokens=5, connect_s=0.4, deployment="p:m"))
    t = 104.0
    for level, ttft in ttft_by_level.items():
        start = t
        for i in range(20):
            ok = i != 7
            run.records.append(RequestRecord(
                target=target, level=level, phase="measured", index=i, start_s=t, ok=ok, e2e_s=ttft + 0.5,
                ttft_s=ttft if ok else None, itl_s=[0.05] * 10 if ok else [], output_tokens=11 if ok else None,
                input_tokens=7, tokens_source="usage", error_type=None if ok else "OverloadedError",
                deployment="p:m" if ok else None))
            t += 0.1
        run.levels.append(LevelRun(target=target, mode="concurrency", level=level, window_start_s=start,
                                   window_end_s=t + ttft + 0.5, stopped_by="requests"))
        t += 2
    return run


def test_report_holds_every_figure_first_request_and_knee():
    report = build_report(_run(), slos={"ttft": 0.5})
    assert [r["concurrency"] for r in report["results"]] == [5, 20, 50]
    res = report["results"][0]
    assert res["requests"] == 20 and res["success_rate"] == pytest.approx(0.95)
    assert res["error_breakdown"] == {"OverloadedError": 1}
    assert res["ttft_ms"]["p50"] == pytest.approx(100.0)
    assert res["slo"] == {"ttft": 500.0}
    assert report["results"][2]["goodput_per_s"] == 0.0  # 700 ms TTFT misses the 500 ms SLO
    (first,) = report["first_requests"]
    assert first["ttft_ms"] == pytest.approx(2500.0) and first["connect_ms"] == pytest.approx(400.0)
    assert first["ttft_after_connect_ms"] == pytest.approx(2100.0)
    assert first["steady_ttft_p50_ms"] == pytest.approx(100.0)
    # the cold 2.5 s request is not in any percentile
    assert all(r["ttft_ms"]["max"] < 1000 for r in report["results"])
    (knee,) = report["knees"]
    assert (knee["from_level"], knee["to_level"], knee["metric"]) == (20, 50, "p95_ttft")
    assert report["records"][0]["start_s"] == 0.0 and len(report["records"]) == 61
    text = summary_text(report)
    assert "knee: small: P95 TTFT grew" in text
    assert "OverloadedError x1" in text and "connect 400 ms" in text


def test_html_is_self_contained_and_escapes_names():
    report = build_report(_run(target="<b>x</b>"), slos={"ttft": 0.5})
    page = render_html(report)
    assert "<b>x</b>" not in page and "&lt;b&gt;x&lt;/b&gt;" in page
    assert "<script" not in page and "<link" not in page and "src=" not in page
    assert page.count("<svg") == 3 + 2 + 1  # latency per metric, throughput x2, TTFT over time
    assert "TTFT over time" in page and "Per interval" in page and "First request" in page
    assert re.search(r"<polyline points=\"[\d., ]+\"", page)


def test_line_chart_with_no_data_says_so():
    assert "no data" in line_chart("t", "x", "y", [("a", [(1, None)])])


def test_nice_ticks_cover_the_range_with_round_steps():
    assert nice_ticks(0, 95) == [0, 20, 40, 60, 80, 100]
    assert nice_ticks(5, 50)[0] <= 5 and nice_ticks(5, 50)[-1] >= 50
    assert nice_ticks(0, 0) == [0, 0.2, 0.4, 0.6, 0.8, 1.0]
    ticks = nice_ticks(0, 0.0031)
    assert ticks[-1] >= 0.0031 and len(ticks) <= 8


def test_concurrency_axes_get_integer_ticks():
    assert nice_ticks(1, 2) == [1.0, 1.2, 1.4, 1.6, 1.8, 2.0]  # a time or latency axis may
    assert nice_ticks(1, 2, integer=True) == [1, 2]  # a concurrency axis may not: 1.2 workers mean nothing
    assert nice_ticks(1, 4, integer=True) == [1, 2, 3, 4]
    svg = line_chart("TTFT p95", "concurrency", "ms", [("small", [(1, 10.0), (2, 20.0)])])
    labels = re.findall(r'text-anchor="middle">([^<]+)</text>', svg)
    assert "1.2" not in labels and "1" in labels and "2" in labels
