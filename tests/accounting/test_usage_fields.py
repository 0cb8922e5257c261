"""Where each platform reports the counts beyond prompt and completion: explicit context-cache writes
and their type, reasoning tokens; and the request flags that turn thinking on."""

from __future__ import annotations

import pytest

from llmroute.accounting.cost import read_usage
from llmroute.accounting.tokens import cache_write_tokens, explicit_cache, normalize_usage, thinking_requested


@pytest.mark.parametrize("raw, written, explicit", [
    # Bailian compatible mode, explicit cache (alibabacloud.com/help/en/model-studio/context-cache).
    ({"prompt_tokens": 18628, "completion_tokens": 344, "prompt_tokens_details": {
        "cached_tokens": 0, "cache_creation_input_tokens": 18613, "cache_type": "ephemeral",
        "cache_creation": {"ephemeral_5m_input_tokens": 18613}}}, 18613, True),
    # Only the nested form.
    ({"prompt_tokens": 3019, "completion_tokens": 104, "prompt_tokens_details": {
        "cached_tokens": 2048, "cache_creation": {"ephemeral_5m_input_tokens": 500}, "cache_type": "ephemeral"}},
     500, True),
    # DashScope native: input_tokens and input_tokens_details.
    ({"input_tokens": 1524, "output_tokens": 1534, "input_tokens_details": {
        "cached_tokens": 1305, "cache_creation_input_tokens": 213, "cache_type": "ephemeral"}}, 213, True),
    # An Anthropic-shaped gateway: flat on usage.
    ({"prompt_tokens": 2000, "completion_tokens": 5, "cache_creation_input_tokens": 1500}, 1500, False),
    # Implicit cache hits only: nothing written, not explicit.
    ({"prompt_tokens": 1000, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 400}}, 0, False),
    # A write larger than the uncached prompt is clamped to it.
    ({"prompt_tokens": 100, "completion_tokens": 5, "prompt_tokens_details": {
        "cached_tokens": 60, "cache_creation_input_tokens": 90}}, 40, False),
])
def test_cache_writes_and_type_are_read(raw, written, explicit):
    usage = normalize_usage(raw)
    assert (cache_write_tokens(usage), explicit_cache(usage)) == (written, explicit)
    t = read_usage(raw)
    assert (t.cache_write_tokens, t.explicit_cache) == (written, explicit)


def test_a_plain_usage_dumps_as_before():
    """No cache-write or explicit-cache figure appears where the platform sent none; the fields openai-python's
    `PromptTokensDetails` declares are there as None (tests/openai_compat compares the shapes)."""
    usage = normalize_usage({"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 4}})
    details = usage.model_dump()["prompt_tokens_details"]
    assert {k: v for k, v in details.items() if v is not None} == {"cached_tokens": 4}
    assert not any(k.startswith(("cache_creation", "cache_type")) for k in details)


@pytest.mark.parametrize("params, extra_body, on", [
    ({}, {"enable_thinking": True}, True),                         # Bailian, SiliconFlow (extra_body)
    ({"enable_thinking": True}, None, True),
    ({}, {"enable_thinking": False}, False),
    ({}, {"thinking": {"type": "enabled", "budget_tokens": 2048}}, True),   # Fireworks
    ({}, {"thinking": {"type": "disabled"}}, False),
    ({}, {"chat_template_kwargs": {"enable_thinking": True}}, True),      # vLLM / SGLang hybrid models
    ({"reasoning_effort": "high"}, None, False),                   # a reasoning model's effort, not a mode switch
    (None, None, False),
])
def test_thinking_requested(params, extra_body, on):
    assert thinking_requested(params, extra_body) is on
