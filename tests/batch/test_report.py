"""`llmroute report` shows batch vs online spend and what batch saved."""

from __future__ import annotations

from decimal import Decimal

from llmroute import Client
from llmroute.accounting.sinks import read_records
from llmroute.cli.report_command import main as report_main
from llmroute.accounting.batch_savings import batch_savings
from tests.batch.helpers import config, requests


def test_report_prints_what_batch_saved(servers, tmp_path, capsys):
    servers["together"].fail_ids = {"r3"}
    cfg = config(servers, tmp_path)
    with Client(cfg) as c:
        job = c.batches.create(requests(4), model="together", on_failure="online")
        c.batches.wait(job.id)
        c.chat.completions.create(model="together", messages=[{"role": "user", "content": "one two"}])
    ledger = tmp_path / "ledger.sqlite"
    saved = batch_savings(read_records(str(ledger)))["USD"]
    # 3 batch results: (3 prompt + 2 completion tokens) each at 0.52/M in batch, 1.04/M online.
    assert saved["batch_requests"] == 3
    assert saved["batch"] == 15 * Decimal("0.52") / 10**6 and saved["saved"] == 15 * Decimal("0.52") / 10**6
    assert saved["run_online_from_batch"] > 0 and saved["other_pools"] > 0
    assert report_main(["--ledger", str(ledger), "--by", "pool"]) == 0
    out = capsys.readouterr().out
    assert "batch USD: 0.0000078 for 3 results through batch APIs" in out and "saved 0.0000078 (50%)" in out
    assert "interactive" in out and "batch" in out
