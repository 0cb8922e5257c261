"""Kill the process while its job runs, restart, and get every result and ledger row exactly once."""

from __future__ import annotations

import sqlite3
import time

import pytest

from llmroute import Client
from tests.batch.helpers import config, requests, submit_then_kill


def _ledger_rows(path):
    conn = sqlite3.connect(str(path))
    try:
        return conn.execute("SELECT request_id, attempt, status FROM ledger WHERE pool = 'batch'").fetchall()
    finally:
        conn.close()


@pytest.mark.parametrize("kind", ["bailian", "fireworks"])
def test_kill_during_polling_then_resume_gets_every_result_once(servers, tmp_path, kind):
    server = servers[kind]
    server.hold = True  # the platform job stays in progress until the first process is dead
    cfg = config(servers, tmp_path, batch={"poll_interval_s": 0.01, "max_poll_interval_s": 0.02})
    cfg["ledger"]["flush_interval_s"] = 0.05
    job_id = submit_then_kill(cfg, tmp_path, kind, server)
    assert len(server.jobs) == 1

    server.hold = False
    with Client(cfg) as c:
        assert c.batches.retrieve(job_id).state == "running"
        view = c.batches.wait(job_id)
        results = c.batches.results(job_id)
        c.batches.poll(job_id)  # polling a finished job again adds nothing
    assert view.state == "done" and len(results) == 7 and all(r.ok for r in results.values())
    assert len(server.jobs) == 1  # the platform job was resumed, not submitted again
    rows = _ledger_rows(tmp_path / "ledger.sqlite")
    assert sorted(r[0] for r in rows) == sorted(f"{job_id}:r{i}" for i in range(7))


def test_result_stored_but_not_marked_ledgered_is_not_ledgered_twice(servers, tmp_path):
    cfg = config(servers, tmp_path)
    with Client(cfg) as c:  # the [ledger] SQLite file
        job = c.batches.create(requests(3), model="siliconflow")
        c.batches.wait(job.id)
        # A crash after the ledger committed the rows but before the store marked them ledgered:
        for cid in ("r0", "r1", "r2"):
            c.batches.jobs.store.set_request(job.id, cid, ledgered=0)
        c.batches.jobs.store.set_job_state(job.id, "running", time.time())
        view = c.batches.wait(job.id)
    assert view.state == "done"
    rows = _ledger_rows(tmp_path / "ledger.sqlite")
    assert sorted(r[0] for r in rows) == [f"{job.id}:r{i}" for i in range(3)]
