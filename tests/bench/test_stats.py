"""Per-request timing, percentiles, per-level figures, goodput, intervals and knee detection."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmroute.bench.stats import (
    RequestRecord,
    StreamTiming,
    distribution_ms,
    early_vs_rest,
    find_knees,
    interval_figures,
    level_figures,
    meets_slo,
    parse_slo,
    percentile,
)
from llmroute.errors import ConfigError


def rec(start=0.0, e2e=1.0, ttft=0.2, out=11, ok=True, itl=(), inp=5, error=None, source="usage", **kw):
    return RequestRecord(target="t", level=1, phase="measured", index=0, start_s=start, ok=ok, e2e_s=e2e,
                         ttft_s=ttft, itl_s=list(itl), output_tokens=out if ok else None, input_tokens=inp,
                         tokens_source=source, error_type=error, **kw)


def test_percentile_linear_interpolation_matches_numpy_default():
    values = [15, 20, 35, 40, 50]
    assert percentile(values, 0) == 15
    assert percentile(values, 100) == 50
    assert percentile(values, 50) == 35
    # numpy.percentile([15,20,35,40,50], 40) == 29.0, 90 -> 46.0
    assert percentile(values, 40) == pytest.approx(29.0)
    assert percentile(values, 90) == pytest.approx(46.0)
    assert percentile([7.0], 99) == 7.0
    assert percentile([], 50) is None
    with pytest.raises(ValueError):
        percentile(values, 101)


@given(st.lists(st.floats(min_value=-1e6, max_value=1e6), min_size=1, max_size=60), st.floats(0, 100))
def test_percentile_lies_between_min_and_max_and_is_monotone(values, p):
    v = percentile(values, p)
    assert min(values) - 1e-6 <= v <= max(values) + 1e-6
    assert percentile(values, min(p + 5, 100)) >= v - 1e-6


def test_stream_timing_ignores_empty_chunks_and_measures_gaps():
    t = StreamTiming(start=10.0)
    t.on_chunk(10.05, "")  # role chunk: no content, no token
    t.on_chunk(10.2, "Hel")
    t.on_chunk(10.25, None)
    t.on_chunk(10.3, "lo")
    t.on_chunk(10.45, "!")
    t.on_chunk(10.46, None)  # usage-only chunk
    t.on_end(10.5)
    assert t.ttft_s == pytest.approx(0.2)
    assert t.itl_s == pytest.approx([0.1, 0.15])
    assert t.e2e_s == pytest.approx(0.5)
    assert t.text == "Hello!"


def test_stream_with_no_content_has_no_ttft():
    t = StreamTiming(start=0.0)
    t.on_chunk(0.1, "")
    t.on_end(0.2)
    assert t.ttft_s is None and t.itl_s == [] and t.e2e_s == pytest.approx(0.2)


def test_tpot_formula_and_single_token_case():
    assert rec(e2e=1.2, ttft=0.2, out=11).tpot_s == pytest.approx(0.1)
    assert rec(out=1).tpot_s is None
    assert rec(ok=False, error="ServerError").tpot_s is None


def test_parse_slo_units_and_errors():
    assert parse_slo("ttft=1s,tpot=50ms,e2e=8s") == {"ttft": 1.0, "tpot": 0.05, "e2e": 8.0}
    assert parse_slo("ttft=250") == {"ttft": 0.25}  # bare numbers are milliseconds
    assert parse_slo(None) == {} and parse_slo("") == {}
    for bad in ("ttft", "speed=1s", "ttft=fast", "ttft=1s,ttft=2s", "ttft=-1s"):
        with pytest.raises(ConfigError) as err:
            parse_slo(bad)
        assert "--slo" in str(err.value)


def test_meets_slo_requires_every_limit():
    slos = {"ttft": 0.5, "tpot": 0.05, "e2e": 2.0}
    assert meets_slo(rec(ttft=0.3, e2e=0.8, out=11), slos)  # tpot 0.05
    assert not meets_slo(rec(ttft=0.6, e2e=0.8), slos)
    assert not meets_slo(rec(ttft=0.3, e2e=1.5, out=11), slos)  # tpot 0.12
    assert not meets_slo(rec(ttft=0.3, e2e=2.5, out=1000), slos)
    assert meets_slo(rec(ttft=0.3, e2e=1.9, out=1), slos)  # one token: no TPOT to break
    assert not meets_slo(rec(ok=False, error="ServerError"), slos)
    assert not meets_slo(rec(ttft=None), {"ttft": 1.0})


def test_level_figures_counts_rates_and_breakdown():
    records = [
        rec(start=0.0, e2e=1.0, ttft=0.1, out=11, itl=[0.09] * 10, inp=5),
        rec(start=0.5, e2e=1.5, ttft=0.3, out=21, itl=[0.06] * 20, inp=5),
        rec(start=1.0, e2e=1.0, ttft=0.2, out=1, inp=5, source="tokenizer"),
        rec(start=1.0, e2e=0.1, ok=False, error="RateLimitError"),
        rec(start=1.5, e2e=0.1, ok=False, error="RateLimitError"),
        rec(start=1.5, e2e=0.2, ok=False, error="TimeoutError"),
    ]
    fig = level_figures(records, slos={"ttft": 0.25}, window_s=4.0)
    assert fig["requests"] == 6 and fig["successes"] == 3 and fig["errors"] == 3
    assert fig["success_rate"] == 0.5
    assert fig["error_breakdown"] == {"RateLimitError": 2, "APITimeoutError": 1}  # an old name, read as the new
    assert fig["requests_per_s"] == pytest.approx(0.75)
    assert fig["output_tokens_per_s"] == pytest.approx(33 / 4)
    assert fig["total_tokens_per_s"] == pytest.approx(48 / 4)
    assert fig["goodput_per_s"] == pytest.approx(2 / 4)  # ttft 0.1 and 0.2 meet 250 ms
    assert fig["ttft_ms"]["p50"] == pytest.approx(200.0)
    assert fig["ttft_ms"]["max"] == pytest.approx(300.0)
    assert fig["ttft_ms"]["count"] == 3
    assert fig["tpot_ms"]["count"] == 2  # the 1-token answer has none
    assert fig["tpot_ms"]["max"] == pytest.approx(90.0)  # (1.0 - 0.1) / 10
    assert fig["tpot_ms"]["min"] == pytest.approx(60.0)  # (1.5 - 0.3) / 20
    assert fig["itl_ms"]["count"] == 30
    assert fig["e2e_ms"]["p99"] <= 1500.0
    assert fig["output_tokens_estimated"] == 1
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        assert set(fig[key]) >= {"p50", "p90", "p95", "p99", "max"}


def test_level_figures_default_window_and_empty_level():
    fig = level_figures([rec(start=1.0, e2e=1.0), rec(start=2.0, e2e=2.0)])
    assert fig["duration_s"] == pytest.approx(3.0)
    assert fig["requests_per_s"] == pytest.approx(2 / 3)
    empty = level_figures([])
    assert empty["requests"] == 0 and empty["success_rate"] is None and empty["requests_per_s"] is None
    assert empty["ttft_ms"]["p95"] is None


def test_distribution_ms_skips_none():
    d = distribution_ms([0.1, None, 0.3])
    assert d["count"] == 2 and d["p50"] == pytest.approx(200.0) and d["mean"] == pytest.approx(200.0)


def test_interval_figures_place_requests_by_end_time():
    records = [rec(start=s, e2e=0.5, ttft=0.1 if s < 60 else 0.4, out=3) for s in range(0, 150, 10)]
    records.append(rec(start=20, e2e=0.5, ok=False, error="ServerError"))
    ivs = interval_figures(records, interval_s=60, origin_s=0.0, end_s=150.0)
    assert [iv["start_s"] for iv in ivs] == [0, 60, 120]
    assert [iv["requests"] for iv in ivs] == [7, 6, 3]
    assert ivs[0]["errors"] == 1
    assert ivs[2]["length_s"] == pytest.approx(30.0)
    assert ivs[2]["requests_per_s"] == pytest.approx(3 / 30)
    assert ivs[0]["ttft_p95_ms"] == pytest.approx(100.0) and ivs[1]["ttft_p95_ms"] == pytest.approx(400.0)
    assert interval_figures([], interval_s=60, origin_s=0) == []


def test_early_vs_rest_shows_a_slow_start():
    records = [rec(start=s, ttft=1.0 if s < 60 else 0.2) for s in range(0, 300, 5)]
    drift = early_vs_rest(records, split_s=60, origin_s=0.0)
    assert drift["first"]["ttft_p95_ms"] == pytest.approx(1000.0)
    assert drift["rest"]["ttft_p95_ms"] == pytest.approx(200.0)
    assert early_vs_rest(records[:3], split_s=60, origin_s=0.0) is None


def _res(target, c, ttft, e2e):
    return {"target": target, "concurrency": c, "ttft_ms": {"p95": ttft}, "e2e_ms": {"p95": e2e}}


def test_knee_flags_growth_much_faster_than_concurrency():
    results = [_res("a", 5, 100, 1000), _res("a", 20, 120, 1100), _res("a", 50, 650, 2000),
               _res("b", 5, 100, 1000), _res("b", 50, 300, 3000)]
    knees = find_knees(results, factor=2.0)
    assert [(k["target"], k["metric"], k["from_level"], k["to_level"]) for k in knees] == [("a", "p95_ttft", 20, 50)]
    assert "5.4x" in knees[0]["message"] and "20 -> 50" in knees[0]["message"]


def test_knee_sorts_levels_and_handles_missing_and_rates():
    results = [_res("a", 50, 1000, None), _res("a", 5, 100, None)]
    assert find_knees(results) == []  # 10x latency over 10x load: proportional, not a knee
    results = [{"target": "r", "rate": 1.0, "ttft_ms": {"p95": 100}, "e2e_ms": {"p95": None}},
               {"target": "r", "rate": 2.0, "ttft_ms": {"p95": 500}, "e2e_ms": {"p95": None}}]
    (knee,) = find_knees(results)
    assert knee["load"] == "rate" and knee["growth"] == 5.0
    assert math.isclose(knee["load_ratio"], 2.0)
