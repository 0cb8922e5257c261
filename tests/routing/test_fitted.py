"""The fitted router: fitting, the model file, `[routing] model`, outcomes files, `router fit/eval`,
calibrate with a model, and `client.feedback` feeding `router fit --ledger` (over loopback)."""

from __future__ import annotations

import functools
import json
import math
import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmroute import Client
from llmroute.config import load_config
from llmroute.errors import ConfigError, InvalidRequestError
from llmroute.cli.calibrate_command import main as calibrate_main
from llmroute.routing.evaluate import evaluate_scores, quality_curve, roc_auc
from llmroute.routing.fit import FitOptions, featurize, fit, fit_featurized
from llmroute.routing.fitted import MODEL_VERSION, FittedRouter, load_model
from llmroute.routing.outcomes import gain_label, load_outcomes, outcomes_from_ledger
from llmroute.cli.router_command import main as router_main
from llmroute.routing.rules import RouteQuery, RoutingConfig, decide
from tests.routing.test_client_routing import LARGE_DEP, SMALL_DEP, _config, _served_by

# A team whose small model fails on anything about zebras (in English or Chinese), whatever its length.
_TOPICS = ["the weather", "my invoice", "a refund", "the meeting", "our roadmap", "a typo", "the login page",
           "shipping times", "the new logo", "a password reset"]
_HARD_WORDS = ["zebra", "斑马"]
_EASY_WORDS = ["horse", "马匹"]  # same place, same length: only the word tells the classes apart


def _rows() -> list[tuple[str, float]]:
    rows = []
    for i, topic in enumerate(_TOPICS * 4):
        rows.append((f"Tell me about {topic} and the {_EASY_WORDS[i % 2]}, please ({i}).", 0.0))
        rows.append((f"Tell me about {topic} and the {_HARD_WORDS[i % 2]}, please ({i}).", 1.0))
    return rows


@pytest.fixture(scope="module")
def model() -> FittedRouter:
    rows = _rows()
    return fit([[{"role": "user", "content": p}] for p, _ in rows], [y for _, y in rows],
               FitOptions(min_count=2, holdout=0.0, l2_grid=(), l2=1e-3, max_epochs=30))


def _score(model: FittedRouter, text: str) -> float:
    return model.classify([{"role": "user", "content": text}]).score


def test_fit_learns_the_teams_own_signal_in_both_scripts(model):
    assert _score(model, "hi, what about the zebra?") > 0.7
    assert _score(model, "请介绍一下斑马") > 0.6
    assert _score(model, "hi, what about the invoice?") < 0.4
    reason = model.classify([{"role": "user", "content": "and the zebra?"}]).reason
    assert _score(model, "and the horse?") < 0.3
    assert "'zebra'" in reason and reason.startswith("fitted")


def test_fit_is_deterministic_and_respects_max_ngrams():
    rows = _rows()
    conversations = [[{"role": "user", "content": p}] for p, _ in rows]
    labels = [y for _, y in rows]
    a = fit(conversations, labels, FitOptions(max_ngrams=5))
    b = fit(conversations, labels, FitOptions(max_ngrams=5))
    assert a.to_json() == b.to_json()
    assert len(a.ngrams) <= 5
    with pytest.raises(ValueError):
        fit(conversations, [2.0] * len(conversations))
    with pytest.raises(ValueError):
        fit(conversations[:1], labels[:1])


def test_score_features_equals_classify(model):
    texts = ["hi zebra", "请介绍一下斑马的习性", "Summarize the meeting notes.\n```py\nx = 1\n```"]
    feats = featurize([[{"role": "user", "content": t}] for t in texts], features=model.features)
    for text, f in zip(texts, feats):
        assert model.score_features(f) == pytest.approx(_score(model, text), abs=1e-12)


