"""`classify()` split into phases (features -> task type -> effects -> score) gives bit-identical
results: every field of every `Classification`, compared with results recorded before the split
(`classifier_snapshot.json`, written from commit d38ce33 by the function in this file).

Covered: each labelled product prompt alone, with a small and a large `max_tokens`, as the last
turn of a conversation and as an assistant-only message; and every prompt of RouteLLM's MMLU and
GSM8K tables (a SHA-256 over the results, in table order), when the tables are on this machine
(`LLMROUTE_ROUTELLM_DATA`, or `shared/data/routellm` beside or above the checkout).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import pytest

from llmroute.routing.classifier import classify

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SNAPSHOT = json.loads((HERE / "classifier_snapshot.json").read_text(encoding="utf-8"))


def _variants(prompt: str):
    yield [{"role": "user", "content": prompt}], None
    yield [{"role": "user", "content": prompt}], 200
    yield [{"role": "user", "content": prompt}], 5000
    yield [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "hi"},
           {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": prompt}], None
    yield [{"role": "assistant", "content": prompt}], None


def _labelled_results() -> list[list]:
    prompts = [json.loads(line)["prompt"] for line in (HERE / "labelled_prompts.jsonl").read_text(encoding="utf-8").splitlines()
               if line.strip()]
    return [list(classify(messages, max_tokens=max_tokens)) for p in prompts for messages, max_tokens in _variants(p)]


def _data_dir() -> Path | None:
    candidates = [os.environ.get("LLMROUTE_ROUTELLM_DATA")] + [str(p / "shared" / "data" / "routellm") for p in REPO.parents]
    for candidate in candidates:
        if candidate and Path(candidate, "mmlu").is_dir():
            return Path(candidate)
    return None


def _table_digest(folder: Path) -> tuple[int, str]:
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from routing_eval import load_dataset
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    prompts = load_dataset(folder)[0]
    digest = hashlib.sha256()
    for prompt in prompts:
        digest.update(repr(tuple(classify([{"role": "user", "content": prompt}]))).encode())
    return len(prompts), digest.hexdigest()


def test_labelled_prompts_are_bit_identical_to_before_the_split():
    got = _labelled_results()
    assert len(got) == len(SNAPSHOT["labelled"]) > 1000
    for index, (now, before) in enumerate(zip(got, SNAPSHOT["labelled"])):
        assert now == before, index  # every field; floats compared exactly


@pytest.mark.parametrize("table", ["mmlu", "gsm8k"])
def test_evaluation_tables_are_bit_identical_to_before_the_split(table):
    data = _data_dir()
    if data is None:
        pytest.skip("RouteLLM tables not on this machine (set LLMROUTE_ROUTELLM_DATA)")
    count, digest = _table_digest(data / table)
    assert (count, digest) == (SNAPSHOT[table]["prompts"], SNAPSHOT[table]["sha256"])
