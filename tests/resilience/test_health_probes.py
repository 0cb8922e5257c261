"""`llmroute health` tells the truth about its probes, and its probes (and `bench smoke`'s) are
tagged so that reports leave them out and no feature is charged for them."""

from __future__ import annotations

import json

from llmroute.accounting.ledger import PROBE_METADATA_KEY

from llmroute.accounting.sinks import read_records
from llmroute.cli import main
from llmroute.resilience.breaker import BreakerSnapshot
from llmroute.resilience.deployment_health import ProbeTally, format_health, health_status
from tests.servers.fault import status


def _config(tmp_path, fault_server, vllm_server, *, resilience: str = "") -> str:
    path = tmp_path / "llmroute.toml"
    path.write_text(f"""
[providers.f]
kind = "openai-compatible"
base_url = "{fault_server.base_url}"

[providers.v]
kind = "vllm"
base_url = "{vllm_server.base_url}"

[tiers.chat]
deployments = ["f:fault-model", "v:Qwen/Qwen2.5-7B-Instruct"]

[tiers.embed]
kind = "embedding"
deployments = ["v:BAAI/bge-m3"]

[resilience]
max_retries = 0
consecutive_failures = 5
{resilience}

[pricing."f:*"]
input_per_million = 1
output_per_million = 1

[pricing."v:*"]
input_per_million = 1
output_per_million = 1

[ledger]
sink = "jsonl"
path = "{tmp_path / 'ledger.jsonl'}"
""", encoding="utf-8")
    return str(path)


def _rows(out: str) -> dict:
    return {line.split()[0]: line.split()[1:3] for line in out.splitlines()[1:] if line.split() and ":" in line.split()[0]}


def test_a_deployment_that_failed_every_probe_is_failing_though_its_breaker_is_closed(
        tmp_path, fault_server, vllm_server, capsys):
    fault_server.push(status(503))
    rc = main(["health", "--config", _config(tmp_path, fault_server, vllm_server)])
    out = capsys.readouterr().out
    rows = _rows(out)
    assert rc == 1
    assert rows["f:fault-model"] == ["failing", "0/1"]  # one 503 does not open a breaker of 5
    assert rows["v:Qwen/Qwen2.5-7B-Instruct"] == ["closed", "1/1"] and rows["v:BAAI/bge-m3"] == ["closed", "1/1"]
    assert "!! f:fault-model: every probe failed (1/1); breaker closed; last: OverloadedError" in out


def test_json_carries_status_probes_and_the_breaker_apart(tmp_path, fault_server, vllm_server, capsys):
    fault_server.push(status(503), status(503))
    rc = main(["health", "--config", _config(tmp_path, fault_server, vllm_server), "--json", "--rounds", "2"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 1
    fault = data["f:fault-model"]
    assert fault["status"] == "failing" and fault["state"] == "closed"
    assert fault["probes"]["sent"] == 2 and fault["probes"]["failed"] == 2 and "OverloadedError" in fault["probes"]["last_error"]
    assert data["v:BAAI/bge-m3"]["status"] == "closed" and data["v:BAAI/bge-m3"]["probes"] == {
        "sent": 2, "failed": 0, "last_error": None}


def test_embedding_deployments_are_probed_with_embeddings(tmp_path, fault_server, vllm_server, capsys):
    assert main(["health", "--config", _config(tmp_path, fault_server, vllm_server)]) == 0
    paths = sorted(r.path for r in vllm_server.requests)
    assert paths == ["/v1/chat/completions", "/v1/embeddings"]


def test_probes_are_tagged_in_the_ledger_and_left_out_of_reports(tmp_path, fault_server, vllm_server, capsys):
    config = _config(tmp_path, fault_server, vllm_server)
    assert main(["health", "--config", config]) == 0
    capsys.readouterr()
    records = list(read_records(tmp_path / "ledger.jsonl"))
    assert len(records) == 3  # paid calls are recorded
    assert all(r.metadata == {PROBE_METADATA_KEY: "health"} and r.feature is None for r in records)
    assert main(["report", "--ledger", str(tmp_path / "ledger.jsonl"), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["groups"] == []
    assert main(["report", "--ledger", str(tmp_path / "ledger.jsonl"), "--format", "json", "--include-probes"]) == 0
    rows = json.loads(capsys.readouterr().out)["groups"]
    assert sum(r["requests"] for r in rows) == 3


def test_bench_smoke_probes_are_tagged_too(tmp_path, fault_server, vllm_server, capsys):
    config = _config(tmp_path, fault_server, vllm_server)
    assert main(["bench", "smoke", "--config", config]) == 0
    out = capsys.readouterr().out
    assert "v:BAAI/bge-m3" not in out  # embedding deployments get no chat prompt
    records = list(read_records(tmp_path / "ledger.jsonl"))
    assert len(records) == 2
    assert all(r.metadata == {PROBE_METADATA_KEY: "bench-smoke"} and r.feature is None for r in records)


def _snapshot(state: str) -> BreakerSnapshot:
    return BreakerSnapshot("a:m", state, 0.0, 0.0, 0, 0, 0, 0, None, 0, None, None, None, None, None, 0,
                           None, None, None, None)  # type: ignore[arg-type]


def test_status_rules():
    failed, mixed = ProbeTally(), ProbeTally()
    failed.add(RuntimeError("x"))
    mixed.add(None)
    mixed.add(RuntimeError("y"))
    assert health_status(_snapshot("closed"), failed) == "failing"
    assert health_status(_snapshot("half_open"), failed) == "failing"
    assert health_status(_snapshot("open"), failed) == "open"  # already says it is out
    assert health_status(_snapshot("closed"), mixed) == "closed" and health_status(_snapshot("closed"), None) == "closed"
    table = format_health({"a:m": _snapshot("closed")}, probes={"a:m": mixed})
    assert "1/2 ok" in table.splitlines()[1]


def test_rounds_below_one_is_refused_before_any_probe(tmp_path, fault_server, vllm_server, capsys):
    # Each probe is a paid call: `--rounds 0` (meaning "none") used to send one to every deployment.
    path = _config(tmp_path, fault_server, vllm_server)
    for rounds in ("0", "-2"):
        try:
            rc = main(["health", "--config", path, "--rounds", rounds])
        except SystemExit as exc:
            rc = exc.code
        assert rc == 2
        assert f"--rounds: must be 1 or more, got {rounds}" in capsys.readouterr().err
    assert fault_server.chat_requests() == [] and vllm_server.requests == []