def test_model_file_round_trip_and_errors(model, tmp_path):
    path = tmp_path / "router.json"
    path.write_text(json.dumps(model.to_json()), encoding="utf-8")
    loaded = load_model(path)
    for text in ("hi zebra", "hello", "斑马"):
        assert _score(loaded, text) == _score(model, text)
    data = model.to_json()
    for broken, words in (({**data, "version": MODEL_VERSION + 1}, "version"),
                          ({**data, "format": "other"}, "not a router model"),
                          ({**data, "bias": "x"}, "bias"),
                          ({**data, "dense": {"heuristic": float("nan")}}, "finite")):
        path.write_text(json.dumps(broken), encoding="utf-8")
        with pytest.raises(ConfigError) as info:
            load_model(path)
        assert words in str(info.value) and str(path) in str(info.value)
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(ConfigError, match="not JSON"):
        load_model(path)
    with pytest.raises(ConfigError, match="cannot read"):
        load_model(tmp_path / "missing.json")


def test_feature_sets_round_trip_and_older_files(tmp_path):
    rows = _rows()
    conversations = [[{"role": "user", "content": p}] for p, _ in rows]
    labels = [y for _, y in rows]
    options = {"min_count": 2, "holdout": 0.0, "l2_grid": (), "l2": 1e-3, "max_epochs": 30}
    lean = fit(conversations, labels, FitOptions(**options, features="lean", kinds=("words", "chars")))
    heuristic = fit(conversations, labels, FitOptions(**options, features="heuristic"))
    assert lean.features == "lean" and not lean.pairs and "heuristic" not in lean.dense
    assert heuristic.features == "heuristic" and "heuristic" in heuristic.dense
    for model in (lean, heuristic):  # both learn the team's signal, in both scripts
        assert _score(model, "hi, what about the zebra?") > 0.7 > 0.3 > _score(model, "and the horse?")
        assert _score(model, "请介绍一下斑马") > _score(model, "请介绍一下马匹")
    # the lean set does not run the heuristic: its task type is "fitted", its sizes are the heuristic's
    result = lean.classify([{"role": "user", "content": "hi zebra?"}], max_tokens=300)
    reference = heuristic.classify([{"role": "user", "content": "hi zebra?"}], max_tokens=300)
    assert result.category == "fitted" and reference.category != "fitted"
    assert (result.input_tokens, result.requested_output_tokens, result.questions, result.user_turns) == (
        reference.input_tokens, 300, 1, 1)
    path = tmp_path / "router.json"
    path.write_text(json.dumps(lean.to_json()), encoding="utf-8")
    loaded = load_model(path)
    assert loaded.features == "lean" and loaded.classify(conversations[1])[:1] + loaded.classify(conversations[1])[2:] == (
        lean.classify(conversations[1])[:1] + lean.classify(conversations[1])[2:])  # all but the reason, which names the file
    # a version 1 file (before the feature sets) reads as the heuristic set, whatever else it says
    old = {**heuristic.to_json(), "version": 1}
    del old["features"]
    path.write_text(json.dumps(old), encoding="utf-8")
    assert load_model(path).classify(conversations[1]).score == heuristic.classify(conversations[1]).score
    path.write_text(json.dumps({**lean.to_json(), "features": "embeddings"}), encoding="utf-8")
    with pytest.raises(ConfigError, match="features"):
        load_model(path)
    with pytest.raises(ValueError, match="kinds"):
        fit(conversations, labels, FitOptions(kinds=("words", "trigrams")))
    # a shorter window reads less of a long prompt: a word past it no longer counts
    short = fit(conversations, labels, FitOptions(**options, features="lean", window=60))
    assert short.window == 60 and load_model(_write(tmp_path, short)).window == 60
    long_prompt = [{"role": "user", "content": "tell me " + "x " * 20 + "about the zebra" + " x" * 100 + " please"}]
    assert "'zebra'" in lean.classify(long_prompt).reason and "zebra" not in short.classify(long_prompt).reason
    for bad in ({"features": "heuristic", "window": 60}, {"features": "lean", "window": 5}):
        with pytest.raises(ValueError, match="window"):
            fit(conversations, labels, FitOptions(**options, **bad))
        path.write_text(json.dumps({**short.to_json(), **bad}), encoding="utf-8")
        with pytest.raises(ConfigError, match="window"):
            load_model(path)
    with pytest.raises(ValueError, match="features"):
        FittedRouter(bias=0.0, dense={}, words={}, pairs={}, chars={}, features="embeddings")


