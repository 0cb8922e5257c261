"""The one percentile llmroute uses everywhere: breaker health, hedging delays, cost reports and bench.

Linear interpolation between closest ranks (numpy's default, "type 7"): for sorted values x[0..n-1]
the p-th percentile sits at rank p/100 * (n - 1). A pure function, no dependencies.
"""

from __future__ import annotations

import math
from typing import Iterable

__all__ = ["percentile"]


def percentile(values: Iterable[float], p: float) -> float | None:
    """The p-th percentile (0..100) of `values` (any order) by linear interpolation; None when empty."""
    if not 0 <= p <= 100:
        raise ValueError(f"percentile {p} is outside 0..100")
    ordered = sorted(values)
    if not ordered:
        return None
    rank = p / 100 * (len(ordered) - 1)
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)
