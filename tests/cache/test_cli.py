"""`llmroute cache stats|clear` on a config whose cache is a SQLite file, after real calls."""

from __future__ import annotations

import json

from llmroute import Client
from llmroute.cli import main
from tests.cache.conftest import DEP, MESSAGES


def test_cache_stats_and_clear_by_namespace(vllm_server, tmp_path, capsys):
    toml = tmp_path / "llmroute.toml"
    toml.write_text(f"""
[providers.v]
kind = "vllm"
base_url = "{vllm_server.base_url}"

[tiers.t]
deployments = ["{DEP}"]
cache = {{ ttl_s = 3600 }}

[pricing."{DEP}"]
input_per_million = 1
output_per_million = 2
currency = "USD"

[ledger]
sink = "memory"

[cache]
backend = "sqlite"
path = "cache.db"
""")
    with Client.from_config(toml) as client:
        for tenant in ("a", "b"):
            client.chat.completions.create(model="t", messages=MESSAGES, seed=1, feature="faq",
                                           metadata={"tenant": tenant})
    assert (tmp_path / "cache.db").exists()
    assert main(["cache", "stats", "--config", str(toml)]) == 0
    assert json.loads(capsys.readouterr().out)["entries"] == 2
    assert main(["cache", "clear", "--config", str(toml), "--feature", "faq", "--meta", "tenant=a"]) == 0
    assert "cleared 1 entries from namespace 'feature=faq;tenant=a'" in capsys.readouterr().out
    assert main(["cache", "stats", "--config", str(toml)]) == 0
    assert json.loads(capsys.readouterr().out)["entries"] == 1
    assert main(["cache", "clear", "--config", str(toml)]) == 0
    assert "cleared 1 entries from all namespaces" in capsys.readouterr().out


def test_cache_stats_says_a_memory_backend_lives_in_one_process(tmp_path, capsys):
    toml = tmp_path / "llmroute.toml"
    toml.write_text(f"""
[providers.v]
kind = "vllm"
base_url = "http://127.0.0.1:9/v1"

[tiers.t]
deployments = ["{DEP}"]

[pricing]
strict = false

[cache]
enabled = true
""")
    assert main(["cache", "stats", "--config", str(toml)]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["entries"] == 0 and "lives inside each client's process" in stats["note"]
