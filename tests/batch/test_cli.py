"""`llmroute batch` against the loopback batch servers, through a TOML config file."""

from __future__ import annotations

import io
import json

from llmroute.cli.batch_command import main
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


def _run(*argv):
    out = io.StringIO()
    code = main(list(argv), out=out)
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
    assert code == 0 and "cancelled" in text
