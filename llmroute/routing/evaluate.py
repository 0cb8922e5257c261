"""Router quality on outcome data: the quality-cost curve, APGR, CPT and cost saved at 95 % quality.

Given, per prompt, a router's score and whether the small (weak) and large (strong) model answered
well, a router sends the prompts with the highest scores to the large model; sweeping the share of
large calls from 0 to 1 traces quality(share). From that curve (RouteLLM, arXiv 2406.18665):

* PGR(share) = (quality - quality(small)) / (quality(large) - quality(small));
* APGR = the area under PGR over the share in [0, 1] (a random router scores about 0.5);
* CPT(x) = the smallest share of large calls at which PGR reaches x;
* cost saved at 95 % quality = 1 - cost(router at the smallest share reaching 95 % of large-only
  quality) / cost(large-only), a small call costing `small_cost` of a large one;
* ROC-AUC of the score against "needs large" (large good, small not), and, at a threshold, the
  share sent large and the false-cheap rate (needs-large prompts sent small).

The curve is exact: evaluated at every distinct score (tied prompts move together, linear in
between); `binned_curve` reproduces RouteLLM's 10 quantile bins. Qualities are floats in [0, 1], so
graded outcomes (a 0-1 score per answer) work as well as right/wrong. Pure functions, no I/O except
`curve_html`, which only builds a string.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "quality_curve",
    "binned_curve",
    "roc_auc",
    "curve_metrics",
    "evaluate_scores",
    "curve_html",
    "DEFAULT_SMALL_COST",
]

DEFAULT_SMALL_COST = 0.1  # a small-tier call costs this fraction of a large one

Curve = list[tuple[float, float]]


def quality_curve(scores: Sequence[float], small: Sequence[float], large: Sequence[float]) -> Curve:
    """(share of large calls, mean quality) at every distinct threshold, from share 0 to 1."""
    n = len(scores)
    order = sorted(range(n), key=lambda i: -scores[i])
    total = float(sum(small))
    points = [(0.0, total / n)]
    i = 0
    while i < n:
        j = i
        # prompts with the same score go to the large model together
        while j < n and scores[order[j]] == scores[order[i]]:
            k = order[j]
            total += float(large[k]) - float(small[k])
            j += 1
        points.append((j / n, total / n))
        i = j
    return points


def binned_curve(scores: Sequence[float], small: Sequence[float], large: Sequence[float], bins: int) -> Curve:
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
        quality = sum(float(large[i]) if chosen[i] else float(small[i]) for i in range(n)) / n
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
    """Probability that a random positive outscores a random negative (ties count half); NaN if
    either class is empty."""
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
    pos = sum(1 for p in positive if p)
    neg = n - pos
    if pos == 0 or neg == 0:
        return float("nan")
    return (rank_sum - pos * (pos + 1) / 2) / (pos * neg)


def curve_metrics(points: Curve, small_q: float, large_q: float, small_cost: float = DEFAULT_SMALL_COST) -> dict[str, float]:
    """APGR, CPT50/80, and the share and cost saved at 95 % of large-only quality, from one curve.

    With no quality gap between the tiers (large_q == small_q) PGR is undefined: APGR, CPT are NaN."""
    gap = large_q - small_q
    share_95 = _share_reaching(points, 0.95 * large_q)
    if gap == 0:
        apgr = cpt50 = cpt80 = math.nan
    else:
        apgr = _area([(x, (y - small_q) / gap) for x, y in points])
        cpt50 = _share_reaching(points, small_q + 0.5 * gap)
        cpt80 = _share_reaching(points, small_q + 0.8 * gap)
    return {
        "apgr": apgr,
        "cpt50": cpt50,
        "cpt80": cpt80,
        "share_at_95pct_quality": share_95,
        "cost_saved_at_95pct_quality": 1.0 - (share_95 + (1.0 - share_95) * small_cost),
    }


def evaluate_scores(
    name: str,
    scores: Sequence[float],
    small: Sequence[float],
    large: Sequence[float],
    *,
    threshold: float | None = None,
    bins: int | None = None,
    small_cost: float = DEFAULT_SMALL_COST,
) -> dict[str, object]:
    """Every metric of one router's scores on one outcome set (a row of a report)."""
    n = len(scores)
    if n == 0 or len(small) != n or len(large) != n:
        raise ValueError("scores, small and large must be non-empty and of the same length")
    small_q = sum(float(v) for v in small) / n
    large_q = sum(float(v) for v in large) / n
    curve = quality_curve(scores, small, large)
    result: dict[str, object] = {"router": name, **curve_metrics(curve, small_q, large_q, small_cost)}
    if bins:
        result["apgr_binned"] = curve_metrics(binned_curve(scores, small, large, bins), small_q, large_q, small_cost)["apgr"]
    needs = [float(lg) > float(sm) for sm, lg in zip(small, large)]
    result["roc_auc_needs_large"] = roc_auc(scores, needs)
    if threshold is not None:
        to_large = [s >= threshold for s in scores]
        result["share_large_at_threshold"] = sum(to_large) / n
        result["false_cheap_rate_at_threshold"] = (
            sum(1 for i in range(n) if needs[i] and not to_large[i]) / max(1, sum(needs))
        )
    result["curve"] = curve
    return result


