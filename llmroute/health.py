"""`llmroute health --config FILE`: every deployment's breaker state, with its reason.

A fresh process has seen no traffic, so by default it first sends one tiny request to every
deployment in the config (primary and backups) and then prints what the breakers make of it:
state, failure and slow-call rates, open_until, the last error, p50/p95 TTFT and latency.
`--no-probe` prints the table without sending anything. `--json` prints it as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, List, Optional

__all__ = ["main", "HealthReport"]

PROBE_MESSAGES = [{"role": "user", "content": "ping"}]


class HealthReport(dict):
    """What `client.health()` returns: `{"provider:model": breaker snapshot}`, plus `.ledger`, the
    ledger sink's `LedgerHealth` (records written, waiting in the spool, lost), or None without one."""

    def __init__(self, snapshots: Any, *, ledger: Any = None) -> None:
        super().__init__(snapshots)
        self.ledger = ledger

    def ledger_line(self) -> str:
        led = self.ledger
        if led is None:
            return "ledger: none"
        line = f"ledger: {led.sink}: {led.written} written, {led.waiting} waiting, {led.lost} lost"
        if led.last_error:
            line += f" (failing: {led.last_error})"
        return line


def main(argv: Optional[List[str]] = None) -> int:
    from .client import Client
    from .errors import LLMRouteError
    from .resilience.health import format_health
    from .secrets import scrub

    parser = argparse.ArgumentParser(prog="llmroute health", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="llmroute.toml", help="config file (default: llmroute.toml)")
    parser.add_argument("--no-probe", action="store_true", help="do not send a probe request to each deployment")
    parser.add_argument("--rounds", type=int, default=1, help="probe requests per deployment (default 1)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)

    with Client.from_config(args.config) as client:
        failed = 0
        if not args.no_probe:
            for dep in client.config.all_deployments():
                for _ in range(max(1, args.rounds)):
                    try:
                        client.chat.completions.create(model=dep.id, messages=PROBE_MESSAGES, max_tokens=1,
                                                       feature="llmroute-health")
                    except LLMRouteError as exc:
                        failed += 1
                        print(scrub(f"probe {dep.id}: {type(exc).__name__}: {exc}"), file=sys.stderr)
        snapshots = client.health()
        out = {dep: snap.as_dict() for dep, snap in snapshots.items()}
        ledger = getattr(snapshots, "ledger", None)
        if args.json:
            # "ledger" cannot clash with a deployment id: those always hold a ':'.
            out["ledger"] = ledger.as_dict() if ledger is not None else None
            print(scrub(json.dumps(out, indent=2, default=str)))
        else:
            print(scrub(format_health(snapshots, now=time.monotonic())))
            print(scrub(snapshots.ledger_line()) if hasattr(snapshots, "ledger_line") else "")
    unhealthy = [d for d, s in snapshots.items() if s.state != "closed"]
    ledger_bad = ledger is not None and (ledger.lost or ledger.last_error)
    return 1 if (unhealthy or failed or ledger_bad) else 0


if __name__ == "__main__":
    sys.exit(main())
