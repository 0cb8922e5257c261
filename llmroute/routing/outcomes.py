"""Outcome data for fitting and evaluating a router: how well the small and the large tier answered.

An outcomes file is JSONL, one prompt per line, in the prompts format `calibrate` reads
(`"prompt"` or `"messages"`) plus either

* `"small_score"` and `"large_score"`: the quality of each tier's answer, numbers in [0, 1]
  (1/0 for right/wrong, or a grade), or
* `"needs_large"`: a boolean; true reads as small 0, large 1, false as both 1 (the small tier
  suffices).

The label a router is fitted to is the expected gain of the large tier on the 0-1 scale:
`(large - small + 1) / 2` (1: only the large answered well, 0.5: no difference, 0: only the small
did), so a fitted score above 0.5 means the large tier is expected to do better.

`outcomes_from_ledger` reads the feedback attached with `client.feedback(..., messages=...)` from a
SQLite ledger (see docs/ledger.md): a call served by the small tier with a score s counts as small
s, large 1 (the large tier assumed right, an optimistic guess that an outcomes file or shadow
comparisons replace); feedback on other tiers and feedback stored without its messages carry no
comparison and are skipped (counted in the returned `skipped`).
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmroute.errors import ConfigError
from llmroute._runtime.jsonl import conversation_of, read_jsonl

__all__ = ["Outcome", "load_outcomes", "outcomes_from_ledger", "gain_label"]


@dataclass(frozen=True)
class Outcome:
    """One prompt and the quality (0..1) of the small and the large tier's answers to it."""

    messages: Sequence[Mapping[str, Any]]
    small: float
    large: float

    @property
    def needs_large(self) -> bool:
        return self.large > self.small


def gain_label(outcome: Outcome) -> float:
    """The fit's target: (large - small + 1) / 2, in [0, 1]."""
    return (outcome.large - outcome.small + 1.0) / 2.0


def _quality(row: Mapping[str, Any], key: str, number: int, path: str | Path) -> float:
    value = row.get(key)
    if isinstance(value, bool):
        return float(value)
    if not isinstance(value, (int, float)) or not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise ConfigError(f"line {number}: {key!r} must be a number in [0, 1], got {value!r}", path=str(path))
    return float(value)


def load_outcomes(path: str | Path) -> list[Outcome]:
    """Outcomes from a JSONL file (format above). ConfigError naming the file and line on a bad row."""
    outcomes = []
    for number, row in read_jsonl(path, "outcomes file"):
        messages = conversation_of(row, number, path)
        if "small_score" in row or "large_score" in row:
            small = _quality(row, "small_score", number, path)
            large = _quality(row, "large_score", number, path)
        elif isinstance(row.get("needs_large"), bool):
            small, large = (0.0, 1.0) if row["needs_large"] else (1.0, 1.0)
        else:
            raise ConfigError(
                f"line {number}: needs \"small_score\" and \"large_score\" (numbers in [0, 1]) or \"needs_large\" (a boolean)",
                path=str(path),
            )
        outcomes.append(Outcome(messages, small, large))
    if not outcomes:
        raise ConfigError("no outcomes in file", path=str(path))
    return outcomes


def outcomes_from_ledger(path: str | Path, *, small_tier: str = "small") -> tuple[list[Outcome], int]:
    """(outcomes, skipped) from the feedback table of a SQLite ledger (rules in the module doc)."""
    path = Path(path)
    if not path.exists():
        raise ConfigError("ledger file not found", path=str(path))
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if "feedback" not in tables:
                raise ConfigError("ledger has no feedback table (no client.feedback() yet)", path=str(path))
            rows = db.execute(
                "SELECT f.score, f.messages, COALESCE(f.tier, (SELECT l.tier FROM ledger l WHERE l.request_id = f.request_id "
                "AND l.status = 'ok' ORDER BY l.id DESC LIMIT 1)) FROM feedback f ORDER BY f.id"
                if "ledger" in tables else "SELECT score, messages, tier FROM feedback ORDER BY id"
            ).fetchall()
    except sqlite3.Error as exc:
        raise ConfigError(f"cannot read ledger: {exc}", path=str(path)) from None
    outcomes = []
    skipped = 0
    for score, messages, tier in rows:
        if messages is None or tier != small_tier:
            skipped += 1
            continue
        try:
            conversation = json.loads(messages)
        except json.JSONDecodeError:
            skipped += 1
            continue
        outcomes.append(Outcome(conversation, float(score), 1.0))
    return outcomes, skipped
