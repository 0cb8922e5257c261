"""The small messages that cost an afternoon: misspelt config keys and sections, metadata values,
refused connections, a peak given in tokens/s, and a CLI whose reader went away."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import llmroute as L
from llmroute.cli import CLOSED_PIPE_STATUS, main

SERVER = {"kind": "vllm", "base_url": "http://127.0.0.1:9/v1"}

@pytest.fixture(autouse=True)
def _ledger_in_tmp(tmp_path, monkeypatch):
    """A `Client(base_url=...)` keeps its ledger at ./llmroute-ledger.db (the [ledger] default): in tmp."""
    monkeypatch.chdir(tmp_path)


def _error(data: dict) -> str:
    with pytest.raises(L.ConfigError) as info:
        L.Config.from_dict(data)
    return str(info.value)


@pytest.mark.parametrize("data, words", [
    ({"resilience": {"max_retry": 3}}, ["resilience.max_retry", "did you mean `max_retries`?"]),
    ({"providers": {"l": {**SERVER, "timeout": 3}}}, ["providers.l.timeout", "did you mean `timeout_s`?"]),
    ({"providers": {"l": SERVER}, "tiers": {"s": {"deployments": ["l:m"], "max_retry": 2}}},
     ["tiers.s.max_retry", "did you mean `max_retries`?"]),
    ({"providers": {"l": SERVER}, "tiers": {"s": {"deployments": [{"id": "l:m", "wieght": 2}]}}},
     ["tiers.s.deployments[0].wieght", "did you mean `weight`?"]),
    ({"ledger": {"pth": "x.db"}}, ["ledger.pth", "did you mean `path`?"]),
    ({"providers": {"l": SERVER}, "tiers": {"s": {"deployment": ["l:m"]}}},
     ["`deployments` is missing", "unknown key `deployment` (did you mean `deployments`?)"]),
])
def test_a_misspelt_key_gets_the_nearest_known_one(data, words):
    message = _error(data)
    for word in words:
        assert word in message


def test_an_unknown_section_lists_the_known_ones():
    message = _error({"provider": {"together": {"kind": "together"}}})
    assert "no section [provider] (did you mean `providers`?)" in message
    assert "[providers], [tiers]" in message and "[batch]" in message


def test_a_key_far_from_any_lists_the_known_keys():
    message = _error({"providers": {"l": {**SERVER, "zzz": 1}}})
    assert "providers.l.zzz: unknown key (known: kind, api_key, base_url" in message


def test_metadata_names_the_key_whose_value_is_not_a_string():
    with L.Client(base_url="http://127.0.0.1:9/v1", prices={"m": {"input_per_million": 0, "output_per_million": 0}}) as c:
        with pytest.raises(L.InvalidRequestError) as info:
            c.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], metadata={"tenant": 5})
    assert info.value.field == "metadata.tenant" and "not int" in str(info.value)


def _dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_refused_connection_names_provider_host_and_port():
    port = _dead_port()
    with L.Client(base_url=f"http://127.0.0.1:{port}/v1", max_retries=0,
                  prices={"m": {"input_per_million": 0, "output_per_million": 0}}) as c:
        with pytest.raises(L.APIConnectionError) as info:
            c.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        assert f"to 127.0.0.1:{port} (provider default)" in str(info.value)
        with pytest.raises(L.APIConnectionError) as listed:
            c.models.list()
        assert f"127.0.0.1:{port}" in str(listed.value)


def test_plan_takes_the_peak_in_tokens_per_second(capsys):
    assert main(["plan", "--tokens-per-s-per-gpu", "800-1500", "--peak-tokens-per-s", "10000"]) == 0
    out = capsys.readouterr().out
    assert "peak output: 10,000 tokens/s (given)" in out
    assert "10,000 / 1,500 = 6.7 -> 7 to 10,000 / 800 = 12.5 -> 13 GPUs" in out  # the field guide's figures
    assert main(["plan", "--tokens-per-s-per-gpu", "1500", "--peak-tokens-per-s", "10000",
                 "--mean-output-tokens", "200"]) == 0
    assert "-> 7 GPUs" in capsys.readouterr().out
    assert main(["plan", "--tokens-per-s-per-gpu", "1500", "--peak-tokens-per-s", "10000", "--peak-rps", "5"]) == 2
    assert "give the peak once" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["plan", "--tokens-per-s-per-gpu", "1500", "--peak-tokens-per-s", "10000"],
                                  ["local", "serve", "--help"], ["--help"]], ids=["output", "--help", "usage"])
def test_a_closed_pipe_ends_the_command_quietly(argv):
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the command writes a byte (as `| head` after its lines)
    try:
        proc = subprocess.run([sys.executable, "-m", "llmroute", *argv], stdout=write_end, stderr=subprocess.PIPE,
                              timeout=60, cwd=Path(__file__).resolve().parents[1])
    finally:
        os.close(write_end)
    assert proc.stderr == b""
    # argparse's --help drops a write error itself and exits 0; our own output ends with SIGPIPE's status
    assert proc.returncode == (0 if "--help" in argv[1:] else CLOSED_PIPE_STATUS)


def test_an_unknown_command_gets_the_nearest_one(capsys):
    assert main(["heath"]) == 2
    assert "unknown command 'heath' (did you mean `health`?)" in capsys.readouterr().err


def test_a_misspelt_tier_gets_the_nearest_one():
    cfg = {"providers": {"l": SERVER}, "tiers": {"small": {"deployments": ["l:m"]}}, "pricing": {"strict": False}}
    with L.Client(cfg) as c:
        with pytest.raises(L.RoutingError, match="did you mean `small`"):
            c.chat.completions.create(model="smal", messages=[{"role": "user", "content": "x"}])
