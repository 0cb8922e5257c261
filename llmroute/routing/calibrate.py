"""`llmroute calibrate`: choose `routing.threshold` so that a given share of traffic goes large.

As RouteLLM does, the threshold is a quantile of the classifier's scores on real prompts: with
`--large-share 0.3`, 30% of those prompts score at or above it. Prompts come from a JSONL file
(`{"prompt": "..."}` or `{"messages": [...]}` per line) or from the SQLite ledger, whose
`router_score` column holds the score of every routed call (no re-classification needed). With a
fitted router (`--model`, or `[routing] model` in `--config`), JSONL prompts are scored by it.

`threshold_for_share` is pure; the file handling lives in `load_prompts`, `load_scores` and
`write_threshold`, which only touch the files named on the command line. `write_threshold` edits
the TOML text in place (stdlib tomllib cannot write) so comments and layout survive. Nothing here
loads or validates the full config: calibration only reads and writes `[routing]`.
"""

from __future__ import annotations

import math
import os
import re
import sqlite3
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

from llmroute._runtime.text_files import not_utf8
from llmroute.errors import ConfigError
from llmroute._runtime.jsonl import conversation_of, read_jsonl, split_lines
from llmroute.routing.classifier import classify

__all__ = ["threshold_for_share", "load_prompts", "load_scores", "write_threshold"]

_SQLITE_MAGIC = b"SQLite format 3\x00"


def threshold_for_share(scores: Sequence[float], large_share: float) -> float:
    """The threshold t such that the share of `scores` with score >= t is as close to `large_share`
    as ties allow, never above it when it can be met exactly.

    t is the k-th highest score with k = round(large_share * n); a share of 1 gives the lowest score
    and a share of 0 a value just above the highest, capped at 1.0 (routing.threshold's range;
    classifier scores are a logistic and stay below 1). Raises ValueError on empty input or a share
    outside [0, 1].
    """
    if not 0.0 <= large_share <= 1.0 or math.isnan(large_share):
        raise ValueError(f"large_share must be in [0, 1], got {large_share}")
    if not scores:
        raise ValueError("no scores to calibrate on")
    ranked = sorted((float(s) for s in scores), reverse=True)
    k = round(large_share * len(ranked))
    if k <= 0:
        return min(1.0, math.nextafter(ranked[0], math.inf))
    if k >= len(ranked):
        return ranked[-1]
    threshold = ranked[k - 1]
    if ranked[k] == threshold:
        # A tie straddles the cut: choose the side closer to the asked share.
        above = sum(1 for s in ranked if s > threshold)
        at_or_above = sum(1 for s in ranked if s >= threshold)
        if abs(above - k) < abs(at_or_above - k):
            return min(1.0, math.nextafter(threshold, math.inf))
    return threshold


