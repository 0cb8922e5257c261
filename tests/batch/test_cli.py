"""`llmroute batch` against the loopback batch servers, through a TOML config file."""

from __future__ import annotations

import io
import json

from llmroute.cli.batch_command import EXIT_ALL_FAILED, EXIT_CANCELLED, EXIT_SOME_FAILED, main
from tests.batch.helpers import MODELS, PROVIDER, requests


def _toml(servers, tmp_path) -> str:
    lines = []
    for kind, name in PROVIDER.items():
        s = servers[kind]
        lines += [f"[providers.{name}]", f'kind = "{kind}"', f'base_url = "{s.base_url}"', f'api_key = "{s.api_key}"']
        if kind == "siliconflow":
            lines.append('region = "cn"')
        lines.append("")
    lines += ["[tiers.bulk]", f'deployments = ["{PROVIDER["bailian"]}:{MODELS["bailian"]}"]', "",
              "[batch]", 'store = "jobs.sqlite"', "poll_interval_s = 0.001", "max_poll_interval_s = 0.01", "",
              "[batch.accounts]", 'fw = "test-account"', "", "[ledger]", 'path = "ledger.sqlite"', ""]
    path = tmp_path / "llmroute.toml"
    path.write_text("\n".join(lines))
    return str(path)


def _run(*argv, err=None):
    out = io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue()


def test_submit_status_wait_fetch_list(servers, tmp_path):
    cfg = _toml(servers, tmp_path)
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in requests(3)))
    code, text = _run("--config", cfg, "submit", str(src), "--model", "bulk", "--feature", "labels",
                      "--metadata", "team=data")
    assert code == 0
    job_id = text.split()[1].rstrip(":")
    assert "3 requests in 1 platform job(s)" in text and "estimated cost at most" in text and "online:" in text
    code, text = _run("--config", cfg, "wait", job_id)
    assert code == 0 and f"{job_id}: done, 3 done / 0 failed / 3 total" in text
    code, text = _run("--config", cfg, "status", job_id)
    assert "event submitted" in text and "completed" in text
    out = tmp_path / "out.jsonl"
    code, text = _run("--config", cfg, "fetch", job_id, "-o", str(out))
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(g["custom_id"] for g in got) == ["r0", "r1", "r2"]
    assert all(g["served_by"] == "batch" and g["cost"] is not None for g in got)
    code, text = _run("--config", cfg, "list")
    assert job_id in text


def test_cancel_from_the_command_line(servers, tmp_path):
    cfg = _toml(servers, tmp_path)
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in requests(2)))
    servers["bailian"].hold = True
    code, text = _run("--config", cfg, "submit", str(src), "--model", "bulk")
    job_id = text.split()[1].rstrip(":")
    code, text = _run("--config", cfg, "cancel", job_id)
    code, text = _run("--config", cfg, "wait", job_id, "--timeout", "5")
    assert code == EXIT_CANCELLED and "cancelled" in text


def _submit(cfg, tmp_path, n, *extra):
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in requests(n)))
    err = io.StringIO()
    code, text = _run("--config", cfg, "submit", str(src), "--model", "bulk", *extra, err=err)
    return code, text, err.getvalue()


def test_a_job_with_failed_requests_exits_non_zero_and_prints_the_first_causes(servers, tmp_path):
    cfg = _toml(servers, tmp_path)
    servers["bailian"].fail_ids = {"r1"}
    code, text, err = _submit(cfg, tmp_path, 3, "--wait")
    assert code == EXIT_SOME_FAILED, (text, err)
    assert "finished with failures (1 of 3 requests failed)" in err and "  r1: " in err
    job_id = text.split()[1].rstrip(":")
    err_wait = io.StringIO()
    assert _run("--config", cfg, "wait", job_id, err=err_wait)[0] == EXIT_SOME_FAILED  # a finished job: the same
    assert "r1" in err_wait.getvalue()


def test_a_job_whose_every_request_failed_exits_with_its_own_status(servers, tmp_path):
    cfg = _toml(servers, tmp_path)
    servers["bailian"].fail_ids = {f"r{i}" for i in range(5)}
    code, text, err = _submit(cfg, tmp_path, 5, "--wait")
    assert code == EXIT_ALL_FAILED
    assert "failed: every request (5 of 5 requests failed)" in err
    assert err.count("\n  r") == 3 and "... and 2 more" in err  # the first causes, not all of them


def test_an_expired_job_exits_as_cancelled_or_expired(servers, tmp_path):
    cfg = _toml(servers, tmp_path)
    servers["bailian"].expire = True
    code, text, err = _submit(cfg, tmp_path, 4, "--wait")
    assert code == EXIT_CANCELLED and "was cancelled or expired" in err
