"""`llmroute plan`: level choice, GPU count, monthly costs per billing model and the break-even traffic."""

from __future__ import annotations

import json

import pytest

from llmroute.bench.plan import (
    TokenPrice,
    Traffic,
    break_even_rps,
    catalogue_price,
    choose_level,
    gpu_range,
    monthly_costs,
    parse_price,
    parse_throughput,
    traffic_from_records,
)
from llmroute.cli.plan_command import main
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


def test_gpu_count_rounds_up_with_headroom():
    g = gpu_range(needed_tokens_per_s=20 * 300, low=1000, high=1000, headroom=0.2)
    assert g["gpus_fast_headroom"] == 8  # 6000 / 800 = 7.5
    assert gpu_range(needed_tokens_per_s=8 * 100, low=1000, high=1000, headroom=0.2)["gpus_fast_headroom"] == 1
    assert gpu_range(needed_tokens_per_s=16 * 100, low=1000, high=1000, headroom=0.2)["gpus_fast_headroom"] == 2
    for bad in ({"headroom": 1.0}, {"low": 0.0}, {"needed_tokens_per_s": 0.0}):
        with pytest.raises(ConfigError):
            gpu_range(**{"needed_tokens_per_s": 1.0, "low": 1.0, "high": 1.0, "headroom": 0.2, **bad})


def test_monthly_costs_per_billing_model():
    traffic = Traffic(peak_rps=20, mean_rps=5, mean_input_tokens=500, mean_cached_tokens=100, mean_output_tokens=300)
    rows = monthly_costs(fleet=(8, 8), mean_fleet=(2, 2), unit="GPUs", hours_per_month=730,
                         per_instance=[("h100", 2.0)], reserved_discount=(0.3, 0.5),
                         token_prices=[TokenPrice("cloud", input=0.5, output=1.5, cached=0.25)], traffic=traffic,
                         mean_input_tokens=500, rates={})
    by = {r["billing"]: r for r in rows}
    assert by["on-demand"]["usd_per_month"] == pytest.approx((8 * 2.0 * 730,) * 2)
    assert by["autoscaled"]["units"] == (2, 2)
    assert by["reserved"]["usd_per_month"] == pytest.approx((8 * 2.0 * 730 * 0.5, 8 * 2.0 * 730 * 0.7))
    requests = 5 * 3600 * 730
    per_request = (400 * 0.5 + 100 * 0.25 + 300 * 1.5) / 1e6  # cached input at its own rate
    assert by["per-token"]["usd_per_request"] == pytest.approx(per_request)
    assert by["per-token"]["usd_per_month"][0] == pytest.approx(requests * per_request, rel=1e-9)
    with pytest.raises(ConfigError, match="--exchange-rate"):
        monthly_costs(fleet=(1, 1), mean_fleet=(1, 1), unit="GPUs", hours_per_month=730, per_instance=[],
                      reserved_discount=(0, 0), token_prices=[TokenPrice("cn", 1, 1, currency="CNY")],
                      traffic=traffic, mean_input_tokens=500, rates={})


def test_break_even_is_where_per_token_equals_the_fleet():
    rps = break_even_rps(fleet_cost_per_month=7300.0, cost_per_request=0.001, hours_per_month=730)
    # 7300 USD / (0.001 USD x 730 h x 3600 s) = 2.777... requests/s on average
    assert rps == pytest.approx(7300 / (0.001 * 730 * 3600))
    assert 0.001 * rps * 730 * 3600 == pytest.approx(7300.0)
    assert break_even_rps(fleet_cost_per_month=1.0, cost_per_request=0.0, hours_per_month=730) is None


def test_the_field_guides_worked_example_exactly(capsys):
    # Field guide 4.1: 50 req/s x 200 output tokens = 10,000 tokens/s; an L4/A10-class GPU serving a 7B
    # model does 800-1,500 output tokens/s: 10,000/1,500 = 6.7 -> 7 to 10,000/800 = 12.5 -> 13 GPUs.
    g = gpu_range(needed_tokens_per_s=10_000, low=800, high=1500, headroom=0.2)
    assert (round(g["ratio_fast"], 1), g["gpus_fast"], g["ratio_slow"], g["gpus_slow"]) == (6.7, 7, 12.5, 13)
    assert (g["gpus_fast_headroom"], g["gpus_slow_headroom"]) == (9, 16)  # 10,000/1,200 = 8.3; 10,000/640 = 15.6
    assert main(["--tokens-per-s-per-gpu", "800-1500", "--peak-rps", "50", "--mean-output-tokens", "200"]) == 0
    text = capsys.readouterr().out
    assert "peak output: 50 req/s x 200 output tokens = 10,000 tokens/s" in text
    assert "before headroom: 10,000 / 1,500 = 6.7 -> 7 to 10,000 / 800 = 12.5 -> 13 GPUs" in text
    assert "with 20% headroom (each planned at 80% of its rate; --headroom sets it): 9 to 16 GPUs" in text
    assert main(["--tokens-per-s-per-gpu", "800-1500", "--peak-rps", "50", "--mean-output-tokens", "200",
                 "--headroom", "0"]) == 0
    assert "with 0% headroom (each planned at 100% of its rate; --headroom sets it): 7 to 13 GPUs" in capsys.readouterr().out


