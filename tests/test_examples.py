"""The examples run as a user would run them, against the real llama.cpp server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def local_config(llama_server, tmp_path):
    text = (ROOT / "examples" / "local.toml").read_text()
    text = text.replace("http://127.0.0.1:8080/v1", llama_server.base_url)
    text = text.replace('path = "llmroute-ledger.db"', f'path = "{tmp_path / "ledger.db"}"')
    path = tmp_path / "local.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("script", ["basic.py", "stream.py", "async_calls.py"])
def test_example_runs(script, local_config):
    out = subprocess.run([sys.executable, str(ROOT / "examples" / script), str(local_config)],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "gemma-3-270m" in out.stdout or "tokens" in out.stdout
    # The embedded server stops at the model's end of turn: no chat marker reaches what a user prints.
    for marker in ("<|im_end|>", "<|im_start|>", "<end_of_turn>", "<start_of_turn>"):
        assert marker not in out.stdout, (marker, out.stdout)


def test_openai_drop_in_runs(llama_server, tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "openai_drop_in.py"), llama_server.base_url],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)  # its ledger: in tmp_path
    assert out.returncode == 0, out.stderr
    assert "gemma-3-270m ->" in out.stdout and "status 200 server llama.cpp" in out.stdout
    assert "cost: 0" in out.stdout and out.stderr == ""  # priced: no warning


def test_switch_platform_names_the_missing_key():
    env = {k: v for k, v in os.environ.items() if k not in ("TOGETHER_API_KEY", "FIREWORKS_API_KEY")}
    for name, var in (("together.toml", "TOGETHER_API_KEY"), ("fireworks.toml", "FIREWORKS_API_KEY")):
        out = subprocess.run([sys.executable, str(ROOT / "examples" / "switch_platform.py"),
                              str(ROOT / "examples" / name)], capture_output=True, text=True, timeout=60, env=env)
        assert out.returncode != 0
        assert "ConfigError" in out.stderr and var in out.stderr and "providers.cloud.api_key" in out.stderr
