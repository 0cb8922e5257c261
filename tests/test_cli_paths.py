"""Bad paths on the command line are one line on stderr and exit code 2, found before any work
(no request reaches the loopback server, no file is written)."""

from __future__ import annotations

import json
import sqlite3

import pytest

from llmroute.cli import main
from tests.read_only import read_only

MODEL = "Qwen/Qwen2.5-7B-Instruct"


@pytest.fixture
def place(tmp_path, make_server, monkeypatch):
    """A working folder with a config for a loopback vLLM server, a JSONL ledger, a folder, a text file,
    a SQLite file without a ledger, and a read-only `ro/`."""
    server = make_server("vllm")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cfg.toml").write_text(
        f'[providers.v]\nkind = "vllm"\nbase_url = "{server.base_url}"\n[tiers.t]\ndeployments = ["v:{MODEL}"]\n'
        '[pricing]\nstrict = false\n[ledger]\nsink = "memory"\n', encoding="utf-8")
    (tmp_path / "led.jsonl").write_text('{"ts":1,"request_id":"a"}\n', encoding="utf-8")
    (tmp_path / "dir").mkdir()
    (tmp_path / "notes.txt").write_text("hello\n", encoding="utf-8")
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "hi"}\n', encoding="utf-8")
    sqlite3.connect(tmp_path / "other.db").execute("create table t (x)").connection.close()
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "existing.html").write_text("x")
    (ro / "existing.html").chmod(0o444)
    with read_only(ro):
        yield server


BENCH = ["bench", "--config", "cfg.toml", "--target", f"v:{MODEL}", "--requests", "2", "--quiet",
         "--no-first-request"]

CASES = {
    "report --out on a read-only place": (["report", "--ledger", "led.jsonl", "--format", "csv", "--out", "ro/r.csv"],
                                          "read-only file system"),
    "report --out over a read-only file": (["report", "--ledger", "led.jsonl", "--format", "html", "--out",
                                            "ro/existing.html"], "cannot write"),
    "report --out a folder": (["report", "--ledger", "led.jsonl", "--format", "html", "--out", "dir"], "is a directory"),
    "report --out into a missing folder": (["report", "--ledger", "led.jsonl", "--format", "json", "--out",
                                            "missing/r.json"], "does not exist"),
    "report --ledger a folder": (["report", "--ledger", "dir"], "is a directory"),
    "report --ledger a text file": (["report", "--ledger", "notes.txt"], "neither a SQLite ledger nor"),
    "report --ledger a SQLite file without a ledger": (["report", "--ledger", "other.db"], "without a `ledger` table"),
    "bench --out into a missing folder": ([*BENCH, "--out", "missing/b.json"], "does not exist"),
    "bench --html into a missing folder": ([*BENCH, "--html", "missing/b.html"], "does not exist"),
    "bench --out a folder": ([*BENCH, "--out", "dir"], "is a directory"),
    "bench --out on a read-only place": ([*BENCH, "--out", "ro/b.json"], "read-only"),
    "bench --baseline missing": ([*BENCH, "--baseline", "nothere.json"], "no such file"),
    "bench --prompts a folder": ([*BENCH, "--prompts", "dir"], "is a directory"),
    "bench smoke --json into a missing folder": (["bench", "smoke", "--config", "cfg.toml", "--json", "missing/s.json"],
                                                 "does not exist"),
    "plan --json on a read-only place": (["plan", "--bench", "led.jsonl", "--peak-rps", "1", "--mean-output-tokens",
                                          "10", "--json", "ro/p.json"], "read-only"),
    "calibrate --write to a missing config": (["calibrate", "--prompts", "prompts.jsonl", "--large-share", "0.3",
                                               "--config", "nothere.toml", "--write"], "no such file"),
    "calibrate --prompts a folder": (["calibrate", "--prompts", "dir", "--large-share", "0.3"], "is a directory"),
    "health --config a folder": (["health", "--config", "dir"], "is a directory"),
    # llama.cpp refused these with a bare RuntimeError traceback ("Failed to init server")
    "local serve --model missing": (["local", "serve", "--port", "0", "--model", "nothere.gguf"], "no such file"),
    "local serve --model a folder": (["local", "serve", "--port", "0", "--model", "dir"], "is a directory"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_path_errors_are_one_line_and_exit_2_before_any_work(place, capsys, tmp_path, name):
    argv, words = CASES[name]
    before = sorted(p.name for p in tmp_path.rglob("*"))
    rc = main(argv)
    out = capsys.readouterr()
    assert rc == 2, out.err
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.err, out.err
    assert words in lines[0] and lines[0].startswith(f"llmroute {argv[0]}: "), lines[0]
    assert not place.requests  # nothing was sent
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing was written
    assert out.out == ""


def test_the_same_commands_work_with_good_paths(place, capsys):
    assert main(["report", "--ledger", "led.jsonl", "--format", "json", "--out", "r.json"]) == 0
    assert json.loads(open("r.json").read()) is not None
    assert main([*BENCH, "--out", "b.json"]) == 0
    assert json.load(open("b.json"))
    assert len(place.requests) >= 2


NOT_UTF8 = [
    ["calibrate", "--prompts", "prompts.jsonl", "--large-share", "0.5", "--config", "latin1.toml", "--write"],
    ["calibrate", "--prompts", "latin1.jsonl", "--large-share", "0.5"],
    ["health", "--config", "latin1.toml"],
    ["prices", "--config", "latin1.toml"],
    ["report", "--config", "latin1.toml", "--ledger", "led.jsonl"],
    ["router", "fit", "--outcomes", "latin1.jsonl", "--out", "model.json"],
    ["router", "eval", "--outcomes", "latin1.jsonl"],
    ["bench", "--config", "latin1.toml", "--target", "t"],
    ["bench", "--config", "cfg.toml", "--target", "t", "--prompts", "latin1.jsonl"],
    ["batch", "--config", "latin1.toml", "list"],
    ["cache", "--config", "latin1.toml", "stats"],
]


@pytest.mark.parametrize("argv", NOT_UTF8, ids=[" ".join(a[:2]) + f" {i}" for i, a in enumerate(NOT_UTF8)])
def test_a_file_that_is_not_utf8_is_one_line(place, tmp_path, capsys, argv):
    (tmp_path / "latin1.toml").write_bytes(b'[routing]\nthreshold = 0.5\n# caf\xe9\n')
    (tmp_path / "latin1.jsonl").write_bytes(b'{"prompt": "caf\xe9", "needs_large": true}\n')
    before = (tmp_path / "latin1.toml").read_bytes()
    assert main(argv) == 2 or argv[0] == "router"  # `router` exits 1 on a bad input file
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "UTF-8" in err and "latin1" in err and "Traceback" not in err
    assert (tmp_path / "latin1.toml").read_bytes() == before  # calibrate --write rewrote nothing


def test_local_serve_on_a_taken_port_is_one_line_and_exit_2(capsys):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        rc = main(["local", "serve", "--port", str(port)])
    err = capsys.readouterr().err
    assert rc == 2 and err.strip().splitlines() == [
        f"llmroute local: --port: 127.0.0.1:{port} is already in use (another server?); choose another port"], err
