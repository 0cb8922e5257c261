"""`llmroute plan`: level choice, instance count and monthly costs."""

from __future__ import annotations

import json

import pytest

from llmroute.bench.plan import capacity_plan, choose_level, main, monthly_costs, parse_price
from llmroute.errors import ConfigError


def res(c, tok, rps, ok=1.0, good=None, slo=None):
    return {"target": "local", "concurrency": c, "output_tokens_per_s": tok, "requests_per_s": rps,
            "success_rate": ok, "goodput_per_s": good, "slo": slo, "mean_input_tokens": 100.0,
            "mean_output_tokens": tok / rps if rps else None}


REPORT = {"results": [res(1, 50, 0.25), res(8, 300, 1.5), res(32, 500, 2.5, ok=0.9)]}


def test_choose_level_takes_the_best_healthy_level():
    choice = choose_level(REPORT)
    assert (choice.level, choice.output_tokens_per_s) == (8, 300)  # 32 failed 10% of its requests
    assert choose_level(REPORT, level=32).output_tokens_per_s == 500
    with pytest.raises(ConfigError, match="--level"):
        choose_level(REPORT, level=4)
    with pytest.raises(ConfigError, match="--target"):
        choose_level({"results": REPORT["results"] + [dict(res(1, 1, 1), target="other")]})


def test_slos_scale_throughput_to_good_requests():
    report = {"results": [res(8, 300, 1.5, good=0.75, slo={"ttft": 1000}), res(4, 200, 1.0, good=1.0, slo={"ttft": 1000})]}
    choice = choose_level(report)
    assert choice.level == 4 and choice.output_tokens_per_s == 200  # 8 delivers only 150 good tokens/s


def test_capacity_plan_rounds_up_with_headroom():
    plan = capacity_plan(peak_rps=20, mean_output_tokens=300, per_instance_tokens_per_s=1000, headroom=0.2)
    assert plan["needed_output_tokens_per_s"] == 6000 and plan["instances"] == 8  # 6000 / 800 = 7.5
    assert capacity_plan(peak_rps=8, mean_output_tokens=100, per_instance_tokens_per_s=1000, headroom=0.2)["instances"] == 1
    assert capacity_plan(peak_rps=16, mean_output_tokens=100, per_instance_tokens_per_s=1000, headroom=0.2)["instances"] == 2
    with pytest.raises(ConfigError):
        capacity_plan(peak_rps=1, mean_output_tokens=1, per_instance_tokens_per_s=1, headroom=1.0)


def test_monthly_costs_per_billing_model():
    rows = monthly_costs(peak_rps=20, mean_rps=5, mean_input_tokens=500, mean_output_tokens=300,
                         per_instance_tokens_per_s=1000, headroom=0.2, hours_per_month=730,
                         per_instance=[("h100", 2.0)], per_token=[("cloud", 0.5, 1.5)])
    by = {r["billing"]: r for r in rows}
    assert by["per-instance"]["usd_per_month"] == pytest.approx(8 * 2.0 * 730)
    assert by["per-instance, autoscaled"]["instances"] == 2  # 5 * 300 / 800 -> 2
    requests = 5 * 3600 * 730
    assert by["per-token"]["usd_per_month"] == pytest.approx(requests * (500 * 0.5 + 300 * 1.5) / 1e6, rel=1e-6)


def test_parse_price():
    assert parse_price("together=0.88/1.2", option="--per-token", pair=True) == ("together", (0.88, 1.2))
    assert parse_price("h100=2.49", option="--per-instance", pair=False) == ("h100", (2.49,))
    for bad in ("x", "=1", "a=1/2/3", "a=b", "a=-1"):
        with pytest.raises(ConfigError):
            parse_price(bad, option="--per-token", pair=True)


def test_plan_command(tmp_path, capsys):
    bench = tmp_path / "r.json"
    bench.write_text(json.dumps(REPORT))
    out = tmp_path / "plan.json"
    rc = main(["--bench", str(bench), "--peak-rps", "10", "--mean-output-tokens", "200", "--mean-rps", "4",
               "--per-instance", "gpu=1.5", "--per-token", "cloud=0.2/0.6", "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "300.0 output tokens/s" in text and "9 instances" in text  # 2000 / 240 = 8.3
    plan = json.loads(out.read_text())
    assert plan["instances"] == 9 and {r["billing"] for r in plan["costs"]} == {
        "per-instance", "per-instance, autoscaled", "per-token"}
    assert main(["--bench", str(tmp_path / "nope.json"), "--peak-rps", "1", "--mean-output-tokens", "1"]) == 2
    assert main(["--bench", str(bench), "--peak-rps", "1", "--mean-output-tokens", "1", "--mean-rps", "5"]) == 2
