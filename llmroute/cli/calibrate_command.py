"""`llmroute calibrate`: the router threshold that sends a chosen share of prompts to the large tier."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from llmroute._runtime.cli_help import with_defaults
from llmroute.errors import ConfigError
from llmroute.cli.paths import check_input, check_output
from llmroute.routing.configured import scorer_from_config
from llmroute.routing.fitted import load_model
from llmroute.routing.calibrate import load_scores, threshold_for_share, write_threshold


def main(argv: list[str] | None = None) -> int:
    """`llmroute calibrate --prompts FILE --large-share 0.3 [--config FILE] [--write]`."""
    parser = argparse.ArgumentParser(
        prog="llmroute calibrate",
        description="Print the routing.threshold that sends a given share of these prompts to the large tier.",
    )
    parser.add_argument("--prompts", required=True, help="JSONL of prompts, or the SQLite ledger")
    parser.add_argument("--large-share", type=float, required=True, help="share of requests for the large tier, 0..1")
    parser.add_argument("--config", default="llmroute.toml", help="config file to write with --write (default llmroute.toml)")
    parser.add_argument("--write", action="store_true", help="also set threshold under [routing] in --config")
    parser.add_argument("--model", help="score with this fitted router file (default: --config's [routing] model)")
    args = with_defaults(parser).parse_args(argv)
    if not 0.0 <= args.large_share <= 1.0:
        print(f"llmroute calibrate: --large-share must be in [0, 1], got {args.large_share}", file=sys.stderr)
        return 2
    try:
        check_input(args.prompts, "--prompts")  # paths first: --write must not fail after the work
        if args.write:
            check_input(args.config, "--config")
            check_output(args.config, "--config")
        scorer = None
        if args.model:
            scorer = load_model(args.model)
        elif Path(args.config).exists():
            scorer = scorer_from_config(args.config)[0]
        scores = load_scores(args.prompts, scorer)
        # Floor to 6 decimals: printing must not push the prompt at the cut out of the large share.
        threshold = math.floor(threshold_for_share(scores, args.large_share) * 1e6) / 1e6
        share = sum(1 for s in scores if s >= threshold) / len(scores)
        print(f"threshold={threshold:.6g}")
        print(f"# {len(scores)} prompts, {share:.1%} at or above it (asked {args.large_share:.1%})", file=sys.stderr)
        if args.write:
            write_threshold(args.config, threshold)
            print(f"# wrote threshold to [routing] in {args.config}", file=sys.stderr)
    except ConfigError as exc:
        print(f"llmroute calibrate: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
