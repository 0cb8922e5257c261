"""Prompts from JSONL (with errors naming file and line) and the synthetic set."""

from __future__ import annotations

import json

import pytest

from llmroute.bench.workload import load_prompts, synthetic_prompts
from llmroute.errors import ConfigError
from llmroute.accounting.tokens import count_text_tokens


def write(tmp_path, *lines):
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_prompt_and_messages_lines(tmp_path):
    path = write(tmp_path,
                 json.dumps({"prompt": "hello"}),
                 "",
                 json.dumps({"messages": [{"role": "system", "content": "be brief"},
                                          {"role": "user", "content": "hi"}], "max_tokens": 16}))
    first, second = load_prompts(path)
    assert first.as_messages() == [{"role": "user", "content": "hello"}] and first.max_tokens is None
    assert [m["role"] for m in second.messages] == ["system", "user"] and second.max_tokens == 16
    assert second.source.endswith("prompts.jsonl:3")


@pytest.mark.parametrize("line, where", [
    ("{not json", "line 2"),
    ("[1, 2]", "line 2"),
    ('{"prompt": "a", "messages": []}', "line 2"),
    ("{}", "line 2"),
    ('{"prompt": ""}', "line 2.prompt"),
    ('{"prompt": "a", "max_tokens": 0}', "line 2.max_tokens"),
    ('{"prompt": "a", "max_tokens": true}', "line 2.max_tokens"),
    ('{"prompt": "a", "temperature": 1}', "line 2"),
    ('{"messages": [{"role": "robot", "content": "x"}]}', "line 2.messages[0].role"),
    ('{"messages": [{"role": "user"}]}', "line 2.messages[0].content"),
    ('{"messages": "hi"}', "line 2.messages"),
])
def test_bad_lines_name_file_and_line(tmp_path, line, where):
    path = write(tmp_path, json.dumps({"prompt": "fine"}), line)
    with pytest.raises(ConfigError) as err:
        load_prompts(path)
    assert str(path) in str(err.value) and where in str(err.value)


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_prompts(tmp_path / "nope.jsonl")
    with pytest.raises(ConfigError, match="no prompts"):
        load_prompts(write(tmp_path, "", "  "))


def test_synthetic_prompts_have_the_asked_length_and_distinct_prefixes():
    prompts = synthetic_prompts(5, input_tokens=128, output_tokens=64, seed=1)
    assert len(prompts) == 5
    for p in prompts:
        (msg,) = p.messages
        assert count_text_tokens(msg["content"]) == 128
        assert p.max_tokens == 64
    assert len({p.messages[0]["content"][:12] for p in prompts}) == 5
    assert synthetic_prompts(2, input_tokens=64, output_tokens=8, seed=1)[1] == \
        synthetic_prompts(2, input_tokens=64, output_tokens=8, seed=1)[1]
    with pytest.raises(ConfigError):
        synthetic_prompts(1, input_tokens=4, output_tokens=8)
