"""The fitted router's fast `classify` against its general path (`classify_reference`, through
`conversation_features` as fit.py scores): bit-identical scores and the same reasons, on the
labelled product prompts and on a sample of the RouteLLM evaluation tables' prompts
(`routellm_sample.jsonl`: 60 MMLU and 40 GSM8K rows drawn with seed 17 by `load_dataset` of
benchmarks/routing_eval.py, label = the large tier's gain; RouteLLM, Apache License 2.0)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmroute.routing.fit import FitOptions, fit
from llmroute.routing.fitted import FittedRouter

HERE = Path(__file__).parent
LABELLED = [json.loads(line) for line in (HERE / "labelled_prompts.jsonl").read_text(encoding="utf-8").splitlines()
            if line.strip()]
TABLE_SAMPLE = [json.loads(line) for line in (HERE / "routellm_sample.jsonl").read_text(encoding="utf-8").splitlines()
                if line.strip()]


def _conversations() -> list[list[dict]]:
    prompts = [row["prompt"] for row in LABELLED] + [row["prompt"] for row in TABLE_SAMPLE]
    conversations = [[{"role": "user", "content": p}] for p in prompts]
    # multi-turn, a system prompt, and parts content: the other fields the dense features read
    conversations.append([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
                          {"role": "assistant", "content": "hello"}, {"role": "user", "content": "写一首诗，100字以内"}])
    conversations.append([{"role": "user", "content": [{"type": "text", "text": "Explain ```x = 1``` in 3 words"}]}])
    return conversations


@pytest.fixture(scope="module")
def models() -> list[FittedRouter]:
    labelled = [[{"role": "user", "content": r["prompt"]}] for r in LABELLED]
    tables = [[{"role": "user", "content": r["prompt"]}] for r in TABLE_SAMPLE]
    everything = fit(labelled, [1.0 if r["tier"] == "large" else 0.0 for r in LABELLED],
                     FitOptions(min_count=1, holdout=0.0, l2_grid=()))
    assert everything.words and everything.pairs and everything.chars
    return [
        everything,  # every n-gram kept: the largest table those prompts give
        # one kind of n-gram only: the fast path skips building the others but still counts them
        FittedRouter(bias=everything.bias, dense=everything.dense, words=everything.words, pairs={}, chars={}),
        FittedRouter(bias=everything.bias, dense=everything.dense, words={}, pairs={}, chars=everything.chars),
        fit(tables, [r["label"] for r in TABLE_SAMPLE], FitOptions(min_count=1, holdout=0.0, l2_grid=())),
        # dense features only, and a model without some of them: the precompiled plan skips absent weights
        FittedRouter(bias=0.1, dense={"heuristic": 0.5, "category=code": 0.7, "user_turns": -0.2, "quantities": 0.3},
                     words={}, pairs={}, chars={}),
    ]


def test_fast_classify_is_bit_identical_to_the_reference(models):
    conversations = _conversations()
    assert len(conversations) > 150
    for model in models:
        for messages in conversations:
            for max_tokens in (None, 2000):
                fast = model.classify(messages, max_tokens=max_tokens)
                reference = model.classify_reference(messages, max_tokens=max_tokens)
                assert fast == reference, messages  # every field, the score to the last bit
                assert fast.score.hex() == reference.score.hex()


def test_the_sample_covers_both_tables_both_scripts_and_every_label():
    assert {row["table"] for row in TABLE_SAMPLE} == {"mmlu", "gsm8k"}
    assert {row["label"] for row in TABLE_SAMPLE} == {0.0, 0.5, 1.0}
    assert any(not row["prompt"].isascii() for row in LABELLED)
