"""Evaluate the tier classifier on RouteLLM's per-prompt outcome tables (MMLU, GSM8K).

Each row says whether a weak (Mixtral-8x7B) and a strong (GPT-4) model answered a prompt right.
A router sends the prompts with the highest scores to the strong model; sweeping the share of
strong calls from 0 to 1 traces quality(share). From that curve:

* PGR(share) = (quality - quality(weak)) / (quality(strong) - quality(weak));
* APGR = the area under PGR over the share in [0, 1] (RouteLLM, arXiv 2406.18665; random ~ 0.5);
* CPT(x%) = the smallest share of strong calls at which PGR reaches x;
* cost saved at 95% quality = 1 - cost(router at the smallest share reaching 95% of strong-only
  quality) / cost(strong-only), a weak call costing 0.1 of a strong one;
* ROC-AUC of the score against "needs strong" (strong right, weak wrong), and the false-cheap
  rate at the configured threshold: the share of needs-strong prompts the router sends to the
  weak model.

The curve is exact: it is evaluated at every distinct score (tied prompts move together, linear in
between), rather than RouteLLM's 10 quantile bins; `--bins 10` reproduces RouteLLM's coarser APGR.
Baselines: random (seeded, averaged), length-only (score = prompt length) and oracle.

These tables are a test set: nothing in the heuristic classifier is fitted to them. `--fitted`
evaluates the fitted router (llmroute/routing/fit.py) honestly: 5-fold cross-validation within each
table (fit on four folds, score the fifth, one pooled curve over the out-of-fold scores) and
cross-domain (fit on all of one table, score the other), beside the heuristic, length-only and
random on the same prompts. The fit picks its penalty and passes on a held-out tenth of its own
training rows; no setting is chosen by looking at a test fold.

    python benchmarks/routing_eval.py [--data DIR] [--threshold 0.55] [--out benchmarks/out]
    python benchmarks/routing_eval.py --fitted [--folds 5] [--seed 0]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import random
import sys
import time
from pathlib import Path
from typing import Sequence

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from llmroute.routing.classifier import classify  # noqa: E402
from llmroute.routing.evaluate import evaluate_scores  # noqa: E402
from llmroute.routing.fit import FitOptions, featurize, fit_featurized  # noqa: E402

WEAK = "mistralai/Mixtral-8x7B-Instruct-v0.1"
STRONG = "gpt-4-1106-preview"
WEAK_COST = 0.1  # a weak (small-tier) call costs this fraction of a strong one
RANDOM_SEEDS = 20

csv.field_size_limit(1 << 24)


def _truthy(value: str) -> bool:
    return value.strip().lower() == "true"


def _contaminated(path: Path) -> set[str]:
    if not path.exists():
        return set()
    with path.open(encoding="utf-8") as f:
        return {json.loads(line)["eval_prompt"] for line in f if line.strip()}


def load_dataset(folder: Path) -> tuple[list[str], list[bool], list[bool], int]:
    """Prompts and weak/strong correctness from every CSV in `folder`, contaminated rows dropped."""
    dropped_set = _contaminated(folder / "contaminated_prompts.jsonl")
    prompts: list[str] = []
    weak: list[bool] = []
    strong: list[bool] = []
    dropped = 0
    for path in sorted(folder.glob("*.csv")):
        with path.open(encoding="utf-8", newline="") as f:
            for row in csv.DictReader(f):
                if row["prompt"] in dropped_set:
                    dropped += 1
                    continue
                prompts.append(row["prompt"])
                weak.append(_truthy(row[WEAK]))
                strong.append(_truthy(row[STRONG]))
    return prompts, weak, strong, dropped


def evaluate_router(name: str, scores: Sequence[float], weak, strong, threshold: float | None, bins: int | None) -> dict:
    result = evaluate_scores(name, scores, weak, strong, threshold=threshold, bins=bins, small_cost=WEAK_COST)
    del result["curve"]
    return result


def _mean(rows: list[dict]) -> dict:
    out = {"router": rows[0]["router"]}
    for key in rows[0]:
        if key != "router":
            out[key] = sum(r[key] for r in rows) / len(rows)
    return out


def run(name: str, folder: Path, threshold: float, bins: int | None) -> dict:
    prompts, weak, strong, dropped = load_dataset(folder)
    started = time.perf_counter()
    results = [classify([{"role": "user", "content": p}]) for p in prompts]
    elapsed = time.perf_counter() - started
    scores = [r.score for r in results]
    needs = [s and not w for w, s in zip(weak, strong)]
    routers: list[dict] = [evaluate_router("classifier", scores, weak, strong, threshold, bins)]
    randoms = []
    for seed in range(RANDOM_SEEDS):
        rng = random.Random(seed)
        randoms.append(evaluate_router("random", [rng.random() for _ in prompts], weak, strong, 0.5, bins))
    routers.append(_mean(randoms))
    routers.append(evaluate_router("length-only", [float(len(p)) for p in prompts], weak, strong, None, bins))
    oracle = [1.0 if need else (0.0 if w and not s else 0.5) for need, w, s in zip(needs, weak, strong)]
    routers.append(evaluate_router("oracle", oracle, weak, strong, 0.75, bins))
    categories: dict[str, int] = {}
    for r in results:
        categories[r.category] = categories.get(r.category, 0) + 1
    return {
        "dataset": name,
        "prompts": len(prompts),
        "dropped_contaminated": dropped,
        "weak_accuracy": sum(weak) / len(weak),
        "strong_accuracy": sum(strong) / len(strong),
        "needs_strong_share": sum(needs) / len(needs),
        "threshold": threshold,
        "classifier_categories": dict(sorted(categories.items(), key=lambda kv: -kv[1])),
        "classifier_seconds": elapsed,
        "routers": routers,
    }


def _gain(weak: Sequence[bool], strong: Sequence[bool]) -> list[float]:
    """The fit's label (llmroute.routing.outcomes.gain_label): (strong - weak + 1) / 2."""
    return [(int(s) - int(w) + 1) / 2 for w, s in zip(weak, strong)]


