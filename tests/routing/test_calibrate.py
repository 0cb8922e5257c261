"""Threshold calibration: the quantile, the inputs it reads, the CLI and the TOML rewrite."""

from __future__ import annotations

import json
import sqlite3
import tomllib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmroute.errors import ConfigError
from llmroute.cli.calibrate_command import main
from llmroute.routing.calibrate import load_prompts, load_scores, threshold_for_share, write_threshold
from llmroute.routing.classifier import classify


def test_threshold_for_share_known_inputs():
    scores = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
    assert threshold_for_share(scores, 0.3) == 0.8
    assert threshold_for_share(scores, 0.5) == 0.6
    assert threshold_for_share(scores, 1.0) == 0.1
    below_one = [s * 0.99 for s in scores]
    assert sum(s >= threshold_for_share(below_one, 0.0) for s in below_one) == 0
    assert threshold_for_share(scores, 0.0) == 1.0  # capped at routing.threshold's maximum


def test_ties_pick_the_closer_side():
    scores = [0.2] * 6 + [0.9] * 4
    t = threshold_for_share(scores, 0.5)  # 40% (only the 0.9s) is closer to 50% than 100%
    assert sum(s >= t for s in scores) == 4


def test_bad_inputs():
    with pytest.raises(ValueError):
        threshold_for_share([], 0.3)
    with pytest.raises(ValueError):
        threshold_for_share([0.5], 1.5)


@given(st.lists(st.floats(min_value=0, max_value=1, exclude_max=True), min_size=1, max_size=300),
       st.floats(min_value=0, max_value=1))
def test_share_is_met_as_closely_as_ties_allow(scores, share):
    t = threshold_for_share(scores, share)
    assert 0.0 <= t <= 1.0
    sent = sum(s >= t for s in scores)
    target = round(share * len(scores))
    if len(set(scores)) == len(scores):  # no ties: exact
        assert sent == target
    else:  # no other cut point is closer to the target
        cuts = {sum(s >= c for s in scores) for c in scores} | {0}
        assert abs(sent - target) == min(abs(c - target) for c in cuts)


def _jsonl(tmp_path, rows, name="prompts.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    return path


def test_load_prompts_both_shapes(tmp_path):
    path = _jsonl(tmp_path, [{"prompt": "hi"}, {"messages": [{"role": "user", "content": "你好"}]}, ""])
    assert load_prompts(path) == [[{"role": "user", "content": "hi"}], [{"role": "user", "content": "你好"}]]


@pytest.mark.parametrize("bad, fragment", [("{not json", "line 2: not JSON"), ("[1, 2]", "line 2: expected an object"),
                                           ('{"text": "x"}', "line 2: needs")])
def test_load_prompts_errors_name_file_and_line(tmp_path, bad, fragment):
    path = _jsonl(tmp_path, [{"prompt": "ok"}, bad])
    with pytest.raises(ConfigError) as info:
        load_prompts(path)
    assert fragment in str(info.value) and str(path) in str(info.value)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError):
        load_scores(tmp_path / "nope.jsonl")


def _ledger(tmp_path, scores):
    path = tmp_path / "ledger.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE ledger (id INTEGER PRIMARY KEY, tier TEXT, router_score REAL)")
        db.executemany("INSERT INTO ledger (tier, router_score) VALUES (?, ?)", [("small", s) for s in scores])
    return path


def test_scores_read_from_the_ledger(tmp_path):
    path = _ledger(tmp_path, [0.1, 0.9, None, 0.5])
    assert sorted(load_scores(path)) == [0.1, 0.5, 0.9]


def test_ledger_without_the_column(tmp_path):
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE ledger (id INTEGER)")
    with pytest.raises(ConfigError, match="router_score"):
        load_scores(path)


def test_cli_prints_threshold(tmp_path, capsys):
    prompts = ["hi", "Translate: good morning", "Prove that sqrt(2) is irrational",
               "Write a Python function that merges intervals", "谢谢", "设计一个高并发的秒杀系统"]
    path = _jsonl(tmp_path, [{"prompt": p} for p in prompts])
    assert main(["--prompts", str(path), "--large-share", "0.5"]) == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith("threshold=")
    value = float(out.split("=", 1)[1])
    assert sum(classify([{"role": "user", "content": p}]).score >= value for p in prompts) == 3


def test_cli_reads_the_ledger(tmp_path, capsys):
    path = _ledger(tmp_path, [i / 10 for i in range(10)])
    assert main(["--prompts", str(path), "--large-share", "0.2"]) == 0
    assert capsys.readouterr().out.strip() == "threshold=0.8"


