"""Write the sync shells from the async ones (httpcore's `unasync` approach): token replacement, nothing more.

    .venv/bin/python scripts/gen_sync.py          # (re)write every generated sync block
    .venv/bin/python scripts/gen_sync.py --check  # exit 1 if a generated block is stale or was edited by hand

The async code is the source. In each module below, the async code to copy is marked

    # --- async source: KEY ---
    ...
    # --- end async source: KEY ---

and its sync twin, in the same module (so that `Stream`, `Client`, ... keep their import paths), is written between

    # --- generated from KEY by scripts/gen_sync.py; do not edit ---
    ...
    # --- end generated: KEY ---

Each line of the source is copied with the replacements in `SUBS` (whole words only), in order; a line ending in
`# async only` is left out. What is not a token away from its twin (threads vs tasks for a hedge race, work
offloaded to threads) is written by hand beside the blocks, in both colours, as small functions or methods the
generated code calls (llmroute/_runtime/twins.py for the ones several modules use). The output is plain Python,
committed, so that mypy, ruff, IDEs and readers see the real code; nothing is generated at import or install time.
The output depends only on the files' text: running it twice changes nothing.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[1]

# The modules that hold async sources and their generated sync twins.
MODULES = ("llmroute/streams.py", "llmroute/client.py", "llmroute/embeddings.py", "llmroute/models.py",
           "llmroute/batch/shells.py", "llmroute/_http/exchange.py")

# (async, sync), applied in this order to whole words (a name inside a longer name is left alone).
SUBS: Tuple[Tuple[str, str], ...] = (
    # the language
    ("async def", "def"), ("async with", "with"), ("async for", "for"), ("await ", ""),
    ("__aenter__", "__enter__"), ("__aexit__", "__exit__"), ("__aiter__", "__iter__"), ("__anext__", "__next__"),
    ("StopAsyncIteration", "StopIteration"), ("AsyncIterator", "Iterator"), ("is_async=True", "is_async=False"),
    # llmroute's twins: the public classes
    ("AsyncClient", "Client"), ("AsyncStream", "Stream"), ("AsyncEmbeddings", "Embeddings"),
    ("AsyncModels", "Models"), ("AsyncBatches", "Batches"),
    # the private ones, and the Protocols that say what a shell needs of its client
    ("AsyncChatCompletions", "ChatCompletions"), ("_AsyncChat", "_Chat"), ("_async_views", "_sync_views"), ("_AsyncIO", "_SyncIO"),
    ("_AsyncReopen", "_Reopen"), ("_AsyncEmbeddingsClient", "_EmbeddingsClient"),
    ("_AsyncModelsClient", "_ModelsClient"), ("AsyncBatchClient", "SyncBatchClient"),
    ("_aiterator", "_iterator"), ("_iterate", "_chunks"),
    # the transport and the one send path (llmroute/_http/exchange.py)
    ("AsyncTransport", "SyncTransport"), ("aclose", "close"), ("asend", "send"), ("aread", "read"),
    ("achunks", "chunks"), ("afetch", "fetch"), ("network_errors", "sync_network_errors"),
    ("AsyncConnectTimer", "ConnectTimer"), ("AsyncResponse", "SyncResponse"), ("aread_body", "read_body"),
    ("aiter_body", "iter_body"),
    # llmroute/_runtime/twins.py
    ("asleep", "sleep"), ("aclose_shielded", "close_shielded"), ("agather", "gather"), ("Offload", "SyncOffload"),
)
ASYNC_ONLY = "# async only"

_BEGIN = re.compile(r"^[ \t]*# --- async source: (?P<key>[\w.]+) ---$")
_END = re.compile(r"^[ \t]*# --- end async source: (?P<key>[\w.]+) ---$")
_GEN_BEGIN = re.compile(r"^[ \t]*# --- generated from (?P<key>[\w.]+) by scripts/gen_sync.py; do not edit ---$")
_GEN_END = re.compile(r"^[ \t]*# --- end generated: (?P<key>[\w.]+) ---$")


def _word(text: str) -> str:
    """`text` as a regex matching it as a whole word (no word character just before or after)."""
    head = r"(?<!\w)" if re.match(r"\w", text) else ""
    tail = r"(?!\w)" if re.search(r"\w$", text) else ""
    return head + re.escape(text) + tail


_COMPILED = tuple((re.compile(_word(a)), s) for a, s in SUBS)


class GenError(ValueError):
    """A module whose markers do not pair up."""


def unasync_line(line: str) -> str | None:
    """One line of async source as its sync twin; None for a line the sync side leaves out."""
    if line.rstrip().endswith(ASYNC_ONLY):
        return None
    for pattern, repl in _COMPILED:
        line = pattern.sub(repl, line)
    return line


def unasync(lines: Sequence[str]) -> List[str]:
    return [out for out in (unasync_line(line) for line in lines) if out is not None]


def _regions(lines: Sequence[str], begin: re.Pattern[str], end: re.Pattern[str], where: str,
             what: str) -> Dict[str, Tuple[int, int]]:
    """{key: (first line inside, line of the end marker)} for each marked region."""
    found: Dict[str, Tuple[int, int]] = {}
    open_key: str | None = None
    start = 0
    for n, line in enumerate(lines):
        if (m := begin.match(line)) is not None:
            if open_key is not None:
                raise GenError(f"{where}:{n + 1}: {what} {m['key']!r} starts inside {open_key!r}")
            if m["key"] in found:
                raise GenError(f"{where}:{n + 1}: {what} {m['key']!r} is marked twice")
            open_key, start = m["key"], n + 1
        elif (m := end.match(line)) is not None:
            if open_key is None or m["key"] != open_key:
                raise GenError(f"{where}:{n + 1}: end of {what} {m['key']!r} without its start")
            found[open_key] = (start, n)
            open_key = None
    if open_key is not None:
        raise GenError(f"{where}: {what} {open_key!r} has no end marker")
    return found


def render(text: str, where: str) -> str:
    """`text` (a module) with each generated block rewritten from its async source."""
    lines = text.splitlines(keepends=True)
    sources = _regions(lines, _BEGIN, _END, where, "async source")
    targets = _regions(lines, _GEN_BEGIN, _GEN_END, where, "generated block")
    if set(sources) != set(targets):
        missing = sorted(set(sources) ^ set(targets))
        raise GenError(f"{where}: every async source needs one generated block with its key, and the reverse "
                       f"(unpaired: {', '.join(missing)})")
    # rewrite from the bottom so that earlier line numbers stay valid
    for key, (start, end) in sorted(targets.items(), key=lambda item: -item[1][0]):
        src_start, src_end = sources[key]
        indent = lines[src_start - 1][:len(lines[src_start - 1]) - len(lines[src_start - 1].lstrip())]
        if not lines[start - 1].startswith(indent) or lines[start - 1][len(indent)] != "#":
            raise GenError(f"{where}:{start}: the generated block {key!r} must be indented as its async source "
                           f"(the code is copied as is)")
        lines[start:end] = unasync(lines[src_start:src_end])
    return "".join(lines)


def stale(root: Path = ROOT) -> List[Tuple[Path, str, str]]:
    """(path, current text, generated text) for each module whose generated blocks are not what the source gives."""
    out = []
    for name in MODULES:
        path = root / name
        current = path.read_text(encoding="utf-8")
        wanted = render(current, name)
        if wanted != current:
            out.append((path, current, wanted))
    return out


def main(argv: Sequence[str] | None = None, root: Path = ROOT) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if a generated sync block is stale or was edited by hand")
    args = parser.parse_args(argv)
    try:
        changed = stale(root)
    except GenError as exc:
        print(f"gen_sync: {exc}", file=sys.stderr)
        return 2
    for path, current, wanted in changed:
        name = str(path.relative_to(root))
        if args.check:
            diff = difflib.unified_diff(current.splitlines(), wanted.splitlines(), name, "generated", lineterm="", n=1)
            print("\n".join(list(diff)[:40]), file=sys.stderr)
            print(f"gen_sync: {name}: its generated sync code differs from what its async source gives (stale, or "
                  f"edited by hand): edit the async source, then run .venv/bin/python scripts/gen_sync.py",
                  file=sys.stderr)
        else:
            path.write_text(wanted, encoding="utf-8")
            print(f"wrote {name}")
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
