"""`llmroute health --config FILE`: every deployment's health in this process, with its reason.

This process has seen no traffic of the app's (its breakers start closed), so by default it first
sends tiny probe requests to every deployment in the config (primary and backups; an embedding
deployment gets an embeddings request) and then prints, per deployment: a state that tells the
truth about the probes ("failing" when every probe failed, whatever the breaker says; a breaker
needs several failures before it opens), probes ok/sent, the breaker's failure and slow-call rates,
open_until, the last error, p50/p95 TTFT and latency. `--no-probe` prints the breakers without
sending anything (all closed in a fresh process). `--json` prints it as JSON.

Probes are paid calls: they are written to the ledger with metadata `llmroute_probe = "health"`
and no feature, and `llmroute report` leaves them out unless `--include-probes`.
Exit code: 0 when every deployment is closed and answered its probes, else 1.
With `[state] backend = "redis"` the table is the fleet's view (breakers other processes opened), and
that view needs no probes: nothing is sent unless `--probe` asks for it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Dict, List
from llmroute.client import Client
from llmroute.errors import LLMRouteError
from llmroute._runtime.secrets import scrub
from llmroute._runtime.cli_help import with_defaults

__all__ = ["main", "probe_deployments", "PROBE_MESSAGES", "PROBE_METADATA"]

PROBE_MESSAGES = [{"role": "user", "content": "ping"}]
PROBE_METADATA = {"llmroute_probe": "health"}  # accounting.ledger.PROBE_METADATA_KEY


def probe_deployments(client: Client, rounds: int = 1) -> Dict[str, Any]:
    """Send `rounds` probes to every configured deployment; {deployment id: ProbeTally}."""
    from llmroute.resilience.deployment_health import ProbeTally  # loaded when the command runs, not at import

    tallies: Dict[str, ProbeTally] = {}
    tiers = client.config.tiers
    for dep in client.config.all_deployments():
        embedding = dep.tier is not None and tiers[dep.tier].kind == "embedding"
        tally = tallies[dep.id] = ProbeTally()
        for _ in range(max(1, rounds)):
            error: BaseException | None = None
            try:
                if embedding:
                    client.embeddings.create(model=dep.id, input="ping", metadata=PROBE_METADATA)
                else:
                    client.chat.completions.create(model=dep.id, messages=PROBE_MESSAGES, max_tokens=1,
                                                   metadata=PROBE_METADATA)
            except LLMRouteError as exc:
                error = exc
                print(scrub(f"probe {dep.id}: {type(exc).__name__}: {exc}"), file=sys.stderr)
            tally.add(error)
    return tallies


def main(argv: List[str] | None = None) -> int:
    from llmroute.resilience.deployment_health import format_health, health_status  # loaded when the command runs, not at import

    parser = argparse.ArgumentParser(prog="llmroute health", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="llmroute.toml", help="config file (default: llmroute.toml)")
    probing = parser.add_mutually_exclusive_group()
    probing.add_argument("--no-probe", action="store_true", help="do not send a probe request to each deployment")
    probing.add_argument("--probe", action="store_true",
                         help="probe even with [state] backend = \"redis\" (where the default is the fleet's view only)")
    parser.add_argument("--rounds", type=int, default=1, help="probe requests per deployment (default 1)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = with_defaults(parser).parse_args(argv)
    if args.rounds < 1:  # each probe is a paid call: 0 or less used to send one anyway
        parser.error(f"argument --rounds: must be 1 or more, got {args.rounds} (--no-probe sends no probe)")

    with Client.from_config(args.config) as client:
        # With shared state the breakers are the running fleet's: show them as they are, send nothing.
        fleet_view = getattr(client.health(), "shared_state", None) is not None
        probe = args.probe or not (args.no_probe or fleet_view)
        probes = probe_deployments(client, args.rounds) if probe else None
        snapshots = client.health()
    ledger = getattr(snapshots, "ledger", None)
    shared = getattr(snapshots, "shared_state", None)
    status = {dep: health_status(snap, probes.get(dep) if probes else None) for dep, snap in snapshots.items()}
    if args.json:
        out: Dict[str, Any] = {}
        for dep, snap in snapshots.items():
            out[dep] = {**snap.as_dict(), "status": status[dep]}
            if probes is not None and dep in probes:
                out[dep]["probes"] = probes[dep].as_dict()
        # "ledger" and "shared_state" cannot clash with a deployment id: those always hold a ':'.
        out["ledger"] = ledger.as_dict() if ledger is not None else None
        if shared is not None:
            out["shared_state"] = shared
        print(scrub(json.dumps(out, indent=2, default=str)))
    else:
        print(scrub(format_health(snapshots, now=time.monotonic(), probes=probes)))
        print(scrub(snapshots.ledger_line()) if hasattr(snapshots, "ledger_line") else "")
        if shared is not None:
            answer = "answering" if shared["available"] else f"UNAVAILABLE ({shared['last_error']})"
            print(scrub(f"shared state: Redis {answer}; breakers as the fleet sees them; outages "
                        f"{shared['outages']}, calls on local state {shared['fallbacks']}"
                        + ("" if probes is not None else "; nothing probed (--probe sends probes)")))
    failed = any(t.failed for t in probes.values()) if probes else False
    ledger_bad = ledger is not None and (ledger.lost or ledger.last_error)
    return 1 if failed or ledger_bad or any(s != "closed" for s in status.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
