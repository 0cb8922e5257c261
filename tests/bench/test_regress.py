"""`--fail-if` rules: parsing, and failing or passing when they should."""

from __future__ import annotations

import pytest

from llmroute.bench.regress import check, parse_rule
from llmroute.errors import ConfigError


def result(target="small", c=5, p95_ttft=400.0, success_rate=1.0, rps=10.0):
    return {"target": target, "concurrency": c, "success_rate": success_rate, "requests_per_s": rps,
            "ttft_ms": {"p50": 200.0, "p95": p95_ttft, "p99": 500.0, "max": 600.0},
            "e2e_ms": {"p95": 2000.0}}


def doc(*results):
    return {"results": list(results)}


def test_parse_rules():
    r = parse_rule("p95_ttft>+20%")
    assert (r.path, r.op, r.value, r.relative) == (("ttft_ms", "p95"), ">", 0.2, True)
    r = parse_rule("success_rate<0.99")
    assert (r.path, r.op, r.value, r.relative) == (("success_rate",), "<", 0.99, False)
    assert parse_rule("p99_e2e>2s").value == pytest.approx(2000.0)
    assert parse_rule("max_itl > 150").value == pytest.approx(150.0)
    assert parse_rule("requests_per_s<-10%").value == pytest.approx(-0.1)
    for bad in ("p95_ttft", "p42_ttft>1s", "p95_speed>1s", "speed<3", "success_rate<high", "p95_ttft>x%"):
        with pytest.raises(ConfigError) as err:
            parse_rule(bad)
        assert "--fail-if" in str(err.value)


def test_relative_rule_fails_past_the_margin_and_passes_within():
    rules = [parse_rule("p95_ttft>+20%")]
    base = doc(result(p95_ttft=400.0))
    assert check(doc(result(p95_ttft=470.0)), rules, base).ok
    verdict = check(doc(result(p95_ttft=490.0)), rules, base)
    assert not verdict.ok
    (msg,) = verdict.failures
    assert "small c=5" in msg and "p95_ttft" in msg and "490.0 ms" in msg and "480.0 ms" in msg


def test_absolute_rule_needs_no_baseline():
    rules = [parse_rule("success_rate<0.99")]
    assert check(doc(result(success_rate=0.995)), rules).ok
    verdict = check(doc(result(success_rate=0.98), result(target="big", c=5)), rules)
    assert len(verdict.failures) == 1 and verdict.failures[0].startswith("small c=5")


def test_throughput_drop_rule():
    rules = [parse_rule("requests_per_s<-10%")]
    base = doc(result(rps=10.0))
    assert check(doc(result(rps=9.5)), rules, base).ok
    assert not check(doc(result(rps=8.5)), rules, base).ok


def test_levels_are_matched_by_target_and_concurrency():
    rules = [parse_rule("p95_ttft>+20%")]
    base = doc(result(c=5, p95_ttft=100.0), result(c=20, p95_ttft=1000.0))
    verdict = check(doc(result(c=20, p95_ttft=1100.0), result(c=50, p95_ttft=5000.0)), rules, base)
    assert verdict.ok  # c=20 within 20%; c=50 has no baseline
    assert any("c=50" in n and "no baseline" in n for n in verdict.notes)


def test_missing_values_fail_closed_and_relative_rules_need_a_baseline():
    rules = [parse_rule("p95_ttft>2s")]
    assert not check(doc(result(p95_ttft=None)), rules).ok
    assert not check(doc(), rules).ok
    with pytest.raises(ConfigError, match="--baseline"):
        check(doc(result()), [parse_rule("p95_ttft>+20%")])