def cross_validated_scores(features: list, labels: list[float], folds: int, seed: int,
                           options: FitOptions = FitOptions()) -> tuple[list[float], list[dict]]:
    """Out-of-fold scores: each prompt scored by a model fitted on the other folds (seeded fold
    assignment). The fit chooses its own penalty and passes on a held-out tenth of its training
    rows; the test fold is never seen before it is scored."""
    order = list(range(len(features)))
    random.Random(seed).shuffle(order)
    fold_of = {index: position % folds for position, index in enumerate(order)}
    scores = [0.0] * len(features)
    fits = []
    for fold in range(folds):
        train = [i for i in range(len(features)) if fold_of[i] != fold]
        model = fit_featurized([features[i] for i in train], [labels[i] for i in train], options)
        fits.append({k: model.meta[k] for k in ("rows", "ngrams_kept", "l2", "epochs", "holdout_log_loss")})
        for i in range(len(features)):
            if fold_of[i] == fold:
                scores[i] = model.score_features(features[i])
    return scores, fits


def run_fitted(data: Path, threshold: float, bins: int | None, folds: int, seed: int,
               options: FitOptions = FitOptions()) -> dict:
    """5-fold CV within each table and cross-domain both ways, beside random, length-only and the
    heuristic on the same prompts."""
    tables = {}
    for name in ("mmlu", "gsm8k"):
        prompts, weak, strong, dropped = load_dataset(data / name)
        started = time.perf_counter()
        features = featurize([[{"role": "user", "content": p}] for p in prompts], features=options.features,
                              window=options.window)
        tables[name] = (prompts, weak, strong, dropped, features, time.perf_counter() - started)
    reports = []
    for name, (prompts, weak, strong, dropped, features, featurize_s) in tables.items():
        started = time.perf_counter()
        cv_scores, fits = cross_validated_scores(features, _gain(weak, strong), folds, seed, options)
        cv_seconds = time.perf_counter() - started
        routers = [evaluate_router(f"fitted-cv{folds}", cv_scores, weak, strong, threshold, bins)]
        for other, (_o_prompts, o_weak, o_strong, _, o_features, _) in tables.items():
            if other == name:
                continue
            model = fit_featurized(o_features, _gain(o_weak, o_strong), options)
            routers.append(evaluate_router(f"fit-on-{other}", [model.score_features(f) for f in features],
                                           weak, strong, threshold, bins))
        routers.append(evaluate_router("heuristic", [classify([{"role": "user", "content": p}]).score for p in prompts],
                                       weak, strong, threshold, bins))
        routers.append(evaluate_router("length-only", [float(len(p)) for p in prompts], weak, strong, None, bins))
        randoms = []
        for s in range(RANDOM_SEEDS):
            rng = random.Random(s)
            randoms.append(evaluate_router("random", [rng.random() for _ in prompts], weak, strong, 0.5, bins))
        routers.append(_mean(randoms))
        needs = [s and not w for w, s in zip(weak, strong)]
        reports.append({
            "dataset": name, "prompts": len(prompts), "dropped_contaminated": dropped,
            "weak_accuracy": sum(weak) / len(weak), "strong_accuracy": sum(strong) / len(strong),
            "needs_strong_share": sum(needs) / len(needs), "threshold": threshold, "folds": folds, "seed": seed,
            "featurize_seconds": featurize_s, "cv_seconds": cv_seconds, "fits": fits, "routers": routers,
        })
    return {"reports": reports, "weak_cost": WEAK_COST}


