"""`llmroute health --config FILE`: every deployment's breaker state, with its reason.

A fresh process has seen no traffic, so by default it first sends one tiny request to every
deployment in the config (primary and backups) and then prints what the breakers make of it:
state, failure and slow-call rates, open_until, the last error, p50/p95 TTFT and latency.
`--no-probe` prints the table without sending anything. `--json` prints it as JSON.
With `[state] backend = "redis"` the table is the fleet's view (breakers other processes opened).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import List, Optional

__all__ = ["main"]

PROBE_MESSAGES = [{"role": "user", "content": "ping"}]


def main(argv: Optional[List[str]] = None) -> int:
    from .client import Client
    from .errors import LLMRouteError
    from .resilience.health import format_health

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
                        print(f"probe {dep.id}: {type(exc).__name__}: {exc}", file=sys.stderr)
        snapshots = client.health()
        if args.json:
            print(json.dumps({dep: snap.as_dict() for dep, snap in snapshots.items()}, indent=2, default=str))
        else:
            print(format_health(snapshots, now=time.monotonic()))
        shared = getattr(snapshots, "shared_state", None)
        if shared is not None and not args.json:
            answer = "answering" if shared["available"] else f"UNAVAILABLE ({shared['last_error']})"
            print(f"shared state: Redis {answer}; breakers as the fleet sees them; outages {shared['outages']}, "
                  f"calls on local state {shared['fallbacks']}")
    unhealthy = [d for d, s in snapshots.items() if s.state != "closed"]
    return 1 if (unhealthy or failed) else 0


if __name__ == "__main__":
    sys.exit(main())