def curve_html(title: str, rows: Sequence[Mapping[str, Any]], small_q: float, large_q: float) -> str:
    """A self-contained HTML page: the quality-cost curve of each row (inline SVG) and its metrics."""
    width, height, pad = 640, 400, 48
    colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf"]
    lo = min(small_q, large_q, *(y for r in rows for _, y in r["curve"]))
    hi = max(small_q, large_q, *(y for r in rows for _, y in r["curve"]))
    span = (hi - lo) or 1.0

    def xy(x: float, y: float) -> str:
        return f"{pad + x * (width - 2 * pad):.1f},{height - pad - (y - lo) / span * (height - 2 * pad):.1f}"

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">',
             f'<rect x="{pad}" y="{pad}" width="{width - 2 * pad}" height="{height - 2 * pad}" fill="none" stroke="#999"/>',
             f'<polyline points="{xy(0, small_q)} {xy(1, large_q)}" fill="none" stroke="#bbb" stroke-dasharray="4"/>',
             f'<text x="{width / 2}" y="{height - 12}" text-anchor="middle" font-size="12">share of calls sent large</text>',
             f'<text x="12" y="{height / 2}" font-size="12" transform="rotate(-90 12 {height / 2})" text-anchor="middle">quality</text>']
    legend = []
    for index, row in enumerate(rows):
        colour = colours[index % len(colours)]
        curve = row["curve"]
        step = max(1, len(curve) // 400)
        kept = list(curve[::step]) + [curve[-1]]
        parts.append(f'<polyline points="{" ".join(xy(x, y) for x, y in kept)}" fill="none" stroke="{colour}" stroke-width="1.5"/>')
        legend.append(f'<tr><td style="color:{colour}">&#9632; {html.escape(str(row["router"]))}</td>'
                      + "".join(f"<td>{_fmt(row.get(key))}</td>" for key in _COLUMNS) + "</tr>")
    parts.append("</svg>")
    head = "".join(f"<th>{label}</th>" for label in ("router", *_COLUMN_LABELS))
    return (f"<!doctype html><meta charset=utf-8><title>{html.escape(title)}</title>"
            f"<h1>{html.escape(title)}</h1><p>small-only quality {small_q:.3f}, large-only {large_q:.3f}</p>"
            + "".join(parts) + f"<table border=1 cellpadding=4><tr>{head}</tr>{''.join(legend)}</table>")


_COLUMNS = ("apgr", "cost_saved_at_95pct_quality", "share_at_95pct_quality", "roc_auc_needs_large",
            "share_large_at_threshold", "false_cheap_rate_at_threshold")
_COLUMN_LABELS = ("APGR", "cost saved @95%", "share large @95%", "AUC needs-large", "share large @threshold",
                  "false-cheap @threshold")


def _fmt(value: object) -> str:
    return "-" if value is None else f"{value:.3f}" if isinstance(value, float) else html.escape(str(value))
