"""The JSONL files llmroute reads: prompts (`llmroute bench`, `llmroute calibrate`) and outcomes
(`llmroute router fit/eval`). One reader for all of them: UTF-8, one JSON object per non-blank line,
errors naming the file and the line.

Lines end at `\n` (or `\r\n`) only: `str.splitlines()` also breaks at U+2028, U+2029, U+0085 and
other characters that `json.dumps(..., ensure_ascii=False)` leaves raw inside strings, which would
cut a valid row in two. Every reader of line-based files in llmroute splits with `split_lines`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from llmroute.errors import ConfigError

__all__ = ["read_jsonl", "conversation_of", "split_lines"]


def split_lines(text: str, *, keepends: bool = False) -> list[str]:
    """`text`'s lines, ended by `\n` or `\r\n` only (a final line without an end is kept)."""
    lines = text.split("\n")
    if keepends:
        ended = [line + "\n" for line in lines[:-1]]
        return ended + [lines[-1]] if lines[-1] else ended
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def read_jsonl(path: str | Path, what: str = "prompts file") -> list[tuple[int, Mapping[str, Any]]]:
    """(line number, object) for each non-blank line of a JSONL file of prompts or outcomes.

    Raises ConfigError naming the file and line on a line that is not a JSON object, and on a file
    that cannot be read or is not UTF-8 (`what` names the file's kind in the message)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {what}: {exc.strerror or exc}", path=str(path)) from None
    except UnicodeDecodeError:
        raise ConfigError(f"{what} is not UTF-8 text (JSONL expected)", path=str(path)) from None
    rows: list[tuple[int, Mapping[str, Any]]] = []
    for number, line in enumerate(split_lines(text), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"line {number}: not JSON ({exc.msg})", path=str(path)) from None
        if not isinstance(row, Mapping):
            raise ConfigError(f"line {number}: expected an object with \"prompt\" or \"messages\"", path=str(path))
        rows.append((number, row))
    return rows


def conversation_of(row: Mapping[str, Any], number: int, path: str | Path) -> list[dict[str, Any]]:
    """The conversation of one JSONL row: {"prompt": str} or {"messages": [...]}; ConfigError otherwise."""
    if isinstance(row.get("prompt"), str):
        return [{"role": "user", "content": row["prompt"]}]
    if isinstance(row.get("messages"), list) and all(isinstance(m, Mapping) for m in row["messages"]):
        return [dict(m) for m in row["messages"]]
    raise ConfigError(f"line {number}: needs \"prompt\" (a string) or \"messages\" (a list of objects)", path=str(path))
