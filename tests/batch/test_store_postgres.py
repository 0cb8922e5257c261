"""The job store in the PostgreSQL ledger's database (`[ledger] sink = "postgres"`, no `[batch] store`):
a job started by one process is resumed by another with no file in common (another machine of the
fleet), every result and ledger row exactly once; SQLite stays the default."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from llmroute import Client
from llmroute.batch import JobStore, PostgresJobStore
from tests.batch.helpers import config, requests, submit_then_kill


def _pg_config(servers, folder: Path, url: str, **batch):
    cfg = config(servers, folder, batch={"poll_interval_s": 0.01, "max_poll_interval_s": 0.02, **batch})
    del cfg["batch"]["store"]
    cfg["ledger"] = {"sink": "postgres", "url": url, "spool_path": str(folder / "spool.db"), "flush_interval_s": 0.05}
    return cfg


def _pg_rows(url: str, sql: str, args=()):
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute(sql, args).fetchall()


def test_sqlite_stays_the_default_and_a_postgres_ledger_moves_the_store(servers, tmp_path, pg_url):
    with Client(config(servers, tmp_path)) as c:
        assert type(c.batches.jobs.store) is JobStore
    cfg = _pg_config(servers, tmp_path, pg_url)
    with Client(cfg) as c:
        store = c.batches.jobs.store
        assert isinstance(store, PostgresJobStore) and "postgresql://" in repr(store)
        job = c.batches.create(requests(5), model="together", feature="labels")
        c.batches.wait(job.id)
        results = c.batches.results(job.id)
        assert sorted(results) == [f"r{i}" for i in range(5)] and all(r.ok for r in results.values())
        assert [e["kind"] for e in store.events(job.id)][0] == "created"
    tables = {r[0] for r in _pg_rows(pg_url, "SELECT tablename FROM pg_tables WHERE tablename LIKE 'batch_%%'")}
    assert tables == {"batch_jobs", "batch_parts", "batch_requests", "batch_events"}
    assert _pg_rows(pg_url, "SELECT state FROM batch_jobs WHERE job_id = %s", (job.id,)) == [("done",)]
    assert not list(tmp_path.glob("*.sqlite"))  # no job store (nor ledger) file beside the config
    # An explicit [batch] store keeps SQLite even with the PostgreSQL ledger.
    cfg["batch"]["store"] = str(tmp_path / "own.sqlite")
    with Client(cfg) as c:
        assert type(c.batches.jobs.store) is JobStore


@pytest.mark.parametrize("kind", ["together", "fireworks"])
def test_a_job_killed_on_one_machine_is_resumed_on_another(servers, tmp_path, pg_url, kind):
    server = servers[kind]
    server.hold = True  # the platform job stays in progress until the first process is dead
    first, second = tmp_path / "machine-a", tmp_path / "machine-b"
    first.mkdir()
    second.mkdir()
    job_id = submit_then_kill(_pg_config(servers, first, pg_url), first, kind, server)
    assert len(server.jobs) == 1

    server.hold = False
    with Client(_pg_config(servers, second, pg_url)) as c:  # nothing of machine-a's folder is read
        assert c.batches.retrieve(job_id).state == "running"
        view = c.batches.wait(job_id)
        results = c.batches.results(job_id)
        c.batches.poll(job_id)  # polling a finished job again adds nothing
    assert view.state == "done" and sorted(results) == [f"r{i}" for i in range(7)]
    assert all(r.ok for r in results.values())
    assert len(server.jobs) == 1  # the platform job was resumed, not submitted again
    rows = _pg_rows(pg_url, "SELECT request_id FROM ledger WHERE pool = 'batch' ORDER BY request_id")
    assert [r[0] for r in rows] == [f"{job_id}:r{i}" for i in range(7)]
    assert _pg_rows(pg_url, "SELECT COUNT(*) FROM batch_requests WHERE job_id = %s AND state = 'ok' AND ledgered = 1",
                    (job_id,)) == [(7,)]


def test_a_result_ledgered_but_not_marked_is_not_counted_twice(servers, tmp_path, pg_url):
    cfg = _pg_config(servers, tmp_path, pg_url)
    cfg["budgets"] = [{"name": "d", "max_tokens": 10_000_000}]
    with Client(cfg) as c:
        job = c.batches.create(requests(3), model="siliconflow")
        c.batches.wait(job.id)
        spent = c._engine.budget_book.spent("d", time.time())
        # A crash after PostgreSQL committed the rows but before the store marked them ledgered:
        for cid in ("r0", "r1", "r2"):
            c.batches.jobs.store.set_request(job.id, cid, ledgered=0)
        c.batches.jobs.store.set_job_state(job.id, "running", time.time())
        assert c.batches.wait(job.id).state == "done"
        assert spent > 0 and c._engine.budget_book.spent("d", time.time()) == spent
    rows = _pg_rows(pg_url, "SELECT request_id FROM ledger WHERE pool = 'batch' ORDER BY request_id")
    assert [r[0] for r in rows] == [f"{job.id}:r{i}" for i in range(3)]
