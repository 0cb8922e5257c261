"""Failover scorecard: every fault of issue 10 against a two-deployment tier with the default settings.

Two loopback fault servers (tests/servers/fault.py) play the primary and the backup; the config
sets nothing but the tier list (no timeout, no resilience key), so the figures are what a new user
gets. For each scenario and call mode (plain, streamed) it prints the outcome as the caller saw it:

* `complete`: the whole answer, nothing repeated, nothing missing;
* `clean error`: a typed llmroute error (what the scenario expects for a content-filter refusal);
* `truncated`: an answer presented as complete that is not (must never happen);
* `hang`: no outcome within the scenario's bound (must never happen);

plus the attempts on the primary and on the backup (as the servers saw them), and the time to the
answer against the healthy baseline of the same mode. Two backup kinds: one that can continue a
partial answer (vLLM: `continue_final_message`) and one that cannot (an OpenAI-compatible platform
that documents no prefill), which matters only for answers cut after content started.

    python benchmarks/failover_scorecard.py [--json benchmarks/out/failover_scorecard.json] [--only NAME]

Bounded: one call per scenario and mode, each within 40 s; only 127.0.0.1 is contacted.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import llmroute as L  # noqa: E402
from llmroute import errors as E  # noqa: E402
from tests.servers.fault import (  # noqa: E402
    FaultServer, close_before, error_event, malformed, reset_during, slow_headers, slow_ttft, stall_after, status,
)
from tests.servers.script import Reply  # noqa: E402

MESSAGES = [{"role": "user", "content": "please say hello there"}]
PIECES = ["one", " two", " three", " four", " five", " six"]
FULL = "".join(PIECES)
CALL_BOUND_S = 40.0

# name -> (what the primary does, what the backup does given whether it continues a cut answer,
# the expected outcome)
Scenario = Tuple[Callable[[], List[Reply]], Callable[[bool], List[Reply]], str]
CUTS = ("stall 30 s after 2 chunks", "cut after 2 chunks", "in-band error after 2 chunks")


def rest(continues: bool) -> List[Reply]:
    """The backup's answer after a cut: the rest of the answer if it continues it, else all of it."""
    return [Reply(pieces=PIECES[2:] if continues else PIECES)]

SCENARIOS: Dict[str, Scenario] = {
    "healthy (baseline)": (lambda: [Reply(pieces=PIECES)], lambda c: [], "complete"),
    "silent after accept": (lambda: [slow_headers(60.0, PIECES)], lambda c: [Reply(pieces=PIECES)], "complete"),
    "silent after headers": (lambda: [slow_ttft(60.0, PIECES)], lambda c: [Reply(pieces=PIECES)], "complete"),
    "slow first token (20 s)": (lambda: [slow_ttft(20.0, PIECES)], lambda c: [Reply(pieces=PIECES)], "complete"),
    "stall 30 s after 2 chunks": (lambda: [stall_after(2, 30.0, PIECES)], rest, "complete"),
    "cut after 2 chunks": (lambda: [reset_during(2, PIECES, gap_s=0.01)], rest, "complete"),
    "in-band error after 2 chunks": (lambda: [error_event(2, PIECES)], rest, "complete"),
    "malformed event mid-stream": (lambda: [malformed(3, PIECES)], lambda c: [], "complete"),
    "no [DONE], finish reason sent": (lambda: [Reply(pieces=PIECES, omit_done=True)], lambda c: [], "complete"),
    "500 then healthy": (lambda: [status(500), Reply(pieces=PIECES)], lambda c: [Reply(pieces=PIECES)], "complete"),
    "429 Retry-After 3, then 1": (lambda: [status(429, retry_after=3), status(429, retry_after=1)],
                                  lambda c: [Reply(pieces=PIECES)], "complete"),
    "keep-alive closed, no reply": (lambda: [close_before(), Reply(pieces=PIECES)], lambda c: [], "complete"),
    "content filter refusal": (lambda: [status(400, message="content_filter: the output was blocked")],
                               lambda c: [], "clean error"),
}
# A restarted plain answer is the backup's whole answer; a continued one is the primary's start + the rest.


def config(primary: FaultServer, backup: FaultServer, backup_kind: str) -> Dict[str, Any]:
    return {
        "providers": {"primary": {"kind": "vllm", "base_url": primary.base_url},
                      "backup": {"kind": backup_kind, "base_url": backup.base_url}},
        "tiers": {"t": {"deployments": ["primary:m", "backup:m"]}},
        "pricing": {"primary:*": {"input_per_million": 0, "output_per_million": 0},
                    "backup:*": {"input_per_million": 0, "output_per_million": 0}},
        "ledger": {"sink": "memory"},
    }


