"""JSON Lines end at `\\n` (or `\\r\\n`) only: the Unicode line separators `json.dumps(...,
ensure_ascii=False)` leaves raw inside strings (U+2028, U+2029, U+0085, and U+000B, U+000C, U+001C-
U+001E, which `str.splitlines()` also breaks at) stay inside their row, in every file llmroute reads
by lines: router outcomes (`router fit`), bench prompts, calibrate prompts, batch input, a TOML
config rewritten by `calibrate --write`."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from llmroute._runtime.jsonl import read_jsonl, split_lines
from llmroute.batch.files import _line_requests
from llmroute.bench.workload import load_prompts as bench_prompts
from llmroute.routing.calibrate import load_prompts as calibrate_prompts, write_threshold
from llmroute.routing.outcomes import load_outcomes

SEPARATORS = ["\u2028", "\u2029", "\u0085", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e"]
PROMPTS = [f"question {i}: first part{sep}second part" for i, sep in enumerate(SEPARATORS)]


def _write(path: Path, rows: list[dict[str, object]], newline: str = "\n") -> Path:
    path.write_bytes("".join(json.dumps(r, ensure_ascii=False) + newline for r in rows).encode("utf-8"))
    return path


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_every_line_reader_keeps_separators_inside_rows(tmp_path: Path, newline: str) -> None:
    prompts = _write(tmp_path / "p.jsonl", [{"prompt": p} for p in PROMPTS], newline)
    assert len(prompts.read_text(encoding="utf-8").splitlines()) > len(PROMPTS)  # what splitlines() made of it
    assert [row["prompt"] for _, row in read_jsonl(prompts)] == PROMPTS
    assert [n for n, _ in read_jsonl(prompts)] == list(range(1, len(PROMPTS) + 1))
    assert [p.messages[0]["content"] for p in bench_prompts(prompts)] == PROMPTS
    assert [c[0]["content"] for c in calibrate_prompts(prompts)] == PROMPTS
    outcomes = _write(tmp_path / "o.jsonl", [{"prompt": p, "needs_large": i % 2 == 0} for i, p in enumerate(PROMPTS)],
                      newline)
    assert [o.messages[0]["content"] for o in load_outcomes(outcomes)] == PROMPTS
    batch = _write(tmp_path / "b.jsonl", [{"custom_id": str(i), "messages": [{"role": "user", "content": p}]}
                                          for i, p in enumerate(PROMPTS)], newline)
    assert [r["messages"][0]["content"] for r in _line_requests(str(batch))] == PROMPTS


def test_split_lines() -> None:
    assert split_lines("a\u2028b\r\nc\n\nd") == ["a\u2028b", "c", "", "d"]
    assert split_lines("a\nb\n") == ["a", "b"]
    assert split_lines("x\u0085y\r\nz", keepends=True) == ["x\u0085y\r\n", "z"]
    assert split_lines("") == split_lines("", keepends=True) == []


def test_calibrate_write_keeps_a_config_whose_strings_hold_separators(tmp_path: Path) -> None:
    config = tmp_path / "llmroute.toml"
    text = 'note = "one\u2028two\u0085three"\n\n[routing]\nthreshold = 0.5\n'
    config.write_text(text, encoding="utf-8")
    write_threshold(config, 0.25)
    data = tomllib.loads(config.read_text(encoding="utf-8"))
    assert data == {"note": "one\u2028two\u0085three", "routing": {"threshold": 0.25}}
