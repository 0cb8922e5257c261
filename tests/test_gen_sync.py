"""The sync shells are written from the async ones by scripts/gen_sync.py: the committed modules are what their
async sources give, the generator is deterministic and idempotent, and `--check` catches a generated block that
was edited by hand or left stale (on a temporary copy of the tree, never on the repository's files)."""

from __future__ import annotations

import inspect
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import llmroute as L
from llmroute import batch, embeddings, models, streams

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import gen_sync  # noqa: E402

GENERATED = "# --- generated from "


def _copy_tree(tmp_path: Path) -> Path:
    """The generator and the modules it reads, at the same relative paths under `tmp_path`."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "gen_sync.py", tmp_path / "scripts" / "gen_sync.py")
    for name in gen_sync.MODULES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    return tmp_path


def _run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(root / "scripts" / "gen_sync.py"), *args],
                          capture_output=True, text=True, timeout=60)


def _generated_lines(text: str) -> list[int]:
    """Indices of the lines inside generated blocks that hold code."""
    out, inside = [], False
    for n, line in enumerate(text.splitlines()):
        if line.strip().startswith(GENERATED):
            inside = True
        elif line.strip().startswith("# --- end generated:"):
            inside = False
        elif inside and line.strip() and not line.strip().startswith("#"):
            out.append(n)
    return out


def test_the_committed_modules_are_what_their_async_sources_give() -> None:
    for name in gen_sync.MODULES:
        text = (ROOT / name).read_text(encoding="utf-8")
        assert _generated_lines(text), f"{name} has no generated block"
        assert gen_sync.render(text, name) == text, f"{name} is stale: run .venv/bin/python scripts/gen_sync.py"
    done = _run(ROOT, "--check")
    assert done.returncode == 0, done.stderr


def test_generating_is_idempotent() -> None:
    for name in gen_sync.MODULES:
        once = gen_sync.render((ROOT / name).read_text(encoding="utf-8"), name)
        assert gen_sync.render(once, name) == once


@pytest.mark.parametrize("name", gen_sync.MODULES)
def test_check_catches_a_hand_edit_of_the_generated_code(tmp_path: Path, name: str) -> None:
    root = _copy_tree(tmp_path)
    path = root / name
    original = path.read_text(encoding="utf-8")
    lines = original.splitlines(keepends=True)
    victim = _generated_lines(original)[len(_generated_lines(original)) // 2]
    lines[victim] = lines[victim].rstrip("\n") + "  # tweaked by hand\n"
    path.write_text("".join(lines), encoding="utf-8")

    done = _run(root, "--check")
    assert done.returncode == 1
    assert name in done.stderr and "run .venv/bin/python scripts/gen_sync.py" in done.stderr
    assert "tweaked by hand" in done.stderr  # the diff shows the edited line
    assert path.read_text(encoding="utf-8") != original  # --check writes nothing

    assert _run(root).returncode == 0  # regenerating puts the generated code back as it was
    assert path.read_text(encoding="utf-8") == original
    assert _run(root, "--check").returncode == 0


def test_check_catches_an_async_source_changed_without_regenerating(tmp_path: Path) -> None:
    root = _copy_tree(tmp_path)
    path = root / "llmroute" / "streams.py"
    text = path.read_text(encoding="utf-8")
    edited = text.replace("        self._closed = False\n        self._aiterator",
                          "        self._closed = False  # a new comment\n        self._aiterator", 1)
    assert edited != text
    path.write_text(edited, encoding="utf-8")
    done = _run(root, "--check")
    assert done.returncode == 1 and "llmroute/streams.py" in done.stderr
    assert _run(root).returncode == 0
    regenerated = path.read_text(encoding="utf-8")
    assert regenerated.count("self._closed = False  # a new comment") == 2  # the async source and its sync twin
    assert "self._iterator: Iterator[ChatCompletionChunk] | None = None" in regenerated


def test_markers_that_do_not_pair_up_are_a_clear_error(tmp_path: Path) -> None:
    root = _copy_tree(tmp_path)
    path = root / "llmroute" / "models.py"
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace("# --- end generated: AsyncModels ---\n", ""), encoding="utf-8")
    done = _run(root, "--check")
    assert done.returncode == 2
    assert "llmroute/models.py" in done.stderr and "AsyncModels" in done.stderr and "no end marker" in done.stderr


@pytest.mark.parametrize("line, sync", [
    ("        await op.response.aclose()\n", "        op.response.close()\n"),
    ("    async def __aenter__(self) -> \"AsyncStream\":\n", "    def __enter__(self) -> \"Stream\":\n"),
    ("            async for data in self._bytes:\n", "            for data in self._bytes:\n"),
    ("        async with AsyncStream(run, op, reopen) as s:\n", "        with Stream(run, op, reopen) as s:\n"),
    ("        errors = network_errors()\n", "        errors = sync_network_errors()\n"),
    ("        errors = sync_network_errors()\n", "        errors = sync_network_errors()\n"),  # whole words only
    ("            _aclose_later(response, self._loop)\n", "            _aclose_later(response, self._loop)\n"),
    ("        await asleep(step.seconds)\n", "        sleep(step.seconds)\n"),
    ("        await aclose_shielded(r)\n", "        close_shielded(r)\n"),
    ("        return X.achunks(r, ex), await X.aread(r, ex)\n", "        return X.chunks(r, ex), X.read(r, ex)\n"),
    ("        except StopAsyncIteration:\n", "        except StopIteration:\n"),
    ("        return cached.replay(e, p, is_async=True)\n", "        return cached.replay(e, p, is_async=False)\n"),
])
def test_the_replacements(line: str, sync: str) -> None:
    assert gen_sync.unasync_line(line) == sync


def test_a_line_marked_async_only_is_left_out() -> None:
    assert gen_sync.unasync_line("    close = aclose  # async only\n") is None
    assert gen_sync.unasync(["    x = 1\n", "    aresponse = get_final_completion  # async only\n"]) == ["    x = 1\n"]


def test_the_public_names_and_their_homes_are_unchanged() -> None:
    for cls, module in ((L.Client, "llmroute.client"), (L.AsyncClient, "llmroute.client"),
                        (streams.Stream, "llmroute.streams"), (streams.AsyncStream, "llmroute.streams"),
                        (embeddings.Embeddings, "llmroute.embeddings"), (models.Models, "llmroute.models"),
                        (batch.Batches, "llmroute.batch.shells"), (batch.AsyncBatches, "llmroute.batch.shells")):
        assert cls.__module__ == module
    # the sync twins are plain functions, the async ones coroutines (nothing awaited by mistake)
    assert not inspect.iscoroutinefunction(L.Client._create)
    assert inspect.iscoroutinefunction(L.AsyncClient._create)
    assert not inspect.isgeneratorfunction(streams.Stream.close)
    assert inspect.isgeneratorfunction(streams.Stream._chunks)
    assert inspect.isasyncgenfunction(streams.AsyncStream._iterate)
    assert not inspect.iscoroutinefunction(models.Models.list)
    assert not inspect.iscoroutinefunction(batch.Batches.wait)
    assert inspect.iscoroutinefunction(batch.AsyncBatches.wait)


def test_a_generated_block_indented_unlike_its_source_is_refused() -> None:
    text = ("class AsyncA:\n"
            "    # --- async source: A ---\n    async def f(self) -> None:\n        await g()\n"
            "    # --- end async source: A ---\n\n\n"
            "# --- generated from A by scripts/gen_sync.py; do not edit ---\n# --- end generated: A ---\n")
    with pytest.raises(gen_sync.GenError, match="indented as its async source"):
        gen_sync.render(text, "m.py")
    fixed = text.replace("\n# --- generated from A", "\nclass A:\n    # --- generated from A").replace(
        "\n# --- end generated: A", "\n    # --- end generated: A")
    assert "    def f(self) -> None:\n        g()\n" in gen_sync.render(fixed, "m.py")
