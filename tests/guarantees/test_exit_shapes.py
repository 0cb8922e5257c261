"""Every way a script can end ends the process, with the call's ledger row written.

Each shape runs as a script in a subprocess of its own (the interpreter's exit is what is tested),
against the loopback vLLM server of this process, with the default SQLite ledger. A process that
hangs at exit (a finaliser starting the ledger's writer thread during interpreter shutdown) is
killed at `HANG_S` and fails the test; the rows are read back from the file afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.servers.script import Reply

HANG_S = 30  # far above a normal exit (about 1 s): only a hang reaches it
PIECES = ["one", " two", " three"]
ROOT = Path(__file__).resolve().parents[2]

PRELUDE = """
import asyncio, json, os, signal, sys
import llmroute as L
config = json.loads(sys.argv[1])
MESSAGES = [{"role": "user", "content": "count to three"}]
"""

SHAPES = {
    "break": """
client = L.Client(config=config)
stream = client.chat.completions.create(model="t", messages=MESSAGES, stream=True)
for chunk in stream:
    break
""",
    "sys_exit_in_loop": """
client = L.Client(config=config)
stream = client.chat.completions.create(model="t", messages=MESSAGES, stream=True)
for chunk in stream:
    sys.exit(0)
""",
    "keyboard_interrupt": """
client = L.Client(config=config)
stream = client.chat.completions.create(model="t", messages=MESSAGES, stream=True)
for chunk in stream:
    os.kill(os.getpid(), signal.SIGINT)
""",
    "unclosed_client": """
client = L.Client(config=config)
client.chat.completions.create(model="t", messages=MESSAGES)
""",
    "async_break_unclosed": """
async def main():
    global client, stream
    client = L.AsyncClient(config=config)
    stream = await client.chat.completions.create(model="t", messages=MESSAGES, stream=True)
    async for chunk in stream:
        break
asyncio.run(main())
""",
}

# The caller's code fails on chunk `index` (the last one is the usage-only chunk) and the script ends.
RAISE_ON_CHUNK = """
client = L.Client(config=config)
stream = client.chat.completions.create(model="t", messages=MESSAGES, stream=True,
                                        stream_options={{"include_usage": True}})
seen = 0
try:
    for chunk in stream:
        if seen == {index}:
            raise ValueError("the caller's code failed on this chunk")
        seen += 1
    sys.exit(3)  # the stream had fewer chunks than the test expected
except ValueError:
    pass
"""


def _config(server: Any, ledger: Path) -> dict[str, Any]:
    return {
        "providers": {"v": {"kind": "vllm", "base_url": server.base_url}},
        "tiers": {"t": {"deployments": ["v:m"]}},
        "pricing": {"v:*": {"input_per_million": 1, "output_per_million": 2}},
        "ledger": {"sink": "sqlite", "path": str(ledger)},
    }


@pytest.fixture
def server(vllm_server: Any) -> Any:
    vllm_server.models["m"] = 32_768
    vllm_server.default_reply = Reply(pieces=PIECES)
    return vllm_server


def _run(body: str, server: Any, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], list[tuple[Any, ...]]]:
    ledger = tmp_path / "ledger.db"
    script = tmp_path / "script.py"
    script.write_text(PRELUDE + textwrap.dedent(body))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "default"}
    try:
        done = subprocess.run([sys.executable, str(script), json.dumps(_config(server, ledger))], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=HANG_S)
    except subprocess.TimeoutExpired as hung:
        pytest.fail(f"the script did not exit within {HANG_S}s: it hangs at exit ({hung.stderr!r})")
    rows = []
    if ledger.exists():
        with sqlite3.connect(ledger) as conn:
            if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'ledger'").fetchone():
                rows = conn.execute("SELECT status, input_tokens, output_tokens, estimated FROM ledger").fetchall()
    return done, rows


def _chunks_in_a_stream(server: Any) -> int:
    import llmroute as L

    config = _config(server, Path("unused"))
    config["ledger"] = {"sink": "memory"}
    with L.Client(config=config) as client:
        stream = client.chat.completions.create(model="t", messages=[{"role": "user", "content": "count"}],
                                                stream=True, stream_options={"include_usage": True})
        chunks = list(stream)
    assert not chunks[-1].choices and chunks[-1].usage is not None  # the last is the usage-only chunk
    return len(chunks)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_exit_shape_ends_the_process_with_its_row(shape: str, server: Any, tmp_path: Path) -> None:
    done, rows = _run(SHAPES[shape], server, tmp_path)
    if shape == "keyboard_interrupt":  # Python's own exit on Ctrl-C: the traceback, status 130 or by the signal
        assert done.returncode in (1, 130, -signal.SIGINT) and "KeyboardInterrupt" in done.stderr
    else:
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "Unclosed" not in done.stderr, done.stderr  # aiohttp's warning for a session left open
    assert "Exception ignored" not in done.stderr, done.stderr  # a finaliser failing at exit
    assert len(rows) == 1, (rows, done.stderr)
    status, input_tokens, _output, _estimated = rows[0]
    # A stream left open when the script ended is abandoned, whichever way it ended (the generator
    # is not told of an exception in the loop's body); a plain call finished normally.
    assert status == ("ok" if shape == "unclosed_client" else "abandoned"), rows
    assert input_tokens > 0  # the prompt was sent: billed


def test_exception_on_each_chunk_including_the_last(server: Any, tmp_path: Path) -> None:
    count = _chunks_in_a_stream(server)
    assert count >= 4
    for index in range(count):
        folder = tmp_path / str(index)
        folder.mkdir()
        done, rows = _run(RAISE_ON_CHUNK.format(index=index), server, folder)
        assert done.returncode == 0, (index, done.stderr)
        assert "Exception ignored" not in done.stderr, (index, done.stderr)
        assert [r[0] for r in rows] == ["abandoned"], (index, rows, done.stderr)
        assert rows[0][1] > 0


def test_a_ledger_store_locked_at_exit_delays_the_exit_by_a_bounded_wait(server: Any, tmp_path: Path) -> None:
    """Another process holds the SQLite ledger locked for the whole run: the script still exits (after
    the store's busy timeout, within the exit wait), saying its rows were lost, instead of waiting."""
    ledger = tmp_path / "ledger.db"
    holder = sqlite3.connect(ledger, isolation_level=None)
    holder.execute("PRAGMA journal_mode=WAL")
    holder.execute("CREATE TABLE held (x)")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        done, rows = _run("import logging\nlogging.basicConfig()\n" + SHAPES["unclosed_client"], server, tmp_path)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert done.returncode == 0, done.stderr
    assert rows == []
    assert "record(s) lost" in done.stderr and "Traceback" not in done.stderr, done.stderr
