"""`llmroute batch submit|status|wait|fetch|cancel|list`: batch jobs from the command line.

Every subcommand reads the config (`--config`, default llmroute.toml) for the providers and the
`[batch]` job store; `wait` and `status` resume a job another process started.
"""

from __future__ import annotations

import argparse
import json
import sys
from decimal import Decimal
from typing import Any, List, Mapping, Optional
from llmroute.client import Client

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="llmroute batch", description="batch jobs on the platforms' batch APIs")
    parser.add_argument("--config", default="llmroute.toml", help="config file (default: llmroute.toml)")
    sub = parser.add_subparsers(dest="command", required=True)
    submit = sub.add_parser("submit", help="submit a JSONL file of chat requests (each with a custom_id)")
    submit.add_argument("file", help="JSONL: OpenAI batch lines or {custom_id, messages, ...} objects")
    submit.add_argument("--model", required=True, help="a tier, 'auto' or 'provider:model-id'")
    submit.add_argument("--feature")
    submit.add_argument("--metadata", action="append", default=[], metavar="KEY=VALUE")
    submit.add_argument("--on-failure", choices=["resubmit", "next_deployment", "online", "fail"])
    submit.add_argument("--window", help="completion window, e.g. 24h")
    submit.add_argument("--wait", action="store_true", help="wait for the results after submitting")
    for name, text in (("status", "a job's progress, parts and events"), ("wait", "poll until the job finishes"),
                       ("fetch", "write the results as JSONL"), ("cancel", "cancel the job's platform jobs")):
        p = sub.add_parser(name, help=text)
        p.add_argument("job_id")
        if name == "wait":
            p.add_argument("--timeout", type=float, help="give up waiting after this many seconds")
        if name == "fetch":
            p.add_argument("--output", "-o", help="file to write (default: stdout)")
        if name == "status":
            p.add_argument("--json", action="store_true")
    sub.add_parser("list", help="every job in the store")
    return parser


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


def main(argv: Optional[List[str]] = None, out: Any = None) -> int:
    out = out or sys.stdout
    args = _parser().parse_args(argv)

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
        elif args.command == "status":
            view = batches.retrieve(args.job_id)
            if args.json:
                print(json.dumps({**view.__dict__, "finished": view.finished}, default=str, indent=2), file=out)
            else:
                _print_status(view, out)
        elif args.command == "wait":
            view = batches.wait(args.job_id, timeout_s=args.timeout,
                                on_progress=lambda v: print(v.progress_line(), file=out, flush=True))
            return 0 if view.finished else 3
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
