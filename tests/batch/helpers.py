"""Configs and fixtures for the batch tests: a client over the loopback batch servers, a fast clock."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest

from llmroute import Client
from llmroute.accounting.ledger import MemorySink
from tests.servers.batch import BATCH_SERVERS

# One model per platform that the shipped price table prices and its loopback chat server serves.
MODELS = {
    "together": "meta-llama/Llama-3.3-70B-Instruct-Turbo",
    "siliconflow": "Qwen/Qwen2.5-72B-Instruct",
    "bailian": "qwen-plus",
    "fireworks": "accounts/fireworks/models/llama-v3p3-70b-instruct",
}
PROVIDER = {"together": "tg", "siliconflow": "sf", "bailian": "bl", "fireworks": "fw"}


@pytest.fixture(scope="module")
def batch_servers() -> Iterator[Dict[str, Any]]:
    servers = {kind: cls().start() for kind, cls in BATCH_SERVERS.items()}
    yield servers
    for server in servers.values():
        server.stop()


@pytest.fixture
def servers(batch_servers: Dict[str, Any]) -> Iterator[Dict[str, Any]]:
    for server in batch_servers.values():
        server.reset()
    yield batch_servers
    for server in batch_servers.values():
        server.reset()


def provider_entry(kind: str, server: Any) -> Dict[str, Any]:
    return {"kind": kind, "base_url": server.base_url, "api_key": server.api_key,
            **({"region": "cn"} if kind == "siliconflow" else {})}


def config(servers: Dict[str, Any], tmp_path: Path, *, kinds: List[str] | None = None, tier: str = "bulk",
           batch: Dict[str, Any] | None = None) -> Dict[str, Any]:
    if kinds is None:
        kinds = list(MODELS)
    providers = {PROVIDER[k]: provider_entry(k, servers[k]) for k in MODELS}
    return {
        "providers": providers,
        "tiers": {tier: {"deployments": [f"{PROVIDER[k]}:{MODELS[k]}" for k in kinds]},
                  **{k: {"deployments": [f"{PROVIDER[k]}:{MODELS[k]}"]} for k in MODELS}},
        "batch": {"store": str(tmp_path / "jobs.sqlite"), "poll_interval_s": 0.001, "max_poll_interval_s": 0.01,
                  "accounts": {"fw": "test-account"}, **(batch or {})},
        "ledger": {"path": str(tmp_path / "ledger.sqlite")},
    }


def requests(n: int, prefix: str = "r") -> List[Dict[str, Any]]:
    return [{"custom_id": f"{prefix}{i}", "messages": [{"role": "user", "content": f"item number {i}"}],
             "max_tokens": 8} for i in range(n)]


def client(cfg: Dict[str, Any], ledger: Any = None) -> Client:
    return Client(cfg, ledger=ledger if ledger is not None else MemorySink())


def submit_then_kill(cfg: Dict[str, Any], folder: Path, kind: str, server: Any, n: int = 7) -> str:
    """Write `cfg` into `folder`, start `_restart_child.py` there (it submits `n` requests to `kind` and
    polls), SIGKILL it once the platform job was polled three times; the local job id."""
    import json
    import os
    import signal
    import subprocess
    import sys
    import time

    root = Path(__file__).resolve().parents[2]
    cfg_path = folder / "cfg.json"
    cfg_path.write_text(json.dumps(cfg))
    child = subprocess.Popen([sys.executable, str(root / "tests/batch/_restart_child.py"), str(cfg_path), str(n), kind],
                             cwd=str(folder), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(root)})
    try:
        job_id = child.stdout.readline().strip()
        assert job_id.startswith("bj_"), child.stderr.read()
        deadline = time.monotonic() + 20
        while not any(j.polls >= 3 for j in server.jobs.values()):
            assert time.monotonic() < deadline, "the child never polled"
            time.sleep(0.02)
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == -signal.SIGKILL
    return job_id
