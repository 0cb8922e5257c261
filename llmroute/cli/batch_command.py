"""`llmroute batch submit|status|wait|fetch|cancel|list`: batch jobs from the command line.

Every subcommand reads the config (`--config`, default llmroute.toml) for the providers and the
`[batch]` job store; `wait` and `status` resume a job another process started.

`submit --wait` and `wait` exit 0 when every request has a result, 3 when `--timeout` passed first,
4 when some requests failed, 5 when all failed, 6 when the job was cancelled or a platform job
expired with requests unserved; the first causes go to stderr (docs/batch.md, "Exit statuses").
"""

from __future__ import annotations

import argparse
import json
import sys
from decimal import Decimal
from typing import Any, List, Mapping
from llmroute.client import Client
from llmroute._runtime.cli_help import with_defaults

__all__ = ["main", "outcome_status", "EXIT_OK", "EXIT_NOT_FINISHED", "EXIT_SOME_FAILED", "EXIT_ALL_FAILED",
           "EXIT_CANCELLED"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="llmroute batch", description="batch jobs on the platforms' batch APIs",
        epilog="exit statuses of submit --wait and wait: 0 all requests answered, 3 still running at --timeout, "
               "4 some requests failed, 5 all failed, 6 cancelled or expired, 2 a usage or config error")
    parser.add_argument("--config", default="llmroute.toml", help="config file (default: llmroute.toml)")
    sub = parser.add_subparsers(dest="command", required=True)
    submit = sub.add_parser("submit", help="submit a JSONL file of chat requests (each with a custom_id)")
    submit.add_argument("file", help="JSONL: OpenAI batch lines or {custom_id, messages, ...} objects")
    submit.add_argument("--model", required=True, help="a tier, 'auto' or 'provider:model-id'")
    submit.add_argument("--feature", help="the feature every request is recorded under in the ledger")
    submit.add_argument("--metadata", action="append", default=[], metavar="KEY=VALUE",
                        help="ledger metadata for every request; repeat for more pairs")
    submit.add_argument("--on-failure", choices=["resubmit", "next_deployment", "online", "fail"],
                        help="what to do with a failed or expired platform job (default: [batch] on_failure)")
    submit.add_argument("--window", help="completion window, e.g. 24h")
    submit.add_argument("--wait", action="store_true", help="wait for the results after submitting")
    for name, text in (("status", "a job's progress, parts and events"), ("wait", "poll until the job finishes"),
                       ("fetch", "write the results as JSONL"), ("cancel", "cancel the job's platform jobs")):
        p = sub.add_parser(name, help=text)
        p.add_argument("job_id", help="the job's id, as submit printed it")
        if name == "wait":
            p.add_argument("--timeout", type=float, help="give up waiting after this many seconds")
        if name == "fetch":
            p.add_argument("--output", "-o", help="file to write (default: stdout)")
        if name == "status":
            p.add_argument("--json", action="store_true", help="print the job as JSON")
    sub.add_parser("list", help="every job in the store")
    return parser


# Exit statuses of `submit --wait` and `wait` (docs/batch.md, "Exit statuses"); 2 stays a usage or config error.
EXIT_OK = 0
EXIT_NOT_FINISHED = 3  # `wait --timeout` passed with the job still running
EXIT_SOME_FAILED = 4  # finished; some requests failed (the rest have results)
EXIT_ALL_FAILED = 5  # finished; every request failed
EXIT_CANCELLED = 6  # cancelled, or a platform job expired with requests left unserved
SHOWN_CAUSES = 3  # failures printed on stderr


def outcome_status(view: Any) -> int:
    """The exit status a finished (or not) job's view calls for."""
    if not view.finished:
        return EXIT_NOT_FINISHED
    expired = any((p.get("state") == "expired") for p in view.parts)
    if view.state == "cancelled" or (expired and view.failed):
        return EXIT_CANCELLED
    if view.failed and view.failed >= view.total:
        return EXIT_ALL_FAILED
    if view.failed:
        return EXIT_SOME_FAILED
    return EXIT_OK


