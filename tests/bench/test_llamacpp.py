"""`llmroute bench` end to end against the real llama.cpp server (Gemma 3 270M on CPU).

Only relations that any working stream must satisfy are checked (no absolute timings): every
request succeeds, usage comes from the server, TTFT is well inside E2E, token gaps are real
decode steps (a millisecond or more on a CPU), and the rates agree with the counts.
"""

from __future__ import annotations

import json

import pytest

from llmroute.cli.bench_command import main
from tests.servers.llamacpp import MODEL_ALIAS


@pytest.fixture
def llama_toml(llama_server, tmp_path):
    path = tmp_path / "llmroute.toml"
    path.write_text(f"""
[providers.local]
kind = "llamacpp"
base_url = "{llama_server.base_url}"

[tiers.small]
deployments = ["local:{MODEL_ALIAS}"]

[pricing."local:*"]
input_per_million = 0
output_per_million = 0
""", encoding="utf-8")
    return path


def test_bench_against_llama_cpp_gives_sane_figures(llama_toml, tmp_path):
    out = tmp_path / "r.json"
    rc = main(["--config", str(llama_toml), "--target", "small", "--concurrency", "1,2", "--requests", "4",
               "--warmup", "1", "--input-tokens", "32", "--synthetic-count", "8", "--max-tokens", "24",
               "--quiet", "--out", str(out), "--html", str(tmp_path / "r.html")])
    assert rc == 0
    report = json.loads(out.read_text())
    assert report["first_requests"][0]["ok"]
    for res in report["results"]:
        assert res["success_rate"] == 1.0 and res["requests"] == 4, res["error_breakdown"]
        ttft, e2e, itl, tpot = (res[k]["p50"] for k in ("ttft_ms", "e2e_ms", "itl_ms", "tpot_ms"))
        assert 0 < ttft < 0.9 * e2e  # a stream delivered as it was generated, not all at the end
        assert itl >= 1.0 and tpot >= 1.0  # each gap is a real decode step on a CPU
        assert res["output_tokens_estimated"] == 0  # llama.cpp reports usage
        assert res["mean_output_tokens"] >= 2
        assert res["output_tokens_per_s"] == pytest.approx(res["output_tokens"] / res["duration_s"], rel=1e-3)
        assert res["requests_per_s"] == pytest.approx(res["successes"] / res["duration_s"], rel=1e-3)
        assert res["deployments"] == {"local:gemma-3-270m": 4}
    records = [r for r in report["records"] if r["phase"] == "measured"]
    assert all(r["tokens_source"] == "usage" and r["output_tokens"] >= 1 for r in records)
