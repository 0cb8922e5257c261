"""Count the lines the sync shells repeat of their async twins (docs/ARCHITECTURE.md, "Sync from async, generated").

    .venv/bin/python scripts/twin_lines.py          # the working tree
    .venv/bin/python scripts/twin_lines.py REV      # a commit (e.g. the one before the generator)

For each sync/async pair below: the sync side's hand-written lines (blank lines, comments and the blocks
scripts/gen_sync.py writes left out), and how many of them repeat the async side once `gen_sync`'s replacements are
applied to it (`difflib.SequenceMatcher`'s matching lines). Reads files only.
"""

from __future__ import annotations

import ast
import difflib
import subprocess
import sys
from pathlib import Path
from typing import List, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import gen_sync  # noqa: E402

PAIRS = {"llmroute/client.py": [("Client", "AsyncClient")],
         "llmroute/streams.py": [("Stream", "AsyncStream"), ("_SyncIO", "_AsyncIO")],
         "llmroute/embeddings.py": [("Embeddings", "AsyncEmbeddings"), ("_EmbeddingsClient", "_AsyncEmbeddingsClient")],
         "llmroute/models.py": [("Models", "AsyncModels"), ("_ModelsClient", "_AsyncModelsClient")],
         "llmroute/batch/shells.py": [("Batches", "AsyncBatches"), ("SyncBatchClient", "AsyncBatchClient")],
         "llmroute/_http/transport.py": [("iter_body", "aiter_body")]}


def _text(rev: str | None, path: str) -> str:
    if rev is None:
        return (ROOT / path).read_text(encoding="utf-8")
    return subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{path}"], capture_output=True, text=True,
                          check=True).stdout


def _lines(src: str, name: str, *, hand_only: bool) -> List[str]:
    """The lines of the top-level class or function `name` (with `hand_only`, not those of generated blocks)."""
    lines = src.splitlines()
    generated, inside = set(), False
    for n, line in enumerate(lines):
        if "# --- generated from " in line:
            inside = True
        elif "# --- end generated: " in line:
            inside = False
        elif inside:
            generated.add(n)
    for node in ast.parse(src).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            end = node.end_lineno or node.lineno
            return [lines[i] for i in range(node.lineno - 1, end) if not (hand_only and i in generated)]
    return []


def _code(lines: Sequence[str]) -> List[str]:
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]


def main(argv: Sequence[str]) -> int:
    rev = argv[0] if argv else None
    total = twice = 0
    for path, pairs in PAIRS.items():
        src = _text(rev, path)
        for sync_name, async_name in pairs:
            sync = _code(_lines(src, sync_name, hand_only=True))
            unasynced = _code(gen_sync.unasync([line + "\n" for line in _lines(src, async_name, hand_only=False)]))
            matcher = difflib.SequenceMatcher(None, sync, unasynced, autojunk=False)
            same = sum(block.size for block in matcher.get_matching_blocks())
            total, twice = total + len(sync), twice + same
            print(f"{path} {sync_name}: {len(sync)} hand-written lines, {same} of them repeat {async_name}")
    print(f"total: {total} hand-written sync lines, {twice} of them repeat their async twin")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