def _report_failures(batches: Any, view: Any, err: Any) -> int:
    """Print how many requests failed and the first causes (stderr); return the exit status."""
    status = outcome_status(view)
    if status in (EXIT_OK, EXIT_NOT_FINISHED):
        return status
    failed = [r for r in batches.results(view.id).values() if r.error is not None]
    what = {EXIT_CANCELLED: "was cancelled or expired", EXIT_ALL_FAILED: "failed: every request",
            EXIT_SOME_FAILED: "finished with failures"}[status]
    print(f"llmroute batch: job {view.id} {what} ({view.failed} of {view.total} requests failed)", file=err)
    for result in failed[:SHOWN_CAUSES]:
        error = result.error or {}
        print(f"  {result.custom_id}: {error.get('code') or 'error'}: {error.get('message') or ''}"[:400], file=err)
    if len(failed) > SHOWN_CAUSES:
        print(f"  ... and {len(failed) - SHOWN_CAUSES} more (llmroute batch fetch {view.id})", file=err)
    return status


def _money(totals: Mapping[str, Decimal]) -> str:
    return ", ".join(f"{amount.normalize():f} {currency}" for currency, amount in sorted(totals.items())) or "unpriced"


def _print_status(view: Any, out: Any, events: bool = True) -> None:
    print(view.progress_line(), file=out)
    for p in view.parts:
        print(f"  {p['part_id']}  {p['deployment']}  {p['platform_job_id'] or '-'}  "
              f"{p['raw_state'] or p['state']}  {p['requests']} requests"
              + (f"  ({p['estimate']})" if p.get("estimate") else ""), file=out)
    if events:
        for e in view.events:
            print(f"  event {e['kind']}: {e['detail']}", file=out)


def main(argv: List[str] | None = None, out: Any = None, err: Any = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    args = with_defaults(_parser()).parse_args(argv)

    with Client.from_config(args.config) as client:
        batches = client.batches
        if args.command == "submit":
            metadata = dict(item.split("=", 1) for item in args.metadata if "=" in item)
            view = batches.create(args.file, model=args.model, feature=args.feature, metadata=metadata,
                                  on_failure=args.on_failure, completion_window=args.window)
            rows = batches.jobs.store.requests(view.id)
            estimate = batches.jobs.estimate_rows(rows)
            print(f"job {view.id}: {view.total} requests in {len(view.parts)} platform job(s)", file=out)
            print(f"estimated cost at most {_money(estimate['batch'])} in batch "
                  f"(online: {_money(estimate['online'])})", file=out)
            if args.wait:
                view = batches.wait(view.id, on_progress=lambda v: print(v.progress_line(), file=out))
            _print_status(view, out, events=False)
            if view.finished:  # with --wait, or a job that ended at submission (every file refused)
                return _report_failures(batches, view, err)
        elif args.command == "status":
            view = batches.retrieve(args.job_id)
            if args.json:
                print(json.dumps({**view.__dict__, "finished": view.finished}, default=str, indent=2), file=out)
            else:
                _print_status(view, out)
        elif args.command == "wait":
            view = batches.wait(args.job_id, timeout_s=args.timeout,
                                on_progress=lambda v: print(v.progress_line(), file=out, flush=True))
            return _report_failures(batches, view, err)
        elif args.command == "fetch":
            results = batches.results(args.job_id)
            lines = []
            for cid, r in results.items():
                cost = r.cost
                lines.append(json.dumps({
                    "custom_id": cid, "served_by": r.served_by,
                    "response": r.completion.model_dump() if r.completion is not None else r.embedding,
                    "error": r.error, "cost": str(cost.amount) if cost and cost.amount is not None else None,
                    "currency": cost.currency if cost else None}, ensure_ascii=False))
            text = "\n".join(lines) + ("\n" if lines else "")
            if args.output:
                with open(args.output, "w", encoding="utf-8") as f:
                    f.write(text)
                print(f"{len(lines)} results written to {args.output}", file=out)
            else:
                out.write(text)
        elif args.command == "cancel":
            _print_status(batches.cancel(args.job_id), out, events=False)
        elif args.command == "list":
            for view in batches.list():
                print(view.progress_line(), file=out)
    return 0
