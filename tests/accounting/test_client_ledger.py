"""The ledger as the public client writes it: one record per attempt (failovers, errors, interrupted
streams), its columns filled from the call, readable with plain sqlite3 after `client.close()`; the
JSONL sink; and a client process killed mid-load (docs/ledger.md, "Durability bound").

The config offers sinks sqlite | jsonl | memory | none: a callable sink exists in
llmroute.accounting.ledger (`CallableSink`, tested in test_ledger.py) but cannot be chosen from the
config, so it is not exercised through the client here.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

import llmroute as L
from llmroute import Client
from llmroute.accounting.ledger import SCHEMA_VERSION
from tests.accounting._client import MESSAGES, TABLE_VERSION, config, provider
from tests.providers.helpers import drain
from tests.servers.script import Reply

TG = "tg:meta-llama/Llama-3.3-70B-Instruct-Turbo"
FW = "fw:accounts/fireworks/models/llama-v3p1-8b-instruct"
REPO = Path(__file__).resolve().parents[2]


def _cfg(together_server, fireworks_server, ledger):
    # Tiers small and large: model="auto" routes between them with the classifier, which scores the call.
    return config(
        {"tg": provider("together", together_server), "fw": provider("fireworks", fireworks_server)},
        {"large": [TG, FW], "small": [FW]},
        ledger=ledger,
    )


def _rows(path: Path) -> list[dict]:
    con = sqlite3.connect(path)
    con.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in con.execute("SELECT * FROM ledger ORDER BY id")]
    finally:
        con.close()


def _run_calls(client: Client, together_server, fireworks_server) -> dict[str, str]:
    """Four calls; returns their request ids by name."""
    ids = {}
    # 1. plain OK on the large tier, with feature and metadata.
    together_server.push(Reply(usage={"prompt_tokens": 1000}, cached_tokens=400, pieces=["a", "b"]))
    ids["ok"] = client.chat.completions.create(
        model="large", messages=MESSAGES, feature="summarize", metadata={"tenant": "acme"}).route.request_id
    # 2. failover: Together 503 (not billed), then Fireworks.
    together_server.push(Reply(error="overloaded"))
    fireworks_server.push(Reply(usage={"prompt_tokens": 1000}, pieces=["a", "b"]))
    ids["failover"] = client.chat.completions.create(model="large", messages=MESSAGES, feature="chat").route.request_id
    # 3. a caller error: one attempt, an error record, nothing billed.
    fireworks_server.push(Reply(error="bad_request"))
    with pytest.raises(L.BadRequestError):
        client.chat.completions.create(model="small", messages=MESSAGES, feature="chat")
    # 4. a stream cut after content: interrupted, billed at estimated usage.
    fireworks_server.push(Reply(pieces=["one", " two", " three"], reset_after_chunks=2))
    stream = client.chat.completions.create(model="small", messages=MESSAGES, feature="chat", stream=True)
    with pytest.raises(L.StreamInterruptedError):
        drain(stream)
    stream.close()
    # 5. routed by the classifier: the router's score goes in the record.
    fireworks_server.push(Reply(pieces=["x"]))
    together_server.push(Reply(pieces=["x"]))
    auto = client.chat.completions.create(model="auto", messages=MESSAGES, feature="auto-routed")
    assert auto.route.score is not None
    ids["auto"] = auto.route.request_id
    ids["auto_score"] = auto.route.score
    return ids


def test_sqlite_ledger_has_one_record_per_attempt_readable_with_plain_sql(together_server, fireworks_server,
                                                                          tmp_path):
    path = tmp_path / "ledger.db"
    client = Client(config=_cfg(together_server, fireworks_server,
                                {"sink": "sqlite", "path": str(path), "flush_interval_s": 0.05}))
    ids = _run_calls(client, together_server, fireworks_server)
    client.close()

    rows = _rows(path)
    assert len(rows) == 6  # ok, 2 for the failover, the error, the interrupted stream, auto
    by_request: dict[str, list[dict]] = {}
    for r in rows:
        by_request.setdefault(r["request_id"], []).append(r)

    (ok,) = by_request[ids["ok"]]
    assert (ok["attempt"], ok["status"], ok["error_type"]) == (1, "ok", None)
    assert (ok["feature"], json.loads(ok["metadata"]), ok["tier"], ok["pool"]) == (
        "summarize", {"tenant": "acme"}, "large", "interactive")
    assert (ok["provider"], ok["provider_kind"], ok["deployment"], ok["model"]) == (
        "tg", "together", TG, TG.partition(":")[2])
    assert (ok["input_tokens"], ok["cached_tokens"], ok["output_tokens"]) == (1000, 400, 2)
    assert Decimal(ok["cost"]) == Decimal("0.00104208")  # 1002 tokens x 1.04 USD per million
    assert (ok["currency"], ok["priced"], ok["estimated"], ok["usage_estimated"]) == ("USD", 1, 0, 0)
    assert ok["price_version"] == TABLE_VERSION
    assert ok["latency_ms"] is not None and ok["latency_ms"] >= 0

    first, second = by_request[ids["failover"]]
    assert (first["attempt"], first["status"], first["error_type"], first["deployment"]) == (
        1, "error", "OverloadedError", TG)
    assert (first["input_tokens"], first["output_tokens"], Decimal(first["cost"])) == (0, 0, Decimal(0))
    assert (second["attempt"], second["status"], second["deployment"]) == (2, "ok", FW)
    assert Decimal(second["cost"]) == Decimal("0.0002004")  # 1002 x 0.20 per million

    errors = [r for r in rows if r["error_type"] == "BadRequestError"]
    assert len(errors) == 1 and errors[0]["status"] == "error" and errors[0]["feature"] == "chat"
    assert errors[0]["tier"] == "small"

    (cut,) = [r for r in rows if r["status"] == "interrupted"]
    assert cut["usage_estimated"] == 1 and cut["estimated"] == 1 and cut["output_tokens"] > 0
    assert Decimal(cut["cost"]) > 0

    (auto,) = by_request[ids["auto"]]
    assert auto["router_score"] == pytest.approx(ids["auto_score"]) and auto["feature"] == "auto-routed"
    assert [r["router_score"] for r in rows if r["request_id"] != ids["auto"]] == [None] * 5

    # The documented queries work as written.
    con = sqlite3.connect(path)
    try:
        per_feature = dict(con.execute(
            "SELECT feature, COUNT(DISTINCT request_id) FROM ledger GROUP BY feature").fetchall())
        tenant = con.execute("SELECT json_extract(metadata, '$.tenant') FROM ledger WHERE feature = 'summarize'"
                             ).fetchone()[0]
        schema = con.execute("SELECT value FROM ledger_meta WHERE key = 'schema_version'").fetchone()[0]
    finally:
        con.close()
    assert per_feature == {"summarize": 1, "chat": 3, "auto-routed": 1}
    assert tenant == "acme" and str(schema) == str(SCHEMA_VERSION)


def test_jsonl_ledger_writes_the_same_records(together_server, fireworks_server, tmp_path):
    path = tmp_path / "ledger.jsonl"
    with Client(config=_cfg(together_server, fireworks_server,
                            {"sink": "jsonl", "path": str(path), "flush_interval_s": 0.05})) as client:
        ids = _run_calls(client, together_server, fireworks_server)
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert len(lines) == 6
    failover = [r for r in lines if r["request_id"] == ids["failover"]]
    assert [(r["attempt"], r["status"]) for r in failover] == [(1, "error"), (2, "ok")]
    ok = next(r for r in lines if r["request_id"] == ids["ok"])
    assert ok["cost"] == "0.00104208" and ok["metadata"] == {"tenant": "acme"} and ok["tier"] == "large"
    assert {r["status"] for r in lines} == {"ok", "error", "interrupted"}
    # read_records (what `llmroute report` reads) gives back exact Decimals.
    from llmroute.accounting.sinks import read_records

    recs = list(read_records(path))
    assert [r.request_id for r in recs] == [r["request_id"] for r in lines]
    assert next(r for r in recs if r.request_id == ids["ok"]).cost == Decimal("0.00104208")


def test_no_ledger_file_when_sink_is_none(together_server, fireworks_server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    together_server.push(Reply(pieces=["a"]))
    with Client(config=_cfg(together_server, fireworks_server, {"sink": "none"})) as client:
        resp = client.chat.completions.create(model="large", messages=MESSAGES)
    assert resp.cost.amount is not None
    assert list(tmp_path.iterdir()) == []


def test_killed_client_process_keeps_what_was_committed(tmp_path):
    """SIGKILL mid-load: every record older than the flush interval is there, and what is there is a
    clean prefix of the calls served (contiguous, no torn or duplicate rows)."""
    path = tmp_path / "ledger.db"
    interval, synced = 0.05, 10
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.accounting._client_ledger_child", str(path), str(interval), str(synced)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    served = 0
    seen_synced = False
    try:
        for line in child.stdout:  # bounded: the child stops by itself after 60 s
            if line.startswith("synced"):
                seen_synced = True
            elif line.startswith("served"):
                served = int(line.split()[1])
                if seen_synced and served >= synced + 15:
                    break
    finally:
        child.send_signal(signal.SIGKILL)
        rest, err = child.communicate(timeout=30)
    # Lines still in the pipe when it died: the calls it had served in total.
    served = max([served] + [int(x.split()[1]) for x in rest.splitlines() if x.startswith("served")])
    assert seen_synced, err
    rows = _rows(path)
    seqs = [int(json.loads(r["metadata"])["seq"]) for r in rows]
    assert len(rows) >= synced  # committed long before the kill
    assert seqs == list(range(1, len(rows) + 1))  # a prefix, in order, nothing torn or doubled
    assert len({r["request_id"] for r in rows}) == len(rows)
    assert all(r["status"] == "ok" and r["cost"] is not None for r in rows)
    # At most one record beyond the last call that returned: the one being written when it died.
    assert len(rows) <= served + 1
