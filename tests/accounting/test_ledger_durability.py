"""The ledger never loses silently: while storage fails, records wait in a bounded spool and are
retried; `health()` counts what waits and what was lost, and every loss is logged at ERROR with its
count. JSONL writes are whole lines; readers skip a torn line with a warning and read a record
written twice once. Disk-full is real: a child process under RLIMIT_FSIZE (EFBIG past the limit), and
a read-only ledger folder under a running client."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import pytest

from llmroute import Client
from llmroute.accounting.ledger import JSONLSink, LedgerRecord, SQLiteSink
from llmroute.accounting.sinks import read_records
from llmroute.cli import main as cli_main
from tests.accounting._client import MESSAGES, config, provider
from tests.read_only import read_only
from tests.servers.script import Reply

REPO = Path(__file__).resolve().parents[2]
TG_MODEL = "meta-llama/Llama-3.3-70B-Instruct-Turbo"


def run_full_disk_child(kind: str, path: Path, mode: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "tests.accounting._ledger_full_child", kind, str(path), mode],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
def test_a_full_disk_keeps_records_in_the_spool_and_writes_them_when_it_recovers(tmp_path, kind):
    path = tmp_path / f"ledger.{kind}"
    seen = run_full_disk_child(kind, path, "recover")
    assert seen["first_flush"] is True and seen["full_flush"] is False
    assert seen["after_first_failure"]["waiting"] == 300 and seen["after_first_failure"]["lost"] == 0
    assert seen["after_first_failure"]["last_error"]
    # 600 waiting against a spool of 500: the 100 oldest are lost, counted and logged with the count.
    assert seen["after_overflow"]["waiting"] == 500 and seen["after_overflow"]["lost"] == 100
    assert seen["recovered_flush"] is True
    assert seen["after_recovery"] == {**seen["after_recovery"], "written": 510, "waiting": 0, "lost": 100,
                                      "last_error": None}
    assert any("100 lost" in m for m in seen["errors"])
    assert len(seen["errors"]) <= 4  # one line per failing flush or overflow, not one per record
    ids = [r.request_id for r in read_records(path)]
    assert ids == [f"r{n}" for n in [*range(10), *range(110, 610)]]  # the oldest waiting were the ones lost
    if kind == "jsonl":
        # Whole lines on disk, not only in what readers return: no torn line, no duplicate.
        lines = path.read_text(encoding="utf-8").splitlines()
        assert len(lines) == 510 and all(json.loads(line)["request_id"] for line in lines)


@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
def test_closing_on_a_full_disk_logs_the_loss_with_its_count(tmp_path, kind):
    seen = run_full_disk_child(kind, tmp_path / f"ledger.{kind}", "close")
    assert seen["after_close"]["waiting"] == 0 and seen["after_close"]["lost"] == 600
    assert any("closing with storage still failing" in m and "500 record(s) lost" in m for m in seen["errors"])


def record(n: int, ts: float = 1_700_000_000.0) -> LedgerRecord:
    return LedgerRecord(ts=ts + n, request_id=f"r{n}", provider="p", deployment="p:m", model="m", input_tokens=10,
                        output_tokens=2, cost=Decimal("0.001"), currency="USD", priced=True)


def test_readers_skip_torn_lines_and_read_duplicates_once(tmp_path, caplog, capsys):
    path = tmp_path / "ledger.jsonl"
    good = [record(n).to_json() for n in range(4)]
    torn = good[2][: len(good[2]) // 2]
    # A torn line in the middle (a crash, then a restart appended), a duplicate, a torn tail.
    path.write_text("\n".join([good[0], good[1], torn, good[2], good[1], good[3], torn]), encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="llmroute.ledger"):
        ids = [r.request_id for r in read_records(path)]
    assert ids == ["r0", "r1", "r2", "r3"]
    assert sum("torn line" in r.getMessage() for r in caplog.records) == 2
    assert cli_main(["report", "--ledger", str(path), "--format", "json"]) == 0
    groups = json.loads(capsys.readouterr().out)["groups"]
    assert sum(group["requests"] for group in groups) == 4


def test_the_report_command_shows_the_torn_line_warning_once(tmp_path):
    # The library logs to a NullHandler; the `llmroute` command is the application, so it must show
    # the warning docs/ledger.md promises (it was dropped: a report over a damaged ledger looked clean).
    path = tmp_path / "ledger.jsonl"
    good = [record(n, ts=time.time() - 60).to_json() for n in range(2)]
    path.write_text("\n".join([good[0], good[1], good[1][:30]]), encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "llmroute", "report", "--ledger", str(path), "--format", "json"],
                          capture_output=True, text=True, timeout=120, cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr
    assert sum(g["requests"] for g in json.loads(done.stdout)["groups"]) == 2
    warnings = [line for line in done.stderr.splitlines() if "torn line" in line]
    assert warnings == [f"llmroute report: ledger {path}: skipping a torn line 3 (a write was cut short)"]


def test_a_jsonl_sink_ends_a_torn_tail_before_appending(tmp_path):
    path = tmp_path / "ledger.jsonl"
    path.write_text(record(0).to_json() + "\n" + record(1).to_json()[:40], encoding="utf-8")  # a crash mid-line
    with JSONLSink(path) as sink:
        sink.write(record(2))
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 3 and json.loads(lines[2])["request_id"] == "r2"
    assert [r.request_id for r in read_records(path)] == ["r0", "r2"]


def test_a_line_that_is_not_a_record_still_means_not_a_ledger(tmp_path):
    path = tmp_path / "ledger.jsonl"
    path.write_text(record(0).to_json() + "\nhello\n", encoding="utf-8")
    with pytest.raises(ValueError, match="not a ledger record"):
        list(read_records(path))


def test_client_health_counts_what_waits_on_a_read_only_ledger_folder(together_server, tmp_path):
    # A sink object skips the load-time path check, as a mount that turns read-only after load would.
    folder = tmp_path / "ledgers"
    cfg = config({"tg": provider("together", together_server)}, {"t": [f"tg:{TG_MODEL}"]})
    sink = SQLiteSink(folder / "l.db", flush_interval_s=0.05)
    with Client(config=cfg, ledger=sink) as client:
        with read_only(folder):
            for _ in range(3):
                together_server.push(Reply(pieces=["a"]))
                client.chat.completions.create(model="t", messages=MESSAGES)
            deadline = time.monotonic() + 5
            while client.health().ledger.write_errors == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            health = client.health().ledger
            assert health.waiting == 3 and health.lost == 0 and health.written == 0 and health.last_error
        while client.health().ledger.waiting and time.monotonic() < deadline + 5:
            time.sleep(0.05)  # writable again: the next interval writes the spool
        health = client.health().ledger
        assert (health.written, health.waiting, health.last_error) == (3, 0, None)
    assert len(list(read_records(folder / "l.db"))) == 3