def test_cli_errors_are_messages_not_tracebacks(tmp_path, capsys):
    path = _jsonl(tmp_path, ["{broken"])
    assert main(["--prompts", str(path), "--large-share", "0.3"]) == 2
    assert "line 1" in capsys.readouterr().err
    assert main(["--prompts", str(path), "--large-share", "3"]) == 2


CONFIG = """# llmroute config
[tiers.small]   # the 7B tier
deployments = ["together:llama-8b"]

[routing]
default = "auto"            # what model="auto" means
threshold = 0.55            # score at or above which a request goes large

[[routing.rules]]
when = { feature = "report-generation" }
tier = "large"
"""


def test_write_keeps_comments_and_only_changes_the_value(tmp_path, capsys):
    config = tmp_path / "llmroute.toml"
    config.write_text(CONFIG, encoding="utf-8")
    prompts = _jsonl(tmp_path, [{"prompt": "hi"}, {"prompt": "Prove that there are infinitely many primes"}])
    assert main(["--prompts", str(prompts), "--large-share", "0.5", "--config", str(config), "--write"]) == 0
    value = float(capsys.readouterr().out.strip().split("=")[1])
    text = config.read_text(encoding="utf-8")
    assert tomllib.loads(text)["routing"]["threshold"] == pytest.approx(value)
    assert f"threshold = {value!r}            # score at or above which a request goes large\n" in text
    assert text.replace(f"threshold = {value!r}", "threshold = 0.55") == CONFIG


def test_write_adds_key_or_section(tmp_path):
    no_key = tmp_path / "a.toml"
    no_key.write_text('[routing]\ndefault = "auto"\n\n[tiers.large]\nx = 1\n', encoding="utf-8")
    write_threshold(no_key, 0.42)
    parsed = tomllib.loads(no_key.read_text(encoding="utf-8"))
    assert parsed["routing"] == {"default": "auto", "threshold": 0.42} and parsed["tiers"]["large"] == {"x": 1}
    no_section = tmp_path / "b.toml"
    no_section.write_text("# only a comment\n[tiers.small]\nx = 1", encoding="utf-8")
    write_threshold(no_section, 0.3)
    text = no_section.read_text(encoding="utf-8")
    assert text.startswith("# only a comment\n") and tomllib.loads(text)["routing"]["threshold"] == 0.3
    missing = tmp_path / "c.toml"
    with pytest.raises(ConfigError, match="not found"):
        write_threshold(missing, 0.7)
    assert not missing.exists()  # --write edits a config; it never creates one


TRICKY_CONFIGS = {
    # A multi-line array whose lines look like table headers.
    "array lines": '[routing]\nrules = [\n  ["a", "b"],\n  [1],\n]\nthreshold = 0.1\n[tiers.t]\ndeployments = ["x:m"]\n',
    # An array of tables under routing, after the threshold.
    "array of tables": '[routing]\nthreshold = 0.2 # keep me\n\n[[routing.rules]]\nfeature = "x"\n[tiers.t]\nx = 1\n',
    # A multi-line string that holds a [routing] line.
    "multi-line string": '[tiers.t]\nnote = """\n[routing]\nthreshold = 9\n"""\n[routing]\ndefault = "auto"\n',
    # CRLF line endings, no trailing newline, no [routing].
    "crlf": '[tiers.t]\r\nx = 1\r\ny = [\r\n  1,\r\n]',
    # A sub-table of routing only.
    "sub-table": '[routing.classifier]\nx = 1\n',
}


@pytest.mark.parametrize("name", list(TRICKY_CONFIGS))
def test_write_keeps_valid_toml_and_everything_else(tmp_path, name):
    config = tmp_path / "llmroute.toml"
    text = TRICKY_CONFIGS[name]
    config.write_bytes(text.encode("utf-8"))
    before = tomllib.loads(text)
    write_threshold(config, 0.625)
    after = tomllib.loads(config.read_text(encoding="utf-8"))
    before.setdefault("routing", {})["threshold"] = 0.625
    assert after == before


@pytest.mark.parametrize("text", ['routing = { default = "auto" }\n', '[routing]\n"threshold" = 0.5\n',
                                  "[routing\n"])
def test_write_refuses_what_it_cannot_rewrite_and_leaves_the_file_alone(tmp_path, text):
    config = tmp_path / "llmroute.toml"
    config.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError):
        write_threshold(config, 0.6)
    assert config.read_text(encoding="utf-8") == text


def test_write_refuses_a_dotted_key(tmp_path):
    config = tmp_path / "d.toml"
    config.write_text("routing.threshold = 0.5\n", encoding="utf-8")
    with pytest.raises(ConfigError):
        write_threshold(config, 0.6)
