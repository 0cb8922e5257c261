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
    # characters outside the BMP (two UTF-16 code units) beside and between Chinese ones, accents, ASCII between
    for text in ("请翻译😀这段话，谢谢", "斑马😀😀斑马 zebra 斑马", "𠀀𠀁中文𠀂 café 中a文", "😀", "中", "é中"):
        conversations.append([{"role": "user", "content": text}])
    return conversations


@pytest.fixture(scope="module")
def models() -> list[FittedRouter]:
    labelled = [[{"role": "user", "content": r["prompt"]}] for r in LABELLED]
    tables = [[{"role": "user", "content": r["prompt"]}] for r in TABLE_SAMPLE]
    everything = fit(labelled, [1.0 if r["tier"] == "large" else 0.0 for r in LABELLED],
                     FitOptions(min_count=1, holdout=0.0, l2_grid=()))
    assert everything.words and everything.pairs and everything.chars
    lean = fit(labelled, [1.0 if r["tier"] == "large" else 0.0 for r in LABELLED],
               FitOptions(min_count=1, holdout=0.0, l2_grid=(), features="lean"))
    assert lean.features == "lean" and lean.words and lean.pairs and lean.chars and "window_numbers" in lean.dense
    return [
        everything,  # every n-gram kept: the largest table those prompts give
        # one kind of n-gram only: the fast path skips building the others but still counts them
        FittedRouter(bias=everything.bias, dense=everything.dense, words=everything.words, pairs={}, chars={}),
        FittedRouter(bias=everything.bias, dense=everything.dense, words={}, pairs={}, chars=everything.chars),
        fit(tables, [r["label"] for r in TABLE_SAMPLE], FitOptions(min_count=1, holdout=0.0, l2_grid=())),
        # dense features only, and a model without some of them: the precompiled plan skips absent weights
        FittedRouter(bias=0.1, dense={"heuristic": 0.5, "category=code": 0.7, "user_turns": -0.2, "quantities": 0.3},
                     words={}, pairs={}, chars={}),
        # the lean feature set (no heuristic underneath): every kind, and words and chars only
        lean,
        # the lean set on a shorter window
        fit(labelled, [1.0 if r["tier"] == "large" else 0.0 for r in LABELLED],
            FitOptions(min_count=1, holdout=0.0, l2_grid=(), features="lean", window=120)),
        # a word pair that is not two words: the string path instead of the pair hashes
        FittedRouter(bias=0.0, dense={}, words={}, pairs={**everything.pairs, "a b c": 0.3}, chars={}, features="lean"),
        # pairs with a character outside the BMP: the string path instead of the pair codes
        FittedRouter(bias=0.0, dense={}, words={}, pairs={}, chars={**everything.chars, "😀😀": 0.4, "马😀": -0.2}),
        # every weight equal: the strongest n-grams named are chosen by name on both paths
        FittedRouter(bias=0.0, dense={}, words={w: 0.5 for w in everything.words}, pairs={},
                     chars={**{c: 0.5 for c in everything.chars}, "斑马": 0.5, "中文": 0.5, "翻译": 0.5}),
        FittedRouter(bias=-1.0, dense={}, words={w: -0.5 for w in everything.words}, pairs={},
                     chars={c: -0.5 for c in everything.chars}, features="lean"),
        fit(tables, [r["label"] for r in TABLE_SAMPLE], FitOptions(min_count=1, holdout=0.0, l2_grid=(), features="lean",
                                                                   kinds=("words", "chars"))),
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


def test_both_character_pair_paths_and_ties_are_covered(models):
    assert models[0]._char_codes is not None and models[0].chars  # the pair codes
    assert any(model.chars and model._char_codes is None for model in models)  # the string path
    tied = [model for model in models if model.words and len(set(model.words.values())) == 1]
    # ties among the strongest n-grams do occur: two equal weights named in one reason
    assert tied and any(m.classify(messages).reason.count(" +0.") + m.classify(messages).reason.count(" -0.") == 2
                        and m.classify(messages).reason.count("'") >= 4 for m in tied for messages in _conversations())


def test_word_pairs_as_tuples_find_exactly_the_adjacent_pairs(models):
    assert models[0]._pair_codes is not None
    assert any(model.pairs and model._pair_codes is None for model in models)
    model = FittedRouter(bias=0.0, dense={}, words={}, pairs={"the zebra": 1.0, "zebra the": 2.0, "report in": 4.0},
                         chars={}, features="lean")
    messages = [{"role": "user", "content": "Please summarize the zebra report, in two lines."}]
    result = model.classify(messages)
    assert result == model.classify_reference(messages)
    # "the zebra" (1.0) is there; "zebra the" is not (order matters); "report in" is, punctuation dropped
    assert "'report in' +" in result.reason and "'the zebra' +" in result.reason and "zebra the" not in result.reason
