""""Did you mean ...?" for a misspelt name: the nearest known names, by difflib's similarity.

Plain functions over strings, for error messages (config keys, sections, CLI choices). No I/O.
"""

from __future__ import annotations

from typing import Iterable, List

__all__ = ["nearest", "did_you_mean"]


def nearest(name: str, known: Iterable[str], *, n: int = 1) -> List[str]:
    """The `n` known names closest to `name` (case-insensitive), if any is close enough."""
    import difflib  # loaded by the first misspelling reported, never by a config that has none

    known = [str(k) for k in known]
    by_lower = {k.lower(): k for k in known}
    found = difflib.get_close_matches(str(name).lower(), list(by_lower), n=n, cutoff=0.6)
    return [by_lower[f] for f in found]


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """' (did you mean `max_retries`?)', or '' when nothing known is close."""
    found = nearest(name, known)
    return f" (did you mean `{found[0]}`?)" if found else ""