def test_decide_uses_the_model_and_keeps_the_threshold(model, tmp_path):
    path = tmp_path / "router.json"
    path.write_text(json.dumps(model.to_json()), encoding="utf-8")
    config = RoutingConfig(model=str(path), threshold=0.5)
    config.load_model()
    hard = decide(config, RouteQuery(messages=[{"role": "user", "content": "hi zebra"}]))
    easy = decide(config, RouteQuery(messages=[{"role": "user", "content": "hi"}]))
    assert (hard.tier, easy.tier) == ("large", "small")
    assert "fitted router.json" in hard.reason and ">= 0.50" in hard.reason
    heuristic = decide(RoutingConfig(threshold=0.5), RouteQuery(messages=[{"role": "user", "content": "hi zebra"}]))
    assert heuristic.tier == "small"  # the shipped default does not know this team's zebras


def test_config_model_key_loads_relative_to_the_config_file(model, tmp_path, servers):
    (tmp_path / "router.json").write_text(json.dumps(model.to_json()), encoding="utf-8")
    vllm, sglang = servers
    cfg = tmp_path / "llmroute.toml"
    cfg.write_text(f"""
[providers.sm]
kind = "vllm"
base_url = "{vllm.base_url}"
[providers.lg]
kind = "sglang"
base_url = "{sglang.base_url}"
[tiers.small]
deployments = ["{SMALL_DEP}"]
[tiers.large]
deployments = ["{LARGE_DEP}"]
[routing]
default = "auto"
model = "router.json"
threshold = 0.5
[resilience]
max_retries = 0
[pricing."sm:*"]
input_per_million = 0
output_per_million = 0
[pricing."lg:*"]
input_per_million = 0
output_per_million = 0
[ledger]
sink = "memory"
""", encoding="utf-8")
    with Client(config=load_config(cfg)) as client:
        resp = client.chat.completions.create(model="auto", messages=[{"role": "user", "content": "hi, the zebra?"}])
    assert _served_by(vllm, sglang) == "large"
    assert resp.route.tier == "large" and "fitted router.json" in resp.route.reason
    cfg.write_text(cfg.read_text().replace('model = "router.json"', 'model = "nope.json"'), encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(cfg)
    assert info.value.key == "routing.model" and "nope.json" in str(info.value)


def _write(tmp_path, model: FittedRouter):
    path = tmp_path / "written.json"
    path.write_text(json.dumps(model.to_json()), encoding="utf-8")
    return path


def _outcomes_file(tmp_path, rows, name="outcomes.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    return path


def test_outcomes_file_both_shapes_and_errors(tmp_path):
    path = _outcomes_file(tmp_path, [
        {"prompt": "a", "small_score": 0, "large_score": 1},
        {"messages": [{"role": "user", "content": "b"}], "small_score": 0.5, "large_score": 0.25},
        {"prompt": "c", "needs_large": False},
        {"prompt": "d", "needs_large": True},
    ])
    got = load_outcomes(path)
    assert [(o.small, o.large) for o in got] == [(0.0, 1.0), (0.5, 0.25), (1.0, 1.0), (0.0, 1.0)]
    assert [gain_label(o) for o in got] == [1.0, 0.375, 0.5, 1.0]
    for bad, words in (({"prompt": "x"}, "needs \"small_score\""),
                       ({"prompt": "x", "small_score": 2, "large_score": 1}, "'small_score' must be a number in [0, 1]"),
                       ({"small_score": 0, "large_score": 1}, "needs \"prompt\"")):
        with pytest.raises(ConfigError) as info:
            load_outcomes(_outcomes_file(tmp_path, [{"prompt": "ok", "needs_large": True}, bad], "bad.jsonl"))
        assert "line 2" in str(info.value) and words in str(info.value)


def test_evaluate_known_curves():
    small = [0.0, 1.0, 0.0, 1.0]
    large = [1.0, 1.0, 1.0, 0.0]
    perfect = evaluate_scores("oracle", [0.9, 0.5, 0.8, 0.1], small, large, threshold=0.7)
    reversed_ = evaluate_scores("reversed", [0.1, 0.5, 0.2, 0.9], small, large)
    assert perfect["apgr"] > 0.8 > 0.3 > reversed_["apgr"]
    assert perfect["share_large_at_threshold"] == 0.5 and perfect["false_cheap_rate_at_threshold"] == 0.0
    assert quality_curve([1, 1, 0, 0], small, large)[1] == (0.5, 0.75)  # ties move together
    assert roc_auc([0.1, 0.9], [False, True]) == 1.0 and math.isnan(roc_auc([0.5], [True]))


def test_router_fit_and_eval_cli(tmp_path, capsys):
    rows = [{"prompt": p, "small_score": 1.0 - y, "large_score": 1.0} for p, y in _rows()]
    train = _outcomes_file(tmp_path, [r for i, r in enumerate(rows) if i % 8 not in (2, 3)], "train.jsonl")
    test = _outcomes_file(tmp_path, [r for i, r in enumerate(rows) if i % 8 in (2, 3)], "test.jsonl")
    out = tmp_path / "router.json"
    assert router_main(["fit", "--outcomes", str(train), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["format"] == "llmroute.router"
    capsys.readouterr()
    html = tmp_path / "curve.html"
    assert router_main(["eval", "--outcomes", str(test), "--model", str(out), "--html", str(html)]) == 0
    printed = capsys.readouterr().out
    lines = {line.split()[0]: line.split() for line in printed.splitlines()[2:]}
    assert set(lines) == {"fitted", "heuristic", "length-only", "random"}
    assert float(lines["fitted"][2]) > float(lines["heuristic"][1])  # the fitted APGR beats the heuristic's
    assert "<svg" in html.read_text() and "APGR" in html.read_text()
    assert router_main(["fit", "--outcomes", str(_outcomes_file(tmp_path, rows[:5], "few.jsonl"))]) == 1
    assert "at least 20" in capsys.readouterr().err
    for features, kinds in (("heuristic", "words,pairs,chars"), ("lean", "words,chars")):
        assert router_main(["fit", "--outcomes", str(train), "--out", str(out), "--features", features,
                            "--kinds", kinds]) == 0
        written = json.loads(out.read_text())
        assert written["features"] == features and written["meta"]["options"]["kinds"] == kinds.split(",")
        assert f"{features} features" in capsys.readouterr().out
    assert router_main(["fit", "--outcomes", str(train), "--out", str(out), "--kinds", "words,trigrams"]) == 2
    assert "trigrams" in capsys.readouterr().err


def test_calibrate_scores_with_the_configured_model(model, tmp_path, capsys):
    (tmp_path / "router.json").write_text(json.dumps(model.to_json()), encoding="utf-8")
    cfg = tmp_path / "llmroute.toml"
    cfg.write_text('[routing]\nmodel = "router.json"\nthreshold = 0.5\n', encoding="utf-8")
    prompts = _outcomes_file(tmp_path, [{"prompt": "hi zebra"}, {"prompt": "hi"}, {"prompt": "斑马"}, {"prompt": "a refund"}])
    assert calibrate_main(["--prompts", str(prompts), "--large-share", "0.5", "--config", str(cfg), "--write"]) == 0
    threshold = float(capsys.readouterr().out.strip().split("=")[1])
    assert _score(model, "a refund") < threshold <= min(_score(model, "hi zebra"), _score(model, "斑马"))
    assert f"threshold = {threshold!r}" in cfg.read_text()


def test_feedback_goes_to_the_ledger_and_feeds_router_fit(servers, tmp_path, capsys):
    vllm, sglang = servers
    ledger = tmp_path / "ledger.db"
    config = _config(vllm, sglang, ledger={"sink": "sqlite", "path": str(ledger), "flush_interval_s": 0.05})
    with Client(config=config) as client:
        easy = [{"role": "user", "content": "hi"}]
        resp = client.chat.completions.create(model="auto", messages=easy)
        assert resp.route.tier == "small"
        client.feedback(resp, 0.0, label="wrong answer", messages=easy)
        client.feedback(resp.route.request_id, True)  # no messages: kept, but nothing to learn from
        with pytest.raises(InvalidRequestError, match="score"):
            client.feedback(resp, 1.5)
        with pytest.raises(InvalidRequestError, match="request_id_or_response"):
            client.feedback(object(), 1.0)
    with sqlite3.connect(ledger) as db:
        rows = db.execute("SELECT request_id, score, label, tier FROM feedback ORDER BY id").fetchall()
        served = db.execute("SELECT request_id, tier FROM ledger").fetchall()
    assert rows == [(resp.route.request_id, 0.0, "wrong answer", "small"), (resp.route.request_id, 1.0, None, None)]
    assert served == [(resp.route.request_id, "small")]
    outcomes, skipped = outcomes_from_ledger(ledger)
    assert [(o.messages, o.small, o.large) for o in outcomes] == [(easy, 0.0, 1.0)] and skipped == 1
    assert router_main(["fit", "--ledger", str(ledger), "--out", str(tmp_path / "r.json")]) == 1  # too few
    assert "at least 20" in capsys.readouterr().err

    # A team's thumbs on 24 small-tier answers: wrong on the zebra questions, right on the others.
    with Client(config=config) as client:
        for prompt, needs_large in _rows()[:24]:
            messages = [{"role": "user", "content": prompt}]
            resp = client.chat.completions.create(model="auto", messages=messages, max_tokens=16)
            assert resp.route.tier == "small"
            client.feedback(resp, not needs_large, messages=messages)
    out = tmp_path / "r.json"
    assert router_main(["fit", "--ledger", str(ledger), "--out", str(out)]) == 0
    assert "25 usable, 1 skipped" in capsys.readouterr().err
    learned = load_model(out)
    assert _score(learned, "and the zebra, please?") > _score(learned, "and the horse, please?")


def test_feedback_with_jsonl_and_memory_ledgers(servers, tmp_path):
    vllm, sglang = servers
    path = tmp_path / "ledger.jsonl"
    with Client(config=_config(vllm, sglang, ledger={"sink": "jsonl", "path": str(path)})) as client:
        resp = client.chat.completions.create(model="auto", messages=[{"role": "user", "content": "hi"}])
        client.feedback(resp, 1)
    lines = (tmp_path / "ledger.jsonl.feedback.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["request_id"] == resp.route.request_id
    vllm.requests.clear()
    with Client(config=_config(vllm, sglang, ledger={"sink": "none"})) as client:
        resp = client.chat.completions.create(model="auto", messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(ConfigError, match="needs a ledger"):
            client.feedback(resp, 1)


def test_async_client_feedback(servers):
    import asyncio

    from llmroute import AsyncClient
    from llmroute.accounting.ledger import MemorySink

    vllm, sglang = servers
    sink = MemorySink()

    async def go():
        async with AsyncClient(config=_config(vllm, sglang), ledger=sink) as client:
            resp = await client.chat.completions.create(model="auto", messages=[{"role": "user", "content": "hi"}])
            client.feedback(resp, 0.25, comment="too terse")
            return resp

    resp = asyncio.run(go())
    assert [(f.request_id, f.score, f.comment, f.tier) for f in sink.feedback] == [
        (resp.route.request_id, 0.25, "too terse", "small")]


def test_fit_featurized_validates_lengths():
    feats = featurize([[{"role": "user", "content": "a"}], [{"role": "user", "content": "b"}]])
    with pytest.raises(ValueError, match="labels"):
        fit_featurized(feats, [1.0])


@pytest.mark.parametrize("messages", [
    [],
    [{"role": "user", "content": None}],
    [{"role": "user", "content": ""}],
    ["not a message", 42, None],
    [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
    [{"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f", "arguments": "{\"a\": 1}"}}]}],
    [{"role": "user", "content": "斑马" * 5000 + "zebra " * 5000}],
])
def test_odd_and_huge_inputs_score_in_range(model, messages):
    result = model.classify(messages, max_tokens=100)
    assert 0.0 <= result.score <= 1.0 and result.reason.startswith("fitted")


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=600))
def test_any_text_scores_in_range_and_matches_precomputed_features(text):
    model = _property_model()
    messages = [{"role": "user", "content": text}]
    score = model.classify(messages).score
    assert 0.0 <= score <= 1.0
    assert model.score_features(featurize([messages])[0]) == pytest.approx(score, abs=1e-12)



@functools.lru_cache(maxsize=1)
def _property_model() -> FittedRouter:
    """Every n-gram kept (min_count 1), so random text meets the table as often as it can."""
    return fit([[{"role": "user", "content": p}] for p, _ in _rows()], [y for _, y in _rows()],
               FitOptions(min_count=1, holdout=0.0, l2_grid=(), l2=1e-3, max_epochs=5))
