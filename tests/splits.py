"""Cutting a text or a byte string into consecutive pieces at given offsets, for the property tests
that feed a decoder its input split anywhere."""

from __future__ import annotations

from typing import Iterable, List, TypeVar

T = TypeVar("T", str, bytes)


def split_at(whole: T, cuts: Iterable[int]) -> List[T]:
    """`whole` cut at each offset in `cuts` (in any order, repeats allowed, each at most `len(whole)`):
    the pieces, in order, joining back to `whole` (empty pieces included)."""
    parts: List[T] = []
    last = 0
    for cut in sorted(set(cuts)):
        parts.append(whole[last:cut])
        last = cut
    parts.append(whole[last:])
    return parts