def call_once(client: L.Client, stream: bool) -> Tuple[str, str | None, BaseException | None]:
    """(text the caller got, route.recovery, error)."""
    try:
        if stream:
            with client.chat.completions.create(model="t", messages=MESSAGES, stream=True) as s:
                text = "".join(c.choices[0].delta.content or "" for c in s if c.choices)
                return text, s.response.route.recovery, None
        resp = client.chat.completions.create(model="t", messages=MESSAGES)
        return resp.choices[0].message.content or "", resp.route.recovery, None
    except Exception as exc:  # the outcome is the point: a typed error is a row, not a crash
        return "", None, exc


def outcome(text: str, error: BaseException | None, expected_texts: List[str]) -> str:
    if error is not None:
        return "clean error" if isinstance(error, E.LLMRouteError) else f"crash ({type(error).__name__})"
    return "complete" if text in expected_texts else "truncated"


def run_row(name: str, scenario: Scenario, stream: bool, backup_kind: str,
            servers: Tuple[FaultServer, FaultServer]) -> Dict[str, Any]:
    primary, backup = servers
    primary.reset()
    backup.reset()
    make_primary, make_backup, expected = scenario
    continues = backup_kind == "vllm"
    if name in CUTS and stream and not continues:
        expected = "clean error"  # a stream the caller has seen is never restarted: StreamInterruptedError
    result: Dict[str, Any] = {}

    def work() -> None:
        with L.Client(config=config(primary, backup, backup_kind)) as client:
            call_once(client, stream)  # warm-up: first-call imports and connections are not the fault's cost
            primary.reset()
            backup.reset()
            primary.push(*make_primary())
            backup.push(*make_backup(continues))
            started = time.monotonic()
            text, recovery, error = call_once(client, stream)
            result.update(elapsed=time.monotonic() - started, text=text, recovery=recovery, error=error)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(CALL_BOUND_S)
    expected_texts = [FULL]
    row = {"scenario": name, "mode": "stream" if stream else "plain", "backup": backup_kind,
           "expected": expected, "primary_calls": len(primary.chat_requests()),
           "backup_calls": len(backup.chat_requests())}
    if thread.is_alive():
        row.update(outcome="hang", elapsed_s=None, recovery=None, error=None)
        return row
    error = result["error"]
    row.update(outcome=outcome(result["text"], error, expected_texts), elapsed_s=round(result["elapsed"], 2),
               recovery=result["recovery"], error=type(error).__name__ if error is not None else None)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--only", help="run the scenarios whose name contains this")
    args = parser.parse_args()
    servers = (FaultServer().start(), FaultServer().start())
    rows: List[Dict[str, Any]] = []
    try:
        for backup_kind in ("vllm", "openai-compatible"):
            for name, scenario in SCENARIOS.items():
                if args.only and args.only not in name:
                    continue
                for stream in (False, True):
                    rows.append(run_row(name, scenario, stream, backup_kind, servers))
                    r = rows[-1]
                    print(f"  {backup_kind:<17} {r['mode']:<6} {name:<30} {r['outcome']:<12} "
                          f"{r['elapsed_s']}s", file=sys.stderr)
    finally:
        for server in servers:
            server.stop()
    baseline = {(r["mode"], r["backup"]): r["elapsed_s"] for r in rows if r["scenario"].startswith("healthy")}
    print("| backup can continue | scenario | mode | outcome (expected) | primary / backup attempts | recovery "
          "| time to answer | vs healthy |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        base = baseline.get((r["mode"], r["backup"]))
        extra = "" if r["elapsed_s"] is None or base is None else f"+{r['elapsed_s'] - base:.2f} s"
        can = "yes (vLLM)" if r["backup"] == "vllm" else "no"
        err = f" {r['error']}" if r["error"] else ""
        ok = "" if r["outcome"] == r["expected"] else " **UNEXPECTED**"
        print(f"| {can} | {r['scenario']} | {r['mode']} | {r['outcome']}{err}{ok} | "
              f"{r['primary_calls']} / {r['backup_calls']} | {r['recovery'] or '-'} | "
              f"{r['elapsed_s'] if r['elapsed_s'] is not None else '-'} s | {extra} |")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
