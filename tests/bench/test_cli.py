"""`llmroute bench` end to end on a loopback server: files written, regression mode, smoke, bad input."""

from __future__ import annotations

import json

import pytest

from llmroute.cli.bench_command import main
from tests.servers.fault import status, timed

REQUIRED = {"target", "concurrency", "requests", "success_rate", "requests_per_s", "output_tokens_per_s",
            "goodput_per_s", "ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"}


@pytest.fixture
def cfg(fault_server, tmp_path):
    fault_server.default_reply = timed(0.01, [0.002] * 4)
    path = tmp_path / "llmroute.toml"
    path.write_text(f"""
[providers.f]
kind = "vllm"
base_url = "{fault_server.base_url}"

[tiers.small]
deployments = ["f:fault-model", "f:backup-model"]

[pricing."f:*"]
input_per_million = 0
output_per_million = 0

[resilience]
max_retries = 0
consecutive_failures = 10000
min_calls = 10000
open_on_retry_after = false
""", encoding="utf-8")
    return path


def bench(cfg, tmp_path, *extra):
    out = tmp_path / "results.json"
    rc = main(["--config", str(cfg), "--target", "small", "--concurrency", "1,3", "--requests", "6",
               "--warmup", "1", "--input-tokens", "32", "--synthetic-count", "4", "--max-tokens", "5",
               "--slo", "ttft=5s,e2e=10s", "--quiet", "--out", str(out), *extra])
    return rc, out


def test_bench_writes_json_and_html(cfg, tmp_path, capsys):
    html = tmp_path / "report.html"
    rc, out = bench(cfg, tmp_path, "--html", str(html))
    assert rc == 0
    report = json.loads(out.read_text())
    assert [r["concurrency"] for r in report["results"]] == [1, 3]
    for res in report["results"]:
        assert REQUIRED <= set(res)
        for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
            assert {"p50", "p90", "p95", "p99", "max"} <= set(res[key])
        assert res["requests"] == 6 and res["success_rate"] == 1.0
        assert res["goodput_per_s"] == pytest.approx(res["requests_per_s"])  # generous SLOs: all good
    phases = [r["phase"] for r in report["records"]]
    assert phases.count("first") == 1 and phases.count("warmup") == 2 and phases.count("measured") == 12
    assert report["first_requests"][0]["target"] == "small"
    assert "TTFT p50" in capsys.readouterr().out
    page = html.read_text()
    assert page.startswith("<!DOCTYPE html>") and page.count("<svg") >= 5
    assert "<script" not in page and "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_regression_mode_fails_and_passes_when_it_should(cfg, tmp_path, capsys):
    rc, baseline = bench(cfg, tmp_path)
    assert rc == 0
    old = tmp_path / "old.json"
    # A baseline slower than anything this run can show (p95 TTFT of 10 s): the run passes, whatever
    # the shared machine's noise does to a 10 ms TTFT, and every request succeeded.
    data = json.loads(baseline.read_text())
    for res in data["results"]:
        res["ttft_ms"]["p95"] = 10_000.0
    old.write_text(json.dumps(data))
    rc, _ = bench(cfg, tmp_path, "--baseline", str(old), "--fail-if", "p95_ttft>+20%",
                  "--fail-if", "success_rate<0.99")
    assert rc == 0
    # a baseline that claims a far faster TTFT: the run must fail and say where
    data = json.loads(old.read_text())
    for res in data["results"]:
        res["ttft_ms"]["p95"] = 0.01
    old.write_text(json.dumps(data))
    capsys.readouterr()
    rc = main(["compare", str(tmp_path / "results.json"), "--baseline", str(old), "--fail-if", "p95_ttft>+20%"])
    err = capsys.readouterr().err
    assert rc == 1 and "REGRESSION small c=1: p95_ttft" in err and "small c=3" in err


def test_success_rate_rule_fails_on_errors(cfg, tmp_path, fault_server, capsys):
    fault_server.push(timed(0.0, [0.0]), timed(0.0, [0.0]), status(503), status(503), status(503))
    rc, _ = bench(cfg, tmp_path, "--fail-if", "success_rate<0.99")
    err = capsys.readouterr().err
    assert rc == 1 and "success_rate" in err and "small c=1" in err


def test_bad_input_exits_2_naming_the_option(cfg, tmp_path, capsys):
    assert main(["--config", str(cfg), "--target", "small", "--slo", "speed=1s", "--quiet"]) == 2
    assert "--slo" in capsys.readouterr().err
    assert main(["--config", str(cfg), "--target", "small", "--fail-if", "p95_ttft>+20%", "--quiet"]) == 2
    assert "--baseline" in capsys.readouterr().err
    assert main(["--config", str(cfg), "--target", "small", "--duration", "ten", "--quiet"]) == 2
    assert "--duration" in capsys.readouterr().err
    assert main(["--config", str(tmp_path / "missing.toml"), "--target", "small", "--requests", "1", "--quiet"]) == 2
    assert main(["--config", str(cfg), "--target", "nope", "--requests", "2", "--quiet"]) == 2
    assert "nope" in capsys.readouterr().err
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "ok"}\n{"prompt": 3}\n')
    assert main(["--config", str(cfg), "--target", "small", "--prompts", str(prompts), "--quiet"]) == 2
    assert "line 2" in capsys.readouterr().err


def test_a_bad_second_target_stops_the_run_before_any_request(cfg, tmp_path, fault_server, capsys):
    # Targets run one after another: a misspelt second one used to fail only after the first
    # target's whole measured run had been sent.
    assert main(["--config", str(cfg), "--target", "small", "--target", "smal1", "--requests", "2",
                 "--warmup", "0", "--no-first-request", "--quiet"]) == 2
    assert "'smal1' is not a tier" in capsys.readouterr().err
    assert fault_server.chat_requests() == []


@pytest.mark.parametrize("factor", ["nan", "inf", "0", "-1"])
def test_knee_factor_must_be_a_positive_number(cfg, fault_server, capsys, factor):
    assert main(["--config", str(cfg), "--target", "small", "--requests", "2", "--knee-factor", factor,
                 "--quiet"]) == 2
    assert "--knee-factor" in capsys.readouterr().err
    assert fault_server.chat_requests() == []


def test_smoke_reports_which_deployments_answer_and_which_fail(cfg, fault_server, capsys, tmp_path):
    fault_server.push(status(404, message="no such model"), model="backup-model")
    out = tmp_path / "smoke.json"
    rc = main(["smoke", "--config", str(cfg), "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 1
    rows = {r["deployment"]: r for r in json.loads(out.read_text())["results"]}
    assert rows["f:fault-model"]["ok"] and rows["f:fault-model"]["answered_by"] == "f:fault-model"
    assert rows["f:fault-model"]["ttft_ms"] is not None and rows["f:fault-model"]["answer"]
    assert not rows["f:backup-model"]["ok"] and "NotFoundError" in rows["f:backup-model"]["error"]
    assert rows["f:backup-model"]["tiers"] == [["small", 1]]
    assert "1 of 2 deployments answered; failed: f:backup-model" in text
    assert main(["smoke", "--config", str(cfg)]) == 0


def test_a_run_where_no_request_succeeded_exits_1(cfg, tmp_path, fault_server, capsys):
    # Every request refused: the report is still written (its errors are the finding), but a script
    # or CI job running the bench must not read "0" as "measured".
    fault_server.push(*[status(503)] * 40)
    rc, out = bench(cfg, tmp_path)
    assert rc == 1 and "no request succeeded" in capsys.readouterr().err
    assert all(res["success_rate"] == 0 for res in json.loads(out.read_text())["results"])