BLEND_WEIGHTS = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0)


def _standardize(values: Sequence[float], reference: Sequence[float]) -> list[float]:
    """`values` centred and scaled by the mean and standard deviation of `reference`."""
    mean = sum(reference) / len(reference)
    sd = (sum((v - mean) ** 2 for v in reference) / len(reference)) ** 0.5 or 1.0
    return [(v - mean) / sd for v in values]


def _log_length(prompts: Sequence[str]) -> list[float]:
    return [math.log2(1.0 + len(p)) for p in prompts]


def cross_study(data: Path, threshold: float, bins: int | None, folds: int, seed: int, options: FitOptions) -> dict:
    """Cross-domain remedies, each decided on the training table only: fit on table T, score table U.

    * `fitted`: the model as fitted; `dense-only`: the same fit without n-grams;
    * `blend a=X`: the model's log-odds and the log prompt length, each standardized on T, summed
      with weight X on the length; every X of BLEND_WEIGHTS is reported, and `blend a=cv` is the X
      with the best APGR on T's own out-of-fold scores (`folds`-fold CV inside T);
    * `fallback`: prompts whose share of weighed n-grams is below T's 10th percentile are scored by
      the dense-only model (both standardized on T) instead."""
    tables = {}
    for name in ("mmlu", "gsm8k"):
        prompts, weak, strong, dropped = load_dataset(data / name)
        features = featurize([[{"role": "user", "content": p}] for p in prompts], features=options.features,
                              window=options.window)
        tables[name] = (prompts, weak, strong, features)
    dense_options = FitOptions(min_count=10**9, max_ngrams=0, features=options.features,
                              window=options.window)
    reports = []
    for train, (t_prompts, t_weak, t_strong, t_features) in tables.items():
        for test, (u_prompts, u_weak, u_strong, u_features) in tables.items():
            if test == train:
                continue
            labels = _gain(t_weak, t_strong)
            model = fit_featurized(t_features, labels, options)
            dense = fit_featurized(t_features, labels, dense_options)
            t_logits = [model.logit_features(f) for f in t_features]
            u_logits = [model.logit_features(f) for f in u_features]
            t_len, u_len = _log_length(t_prompts), _log_length(u_prompts)
            z_u = _standardize(u_logits, t_logits)
            zl_u = _standardize(u_len, t_len)
            # α chosen on T: out-of-fold log-odds inside T, standardized, blended, scored on T's outcomes.
            oof = _out_of_fold_logits(t_features, labels, folds, seed, options)
            z_oof, zl_t = _standardize(oof, oof), _standardize(t_len, t_len)
            inner = {}
            for a in BLEND_WEIGHTS:
                inner[a] = evaluate_router("x", [z + a * zl for z, zl in zip(z_oof, zl_t)], t_weak, t_strong, None, None)["apgr"]
            chosen = max(BLEND_WEIGHTS, key=lambda a: (inner[a], -a))
            routers = [evaluate_router("fitted", u_logits, u_weak, u_strong, None, bins)]
            routers.append(evaluate_router("dense-only", [dense.logit_features(f) for f in u_features],
                                           u_weak, u_strong, None, bins))
            for a in BLEND_WEIGHTS[1:]:
                routers.append(evaluate_router(f"blend a={a:g}", [z + a * zl for z, zl in zip(z_u, zl_u)],
                                               u_weak, u_strong, None, bins))
            routers.append(evaluate_router(f"blend a=cv ({chosen:g})", [z + chosen * zl for z, zl in zip(z_u, zl_u)],
                                           u_weak, u_strong, None, bins))
            t_cover = sorted(model.coverage_features(f) for f in t_features)
            floor = t_cover[len(t_cover) // 10]
            zd_u = _standardize([dense.logit_features(f) for f in u_features],
                                [dense.logit_features(f) for f in t_features])
            fell = [model.coverage_features(f) < floor for f in u_features]
            routers.append(evaluate_router(f"fallback ({sum(fell) / len(fell):.0%} of U)",
                                           [zd if low else z for z, zd, low in zip(z_u, zd_u, fell)],
                                           u_weak, u_strong, None, bins))
            routers.append(evaluate_router("heuristic", [classify([{"role": "user", "content": p}]).score
                                                         for p in u_prompts], u_weak, u_strong, None, bins))
            routers.append(evaluate_router("length-only", [float(len(p)) for p in u_prompts], u_weak, u_strong, None, bins))
            randoms = []
            for s in range(RANDOM_SEEDS):
                rng = random.Random(s)
                randoms.append(evaluate_router("random", [rng.random() for _ in u_prompts], u_weak, u_strong, None, bins))
            routers.append(_mean(randoms))
            needs = [s and not w for w, s in zip(u_weak, u_strong)]
            reports.append({
                "dataset": f"{test} (fit on {train})", "prompts": len(u_prompts), "dropped_contaminated": 0,
                "weak_accuracy": sum(u_weak) / len(u_weak), "strong_accuracy": sum(u_strong) / len(u_strong),
                "needs_strong_share": sum(needs) / len(needs), "inner_cv_apgr_by_blend": inner,
                "coverage_floor": floor, "routers": routers,
            })
    return {"reports": reports, "weak_cost": WEAK_COST}


def _out_of_fold_logits(features: list, labels: list[float], folds: int, seed: int, options: FitOptions) -> list[float]:
    """Each row's log-odds under the model fitted on the other folds (as cross_validated_scores)."""
    order = list(range(len(features)))
    random.Random(seed).shuffle(order)
    fold_of = {index: position % folds for position, index in enumerate(order)}
    logits = [0.0] * len(features)
    for fold in range(folds):
        train = [i for i in range(len(features)) if fold_of[i] != fold]
        model = fit_featurized([features[i] for i in train], [labels[i] for i in train], options)
        for i in range(len(features)):
            if fold_of[i] == fold:
                logits[i] = model.logit_features(features[i])
    return logits


def _table(report: dict) -> str:
    head = (
        f"{report['dataset']}: {report['prompts']} prompts ({report['dropped_contaminated']} contaminated dropped), "
        f"weak {report['weak_accuracy']:.3f}, strong {report['strong_accuracy']:.3f}, "
        f"needs strong {report['needs_strong_share']:.3f}"
    )
    cols = f"{'router':14s} {'APGR':>6s} {'APGR10':>6s} {'CPT50':>6s} {'CPT80':>6s} {'share95':>7s} {'saved95':>7s} {'AUC':>6s} {'large@t':>7s} {'fcheap@t':>8s}"
    lines = [head, cols]
    for r in report["routers"]:
        def opt(key: str) -> str:
            return f"{r[key]:.3f}" if key in r else "-"
        lines.append(
            f"{r['router']:14s} {r['apgr']:6.3f} {opt('apgr_binned'):>6s} {r['cpt50']:6.3f} {r['cpt80']:6.3f} "
            f"{r['share_at_95pct_quality']:7.3f} {r['cost_saved_at_95pct_quality']:7.1%} {r['roc_auc_needs_large']:6.3f} "
            f"{opt('share_large_at_threshold'):>7s} {opt('false_cheap_rate_at_threshold'):>8s}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=REPO_ROOT.parent / "shared" / "data" / "routellm")
    parser.add_argument("--threshold", type=float, default=0.55, help="the configured routing.threshold")
    parser.add_argument("--bins", type=int, default=10, help="also report RouteLLM's binned APGR (0: off)")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "benchmarks" / "out")
    parser.add_argument("--fitted", action="store_true",
                        help="instead: the fitted router, 5-fold CV within each table and cross-domain")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0, help="fold assignment seed")
    parser.add_argument("--dense-only", action="store_true",
                        help="with --fitted: no n-grams, only the heuristic's features (what transfers across domains)")
    parser.add_argument("--features", default=FitOptions.features, choices=("heuristic", "lean"),
                        help="with --fitted: the dense feature set (fit.py's FitOptions.features)")
    parser.add_argument("--kinds", default=",".join(FitOptions.kinds), help="with --fitted: the n-gram kinds, comma-separated")
    parser.add_argument("--window", type=int, default=FitOptions.window,
                        help="with --fitted --features lean: the instruction window's ASCII length (fit.py's FitOptions.window)")
    parser.add_argument("--cross-study", action="store_true",
                        help="instead: cross-domain remedies (blend with length, dense-only, fallback), chosen on the training table")
    args = parser.parse_args(argv)
    if not args.data.is_dir():
        print(f"routing_eval: data folder not found: {args.data}", file=sys.stderr)
        return 2
    if args.cross_study or args.fitted:
        options = FitOptions(features=args.features, kinds=tuple(args.kinds.split(",")), window=args.window)
        if args.dense_only:
            options = FitOptions(min_count=10**9, max_ngrams=0, features=args.features, window=args.window)
        print(f"{'cross-domain study, ' if args.cross_study else ''}fit options: features {options.features}, "
              f"kinds {','.join(options.kinds)}, window {options.window}{', dense only' if args.dense_only else ''}")
        study = cross_study if args.cross_study else run_fitted
        result = study(args.data, args.threshold, args.bins or None, args.folds, args.seed, options)
        for report in result["reports"]:
            print(_table(report))
            if args.cross_study:
                print(f"inner CV APGR on the training table by blend weight: {report['inner_cv_apgr_by_blend']}")
            else:
                print(f"fits: {report['fits']}; featurize {report['featurize_seconds']:.1f} s, CV {report['cv_seconds']:.1f} s")
            print()
        args.out.mkdir(parents=True, exist_ok=True)
        suffix = "" if (options.features, options.kinds) == (FitOptions.features, FitOptions.kinds) else (
            f"_{options.features}_{'-'.join(options.kinds)}")
        suffix += f"_window{options.window}" if options.window != FitOptions.window else ""
        suffix += f"_seed{args.seed}" if args.seed else ""
        kind = "cross" if args.cross_study else ("dense" if args.dense_only else "fitted")
        out_file = args.out / f"routing_eval_{kind}{suffix}.json"
        out_file.write_text(json.dumps(result, indent=2))
        print(f"wrote {out_file}")
        return 0
    reports = []
    for name in ("mmlu", "gsm8k"):
        folder = args.data / name
        if not folder.is_dir():
            print(f"routing_eval: {folder} missing, skipped", file=sys.stderr)
            continue
        report = run(name, folder, args.threshold, args.bins or None)
        reports.append(report)
        print(_table(report))
        print("classifier categories:", ", ".join(f"{k} {v}" for k, v in report["classifier_categories"].items()))
        print()
    args.out.mkdir(parents=True, exist_ok=True)
    out_file = args.out / "routing_eval.json"
    out_file.write_text(json.dumps({"reports": reports, "weak_cost": WEAK_COST}, indent=2))
    print(f"wrote {out_file}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