def _is_sqlite(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(16) == _SQLITE_MAGIC
    except OSError as exc:
        raise ConfigError(f"cannot read prompts file: {exc.strerror}", path=str(path)) from None


def load_prompts(path: str | Path) -> list[list[dict[str, Any]]]:
    """Conversations from a JSONL file, one per line: {"prompt": str} or {"messages": [...]}.

    Raises ConfigError naming the file and line on a line it cannot use.
    """
    conversations = [conversation_of(row, number, path) for number, row in read_jsonl(path)]
    if not conversations:
        raise ConfigError("no prompts in file", path=str(path))
    return conversations


def load_scores(path: str | Path, scorer: Any = None) -> list[float]:
    """Classifier scores for the prompts in `path`: read from an SQLite ledger's `router_score`
    column (rows where it is NULL, i.e. calls not routed by the classifier, are skipped), or
    computed by classifying each conversation of a JSONL file, with `scorer.classify` (a fitted
    router) when given, else the heuristic."""
    path = Path(path)
    if not _is_sqlite(path):
        score = scorer.classify if scorer is not None else classify
        return [score(messages).score for messages in load_prompts(path)]
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            columns = {row[1] for row in db.execute("PRAGMA table_info(ledger)")}
            if "router_score" not in columns:
                raise ConfigError("SQLite file has no table ledger with a router_score column", path=str(path))
            scores = [float(row[0]) for row in db.execute("SELECT router_score FROM ledger WHERE router_score IS NOT NULL")]
    except sqlite3.Error as exc:
        raise ConfigError(f"cannot read ledger: {exc}", path=str(path)) from None
    if not scores:
        raise ConfigError("ledger has no routed calls with a router_score", path=str(path))
    return scores


_SECTION_RE = re.compile(r"^\s*\[\s*([^\[\]]+?)\s*\]\s*(?:#.*)?$")
_ARRAY_SECTION_RE = re.compile(r"^\s*\[\[")
_THRESHOLD_RE = re.compile(r"^(\s*threshold\s*=\s*)([^#\n]*?)(\s*(?:#.*)?)$")


def write_threshold(config_path: str | Path, value: float) -> None:
    """Set `threshold = value` under `[routing]` in an existing TOML file, editing only that line.

    Adds the key (or the section, at the end) when missing; comments and the rest of the file stay
    byte-for-byte as they were. The result is parsed before it replaces the file (atomically): if it
    is not valid TOML holding the same data plus the new threshold, nothing is written and
    ConfigError says to set it by hand. A missing file is a ConfigError (it is not created), and so
    is a dotted key (`routing.threshold = ...` at top level) or an inline `routing = {...}` table.
    """
    path = Path(config_path)
    if not path.exists():
        raise ConfigError("config file not found (calibrate --write edits an existing config)", path=str(path))
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise not_utf8(exc, str(path)) from None
    except OSError as exc:
        raise ConfigError(f"cannot read config: {exc.strerror}", path=str(path)) from None
    try:
        before = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"invalid TOML, not rewritten: {exc}", path=str(path)) from None
    if re.search(r"(?m)^\s*routing\.threshold\s*=", text):
        raise ConfigError("routing.threshold is set as a dotted key; edit it by hand", path=str(path), key="routing.threshold")
    if not isinstance(before.get("routing", {}), dict):
        raise ConfigError("routing is not a table", path=str(path), key="routing")
    formatted = repr(float(value))
    new_text = _with_threshold(text, formatted)
    try:
        after = tomllib.loads(new_text)
    except tomllib.TOMLDecodeError:
        after = None
    expected = {**before, "routing": {**before.get("routing", {}), "threshold": float(formatted)}}
    if after != expected:
        raise ConfigError(f"cannot rewrite this file safely; set threshold = {formatted} under [routing] by hand",
                          path=str(path), key="routing.threshold")
    tmp = path.with_name(f".{path.name}.calibrate-tmp")
    try:
        tmp.write_text(new_text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ConfigError(f"cannot write config: {exc.strerror or exc}", path=str(path)) from None


def _structure_lines(lines: list[str]) -> list[bool]:
    """For each line, True if it starts a statement (a header, a key or a comment), False if it continues
    a multi-line array, inline table or multi-line string, where a `[...]` line is data, not a header."""
    out = []
    depth = 0
    in_string: str | None = None
    for line in lines:
        out.append(depth == 0 and in_string is None)
        i = 0
        while i < len(line):
            if in_string is not None:
                if line.startswith(in_string, i):
                    i += len(in_string)
                    in_string = None
                    continue
                if in_string in ('"', '"""') and line[i] == "\\":
                    i += 2
                    continue
                i += 1
                continue
            c = line[i]
            if c == "#":
                break
            for quote in ('"""', "'''", '"', "'"):
                if line.startswith(quote, i):
                    in_string = quote
                    i += len(quote)
                    break
            else:
                if depth or "=" in line[:i]:  # brackets of a value, not of a [table] header
                    if c in "[{":
                        depth += 1
                    elif c in "]}":
                        depth = max(0, depth - 1)
                i += 1
        if in_string in ('"', "'"):
            in_string = None  # single-line strings end with the line
    return out


def _with_threshold(text: str, formatted: str) -> str:
    lines = split_lines(text, keepends=True)  # TOML strings may hold U+2028 raw
    starts = _structure_lines(lines)
    in_routing = False
    routing_header = None
    for index, line in enumerate(lines):
        if not starts[index]:
            continue
        section = _SECTION_RE.match(line)
        if section or _ARRAY_SECTION_RE.match(line):
            in_routing = section is not None and section.group(1) == "routing"
            if in_routing:
                routing_header = index
            continue
        if in_routing:
            match = _THRESHOLD_RE.match(line.rstrip("\r\n"))
            if match:
                ending = line[len(line.rstrip("\r\n")):]
                lines[index] = f"{match.group(1)}{formatted}{match.group(3)}{ending}"
                return "".join(lines)
    newline = "\r\n" if "\r\n" in text else "\n"
    if routing_header is None:
        prefix = "" if not text or text.endswith("\n") else newline
        return f"{text}{prefix}{newline}[routing]{newline}threshold = {formatted}{newline}"
    # Right after the header keeps the key in [routing] even if the section ends in comments.
    lines.insert(routing_header + 1, f"threshold = {formatted}{newline}")
    return "".join(lines)
