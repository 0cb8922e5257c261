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

These tables are a test set: nothing in the classifier is fitted to them.

    python benchmarks/routing_eval.py [--data DIR] [--threshold 0.55] [--out benchmarks/out]
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from llmroute.routing.classifier import classify  # noqa: E402

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


def quality_curve(scores: Sequence[float], weak: Sequence[bool], strong: Sequence[bool]) -> list[tuple[float, float]]:
    """(share of strong calls, quality) at every distinct threshold, from 0 to 1."""
    n = len(scores)
    order = sorted(range(n), key=lambda i: -scores[i])
    correct = sum(weak)
    points = [(0.0, correct / n)]
    i = 0
    while i < n:
        j = i
        # prompts with the same score go to the strong model together
        while j < n and scores[order[j]] == scores[order[i]]:
            k = order[j]
            correct += int(strong[k]) - int(weak[k])
            j += 1
        points.append((j / n, correct / n))
        i = j
    return points


def binned_curve(scores: Sequence[float], weak: Sequence[bool], strong: Sequence[bool], bins: int) -> list[tuple[float, float]]:
    """RouteLLM's evaluation: thresholds at the score quantiles (`pd.qcut` bin edges)."""
    ranked = sorted(scores)
    n = len(ranked)
    edges = []
    for b in range(bins + 1):
        pos = (n - 1) * b / bins
        lo = int(pos)
        hi = min(lo + 1, n - 1)
        edges.append(ranked[lo] + (ranked[hi] - ranked[lo]) * (pos - lo))
    points = []
    for b, edge in enumerate(edges):
        chosen = [(s > edge) if b == len(edges) - 1 else (s >= edge) for s in scores]
        share = sum(chosen) / n
        quality = sum(strong[i] if chosen[i] else weak[i] for i in range(n)) / n
        points.append((share, quality))
    return sorted(points)


def _area(points: Sequence[tuple[float, float]]) -> float:
    return sum((x1 - x0) * (y0 + y1) / 2 for (x0, y0), (x1, y1) in zip(points, points[1:]))


def _share_reaching(points: Sequence[tuple[float, float]], target: float) -> float:
    """Smallest share at which quality reaches `target`, interpolating linearly between points."""
    if points[0][1] >= target:
        return 0.0
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if y1 >= target:
            return x0 if y1 == y0 else x0 + (x1 - x0) * (target - y0) / (y1 - y0)
    return 1.0


def roc_auc(scores: Sequence[float], positive: Sequence[bool]) -> float:
    """Probability that a random positive outscores a random negative (ties count half)."""
    pairs = sorted(zip(scores, positive))
    rank_sum = 0.0
    i = 0
    n = len(pairs)
    while i < n:
        j = i
        while j < n and pairs[j][0] == pairs[i][0]:
            j += 1
        mid_rank = (i + 1 + j) / 2  # average 1-based rank of the tie group
        rank_sum += mid_rank * sum(1 for k in range(i, j) if pairs[k][1])
        i = j
    pos = sum(positive)
    neg = n - pos
    if pos == 0 or neg == 0:
        return float("nan")
    return (rank_sum - pos * (pos + 1) / 2) / (pos * neg)


def metrics(points, weak_q: float, strong_q: float) -> dict[str, float]:
    gap = strong_q - weak_q
    pgr_points = [(x, (y - weak_q) / gap) for x, y in points]
    share_95 = _share_reaching(points, 0.95 * strong_q)
    return {
        "apgr": _area(pgr_points),
        "cpt50": _share_reaching(points, weak_q + 0.5 * gap),
        "cpt80": _share_reaching(points, weak_q + 0.8 * gap),
        "share_at_95pct_quality": share_95,
        "cost_saved_at_95pct_quality": 1.0 - (share_95 + (1.0 - share_95) * WEAK_COST),
    }


def evaluate_router(name: str, scores: Sequence[float], weak, strong, threshold: float | None, bins: int | None) -> dict:
    n = len(scores)
    weak_q = sum(weak) / n
    strong_q = sum(strong) / n
    result = {"router": name, **metrics(quality_curve(scores, weak, strong), weak_q, strong_q)}
    if bins:
        result["apgr_binned"] = metrics(binned_curve(scores, weak, strong, bins), weak_q, strong_q)["apgr"]
    needs = [s and not w for w, s in zip(weak, strong)]
    result["roc_auc_needs_strong"] = roc_auc(scores, needs)
    if threshold is not None:
        to_large = [s >= threshold for s in scores]
        result["share_large_at_threshold"] = sum(to_large) / n
        result["false_cheap_rate_at_threshold"] = sum(1 for i in range(n) if needs[i] and not to_large[i]) / max(1, sum(needs))
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


def _table(report: dict) -> str:
    head = (
        f"{report['dataset']}: {report['prompts']} prompts ({report['dropped_contaminated']} contaminated dropped), "
        f"weak {report['weak_accuracy']:.3f}, strong {report['strong_accuracy']:.3f}, "
        f"needs strong {report['needs_strong_share']:.3f}"
    )
    cols = f"{'router':12s} {'APGR':>6s} {'APGR10':>6s} {'CPT50':>6s} {'CPT80':>6s} {'share95':>7s} {'saved95':>7s} {'AUC':>6s} {'large@t':>7s} {'fcheap@t':>8s}"
    lines = [head, cols]
    for r in report["routers"]:
        def opt(key: str) -> str:
            return f"{r[key]:.3f}" if key in r else "-"
        lines.append(
            f"{r['router']:12s} {r['apgr']:6.3f} {opt('apgr_binned'):>6s} {r['cpt50']:6.3f} {r['cpt80']:6.3f} "
            f"{r['share_at_95pct_quality']:7.3f} {r['cost_saved_at_95pct_quality']:7.1%} {r['roc_auc_needs_strong']:6.3f} "
            f"{opt('share_large_at_threshold'):>7s} {opt('false_cheap_rate_at_threshold'):>8s}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=REPO_ROOT.parent / "shared" / "data" / "routellm")
    parser.add_argument("--threshold", type=float, default=0.55, help="the configured routing.threshold")
    parser.add_argument("--bins", type=int, default=10, help="also report RouteLLM's binned APGR (0: off)")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "benchmarks" / "out")
    args = parser.parse_args(argv)
    if not args.data.is_dir():
        print(f"routing_eval: data folder not found: {args.data}", file=sys.stderr)
        return 2
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