def test_billing_advice_prices_from_the_catalogue_and_prints_the_break_even(tmp_path, capsys):
    out = tmp_path / "plan.json"
    assert main(["--tokens-per-s-per-gpu", "1000", "--peak-rps", "10", "--mean-rps", "4", "--mean-output-tokens",
                 "200", "--mean-input-tokens", "1000", "--per-gpu-hour", "l4=0.8", "--per-token",
                 "fireworks:accounts/fireworks/models/gpt-oss-20b", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    plan = json.loads(out.read_text())
    # 10 x 200 = 2,000 tokens/s at 800 usable per GPU -> 3 GPUs; 3 x 0.8 x 730 = 1,752 USD on demand.
    fleet = {r["billing"]: r for r in plan["costs"]}
    assert fleet["on-demand"]["usd_per_month"] == [1752.0, 1752.0]
    assert fleet["reserved"]["usd_per_month"] == [876.0, 1226.4]  # 50% and 30% off
    per_request = (1000 * 0.07 + 200 * 0.30) / 1e6  # the catalogue's gpt-oss-20b rates
    assert fleet["per-token"]["usd_per_month"][0] == pytest.approx(per_request * 4 * 3600 * 730, abs=0.01)
    even = {e["fleet"]: e["break_even_rps"] for e in plan["break_even"]}
    assert even["on-demand l4"][0] == pytest.approx(1752 / (per_request * 730 * 3600))
    assert "break-even:" in text and "30-50%" in text
    with pytest.raises(ConfigError, match="no shipped price"):
        catalogue_price("together:no/such-model")
    assert catalogue_price("bailian@singapore:qwen-plus").currency == "USD"


class _Rec:
    def __init__(self, ts, rid, status="ok", i=100, c=20, o=50):
        self.ts, self.request_id, self.status = ts, rid, status
        self.input_tokens, self.cached_tokens, self.output_tokens = i, c, o


def test_traffic_profile_from_ledger_records():
    recs = [_Rec(60.0 * m + s, f"r{m}-{s}") for m in range(10) for s in range(m + 1)]  # minute m holds m+1 calls
    recs += [_Rec(30.0, "bad", status="error", i=9999), _Rec(31.0, "r0-0", status="ok")]  # errors and retries skipped
    t = traffic_from_records(recs, since=0.0, until=600.0)
    assert t.calls == 55 and t.mean_rps == pytest.approx(55 / 600) and t.peak_rps == pytest.approx(10 / 60)
    assert (t.mean_input_tokens, t.mean_cached_tokens, t.mean_output_tokens) == (100, 20, 50)
    with pytest.raises(ConfigError, match="--ledger"):
        traffic_from_records(recs, since=1000.0, until=2000.0)


def test_parse_throughput():
    assert parse_throughput("800-1500") == (800, 1500) and parse_throughput("1,200") == (1200, 1200)
    for bad in ("x", "0", "1500-800", "-5"):
        with pytest.raises(ConfigError):
            parse_throughput(bad)


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
    assert "300.0 output tokens/s" in text and "= 8.3 -> 9 instances" in text  # 2000 / 240 = 8.3
    plan = json.loads(out.read_text())
    assert plan["instances"] == 9 and {r["billing"] for r in plan["costs"]} == {
        "on-demand", "autoscaled", "reserved", "per-token"}
    assert main(["--bench", str(tmp_path / "nope.json"), "--peak-rps", "1", "--mean-output-tokens", "1"]) == 2
    assert main(["--bench", str(bench), "--peak-rps", "1", "--mean-output-tokens", "1", "--mean-rps", "5"]) == 2


@pytest.mark.parametrize("extra", [
    ["--peak-rps", "inf", "--mean-output-tokens", "100"],
    ["--peak-rps", "nan", "--mean-output-tokens", "100"],
    ["--peak-rps", "1", "--mean-output-tokens", "inf"],
    ["--peak-tokens-per-s", "inf"],
    ["--peak-rps", "1", "--mean-output-tokens", "100", "--mean-rps", "nan"],
    ["--peak-rps", "1", "--mean-output-tokens", "100", "--hours-per-month", "nan"],
    ["--peak-rps", "1", "--mean-output-tokens", "100", "--mean-input-tokens", "inf"],
])
def test_non_finite_numbers_are_a_clear_error_naming_the_option(extra, capsys):
    # 'inf' and 'nan' parse as floats: they crashed the GPU count's rounding (OverflowError) or
    # printed a plan of NaN costs; now argparse names the option and exits 2.
    with pytest.raises(SystemExit) as exc:
        main(["--tokens-per-s-per-gpu", "1000", *extra])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    bad = next(a for a in extra if a in ("inf", "nan"))
    option = extra[extra.index(bad) - 1]
    assert f"argument {option}: '{bad}' is not a finite number" in err
    assert "Traceback" not in err
