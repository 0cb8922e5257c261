"""`llmroute router fit` and `llmroute router eval`: a team's own router from its outcomes.

    llmroute router fit --outcomes outcomes.jsonl [--ledger llmroute-ledger.db] --out router.json
    llmroute router eval --outcomes held_out.jsonl [--model router.json] [--config llmroute.toml]
                         [--threshold 0.55] [--html curve.html]

`fit` reads outcomes (outcomes.py: a JSONL file, the feedback in a SQLite ledger, or both), fits
the logistic model of fit.py and writes the model file; point `[routing] model` at it. `eval`
scores an outcomes file with the heuristic, the given (or configured) fitted model, length alone
and random, and prints APGR, cost saved at 95 % of large-only quality, the share sent large at the
threshold and ROC-AUC (definitions in evaluate.py), optionally the quality-cost curve as HTML.
Evaluate on outcomes the model was not fitted on: in-sample figures flatter it.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

from llmroute.errors import ConfigError
from llmroute.routing.classifier import classify
from llmroute.routing.evaluate import DEFAULT_SMALL_COST, curve_html, evaluate_scores
from llmroute.routing.fit import FitOptions, fit, fit_options_check
from llmroute.routing.configured import scorer_from_config
from llmroute.routing.fitted import FEATURE_SETS, FittedRouter, load_model
from llmroute.routing.outcomes import Outcome, gain_label, load_outcomes, outcomes_from_ledger
from llmroute._runtime.cli_help import with_defaults

__all__ = ["main"]


def _fit(args: argparse.Namespace) -> int:
    outcomes: list[Outcome] = []
    sources = []
    for path in args.outcomes or []:
        outcomes.extend(load_outcomes(path))
        sources.append(Path(path).name)
    if args.ledger:
        from_ledger, skipped = outcomes_from_ledger(args.ledger, small_tier=args.small_tier)
        outcomes.extend(from_ledger)
        sources.append(Path(args.ledger).name)
        print(f"# ledger feedback: {len(from_ledger)} usable, {skipped} skipped (not the small tier, or no messages)",
              file=sys.stderr)
    if not args.outcomes and not args.ledger:
        print("llmroute router fit: give --outcomes FILE and/or --ledger FILE", file=sys.stderr)
        return 2
    if len(outcomes) < 20:
        raise ConfigError(f"only {len(outcomes)} outcomes; a router needs at least 20 to fit", path=", ".join(sources))
    kinds = tuple(kind.strip() for kind in args.kinds.split(",") if kind.strip())
    try:
        options = FitOptions(max_ngrams=args.max_ngrams, seed=args.seed, features=args.features, kinds=kinds,
                             window=args.window)
        fit_options_check(options)
    except ValueError as exc:
        print(f"llmroute router fit: {exc}", file=sys.stderr)
        return 2
    labels = [gain_label(o) for o in outcomes]
    model = fit([o.messages for o in outcomes], labels, options,
                meta={"sources": sources, "label": "(large - small + 1) / 2"})
    out = Path(args.out)
    out.write_text(json.dumps(model.to_json(), ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8")
    meta = model.meta
    print(f"wrote {out} ({out.stat().st_size / 1024:.0f} KiB): {meta['rows']} outcomes, {model.features} features, "
          f"{meta['ngrams_kept']} n-grams ({','.join(options.kinds)}), "
          f"l2 {meta['l2']}, {meta['epochs']} passes, held-out log loss {meta['holdout_log_loss']}")
    print(f"# set [routing] model = \"{out.name}\", then `llmroute router eval` on outcomes it was not fitted on "
          f"and `llmroute calibrate --config ...` for the threshold", file=sys.stderr)
    return 0


def _eval(args: argparse.Namespace) -> int:
    outcomes = load_outcomes(args.outcomes)
    scorer: FittedRouter | None = None
    threshold = args.threshold
    if args.config:
        scorer, configured = scorer_from_config(args.config)
        threshold = threshold if threshold is not None else configured
    if args.model:
        scorer = load_model(args.model)
    threshold = 0.55 if threshold is None else threshold
    small = [o.small for o in outcomes]
    large = [o.large for o in outcomes]
    rows: list[dict[str, Any]] = []
    conversations = [o.messages for o in outcomes]
    if scorer is not None:
        if Path(args.outcomes).name in scorer.meta.get("sources", ()):
            print(f"# note: {scorer.name} was fitted on a file named {Path(args.outcomes).name}: in-sample figures",
                  file=sys.stderr)
        rows.append(evaluate_scores(scorer.name, [scorer.classify(m).score for m in conversations], small, large,
                                    threshold=threshold, small_cost=args.small_cost))
    heuristic_threshold = threshold if scorer is None else None
    rows.append(evaluate_scores("heuristic", [classify(m).score for m in conversations], small, large,
                                threshold=heuristic_threshold, small_cost=args.small_cost))
    rows.append(evaluate_scores("length-only", [float(sum(len(str(m.get("content", ""))) for m in c)) for c in conversations],
                                small, large, small_cost=args.small_cost))
    rng = random.Random(0)
    rows.append(evaluate_scores("random", [rng.random() for _ in conversations], small, large, small_cost=args.small_cost))
    small_q = sum(small) / len(small)
    large_q = sum(large) / len(large)
    print(f"{len(outcomes)} outcomes: small-only quality {small_q:.3f}, large-only {large_q:.3f}, "
          f"needs large {sum(o.needs_large for o in outcomes) / len(outcomes):.1%}; a small call costs "
          f"{args.small_cost:g} of a large one; threshold {threshold:g}")
    print(f"{'router':28s} {'APGR':>6s} {'saved@95%':>9s} {'share@95%':>9s} {'AUC':>6s} {'large@t':>8s} {'fcheap@t':>8s}")
    for row in rows:
        def opt(key: str) -> str:
            return f"{row[key]:.3f}" if key in row else "-"
        print(f"{str(row['router'])[:28]:28s} {row['apgr']:6.3f} {row['cost_saved_at_95pct_quality']:9.1%} "
              f"{row['share_at_95pct_quality']:9.3f} {row['roc_auc_needs_large']:6.3f} {opt('share_large_at_threshold'):>8s} "
              f"{opt('false_cheap_rate_at_threshold'):>8s}")
    if args.html:
        Path(args.html).write_text(curve_html(f"router eval: {Path(args.outcomes).name}", rows, small_q, large_q),
                                   encoding="utf-8")
        print(f"# wrote {args.html}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="llmroute router", description="Fit and evaluate a router on outcome data.")
    sub = parser.add_subparsers(dest="command", required=True)
    p_fit = sub.add_parser("fit", help="fit a router model file from outcomes")
    p_fit.add_argument("--outcomes", action="append", help="outcomes JSONL (repeatable)")
    p_fit.add_argument("--ledger", help="a SQLite ledger whose feedback to learn from")
    p_fit.add_argument("--small-tier", default="small", help="the tier whose feedback counts (default small)")
    p_fit.add_argument("--out", default="router.json", help="model file to write (default router.json)")
    p_fit.add_argument("--max-ngrams", type=int, default=FitOptions.max_ngrams, help="n-grams kept in the file")
    p_fit.add_argument("--seed", type=int, default=0, help="random seed of the fit (same data and seed: same model)")
    p_fit.add_argument("--features", choices=FEATURE_SETS, default=FitOptions.features,
                       help=f"dense features besides the n-grams (default {FitOptions.features}; docs/routing.md)")
    p_fit.add_argument("--window", type=int, default=FitOptions.window,
                       help=f"with --features lean: the instruction window's length in ASCII characters "
                            f"(default {FitOptions.window})")
    p_fit.add_argument("--kinds", default=",".join(FitOptions.kinds),
                       help=f"n-gram kinds, comma-separated, of words, pairs, chars (default {','.join(FitOptions.kinds)})")
    p_eval = sub.add_parser("eval", help="APGR, cost saved and the curve of routers on an outcomes file")
    p_eval.add_argument("--outcomes", required=True, help="outcomes JSONL to evaluate on")
    p_eval.add_argument("--model", help="a fitted router file (default: the config's [routing] model, if any)")
    p_eval.add_argument("--config", help="read [routing] model and threshold from this config")
    p_eval.add_argument("--threshold", type=float, help="routing threshold (default: the config's, else 0.55)")
    p_eval.add_argument("--small-cost", type=float, default=DEFAULT_SMALL_COST, help="small call cost / large call cost")
    p_eval.add_argument("--html", help="write the quality-cost curve here")
    args = with_defaults(parser).parse_args(argv)
    try:
        return _fit(args) if args.command == "fit" else _eval(args)
    except ConfigError as exc:
        print(f"llmroute router {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
