"""`llmroute health`: every deployment's breaker state with its reason, after a probe to each one."""

from __future__ import annotations

import json

from llmroute.cli import main
from tests.resilience.client_helpers import dep
from tests.servers.fault import status

A, B = dep("a"), dep("b")


def write_config(tmp_path, servers, resilience: str = "") -> str:
    path = tmp_path / "llmroute.toml"
    path.write_text(f"""
[providers.a]
kind = "openai-compatible"
base_url = "{servers["a"].base_url}"

[providers.b]
kind = "openai-compatible"
base_url = "{servers["b"].base_url}"

[tiers.t]
deployments = ["{A}", "{B}"]

[resilience]
max_retries = 0
{resilience}

[pricing."a:*"]
input_per_million = 0
output_per_million = 0

[pricing."b:*"]
input_per_million = 0
output_per_million = 0

[ledger]
sink = "memory"
""", encoding="utf-8")
    return str(path)


def test_health_shows_a_disabled_deployment_and_why(servers, tmp_path, capsys):
    servers["a"].push(status(401, message="Incorrect API key provided"))
    rc = main(["health", "--config", write_config(tmp_path, servers)])
    out = capsys.readouterr().out
    assert rc == 1  # a deployment is not closed
    rows = {line.split()[0]: line.split()[1] for line in out.splitlines()[1:] if line.split() and ":" in line.split()[0]}
    assert rows[A] == "open" and rows[B] == "closed"
    assert f"!! {A}: DISABLED" in out and "API key" in out
    assert servers["a"].calls == 1 and servers["b"].calls == 1


def test_health_json_carries_state_reason_and_last_error(servers, tmp_path, capsys):
    servers["b"].push(status(503))
    path = write_config(tmp_path, servers, resilience="consecutive_failures = 1")
    rc = main(["health", "--config", path, "--json"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 1
    assert data[A]["state"] == "closed"
    assert data[B]["state"] == "open"
    assert "consecutive" in data[B]["reason"] and "OverloadedError" in data[B]["last_error"]
    assert data[B]["open_until"] is not None


def test_health_of_healthy_deployments_exits_zero(servers, tmp_path, capsys):
    assert main(["health", "--config", write_config(tmp_path, servers)]) == 0
    out = capsys.readouterr().out
    assert "!!" not in out and out.count("closed") == 2
