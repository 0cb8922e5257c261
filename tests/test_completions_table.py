"""`create()`'s signature is written from one table (scripts/completions_params.py) by
scripts/gen_completions.py: the committed llmroute/completions.py is what the table gives, the table
names exactly the parameters the call core checks and keeps, and a changed table is caught."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import llmroute as L
from llmroute._call.validate import LLMROUTE_ARGS, OPENAI_PARAMS
from llmroute.completions import AsyncCompletions, Completions

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import gen_completions  # noqa: E402

TABLE = gen_completions.load_table()


def test_the_committed_file_is_what_the_table_gives() -> None:
    assert (ROOT / "llmroute" / "completions.py").read_text(encoding="utf-8") == gen_completions.render(TABLE)
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_completions.py"), "--check"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_the_table_is_what_the_call_core_reads() -> None:
    assert {name for name, _ in TABLE.OPENAI} == OPENAI_PARAMS
    assert {name for name, _ in TABLE.LLMROUTE} == LLMROUTE_ARGS | {"cache", "cache_ttl_s"}
    assert [name for name, _ in TABLE.REQUIRED] == ["messages", "model"]


@pytest.mark.parametrize("cls", [Completions, AsyncCompletions])
def test_every_row_is_a_keyword_parameter_of_create(cls: Any) -> None:
    params = inspect.signature(cls.create).parameters
    rows = [name for name, _ in TABLE.REQUIRED] + ["stream"] + [name for name, _ in TABLE.OPENAI + TABLE.LLMROUTE]
    assert list(params) == ["self"] + rows
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for name, p in params.items() if name != "self")
    assert params["stream"].default is False
    assert all(params[name].default is None for name, _ in TABLE.OPENAI + TABLE.LLMROUTE)
    assert all(params[name].default is inspect.Parameter.empty for name, _ in TABLE.REQUIRED)


def test_a_changed_table_makes_the_file_stale() -> None:
    added = SimpleNamespace(REQUIRED=TABLE.REQUIRED, OPENAI=TABLE.OPENAI + (("new_param", "int | None"),),
                            LLMROUTE=TABLE.LLMROUTE, DOC=TABLE.DOC)
    text = gen_completions.render(added)  # type: ignore[arg-type]
    assert text != gen_completions.render(TABLE)
    assert text.count("        new_param: int | None = None,") == 8  # every overload and both implementations


def test_a_bad_row_is_refused_naming_it() -> None:
    bad = SimpleNamespace(REQUIRED=TABLE.REQUIRED, OPENAI=TABLE.OPENAI + (("seed", "int | None"),),
                          LLMROUTE=TABLE.LLMROUTE, DOC=TABLE.DOC)
    with pytest.raises(ValueError, match="seed"):
        gen_completions.render(bad)  # type: ignore[arg-type]
    required = SimpleNamespace(REQUIRED=TABLE.REQUIRED, OPENAI=(("top_k", "int"),), LLMROUTE=(), DOC="")
    with pytest.raises(ValueError, match="top_k"):
        gen_completions.render(required)  # type: ignore[arg-type]


def test_an_unknown_keyword_is_still_a_type_error() -> None:
    with L.Client(config={"providers": {}, "tiers": {}}) as client:
        with pytest.raises(TypeError, match="no_such_param"):
            client.chat.completions.create(model="t", messages=[], no_such_param=1)  # type: ignore[call-overload]
