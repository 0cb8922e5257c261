"""The cache key and the per-call decision, sans-I/O: every answer-changing parameter changes the key,
namespaces keep tenants apart, only reproducible requests are cached unless overridden."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from llmroute.cache.key import key_parts, namespace_for, target_id
from llmroute.cache.cache_policy import CacheConfig, CacheSettings, CallCache, TierCacheConfig, decide, pop_cache_args
from llmroute.errors import InvalidRequestError

MSGS = [{"role": "system", "content": "You answer FAQ."}, {"role": "user", "content": "How do I reset my password?"}]
BASE = {"temperature": 0, "max_tokens": 64}
TARGET = target_id("t", [SimpleNamespace(id="v:m", extra_body={})])


def key(params=None, messages=None, extra_body=None, target=None):
    return key_parts(target or TARGET, messages or MSGS, params if params is not None else BASE, extra_body or {}).exact


TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}]
CHANGES = {
    "temperature": {"temperature": 0.0001},
    "top_p": {"top_p": 0.5},
    "seed": {"seed": 7},
    "n": {"n": 2},
    "stop": {"stop": ["\n"]},
    "max_tokens": {"max_tokens": 65},
    "tools": {"tools": TOOLS},
    "tool_choice": {"tools": TOOLS, "tool_choice": "required"},
    "response_format": {"response_format": {"type": "json_object"}},
    "reasoning_effort": {"reasoning_effort": "high"},
    "logprobs": {"logprobs": True},
    "presence_penalty": {"presence_penalty": 0.1},
}


@pytest.mark.parametrize("name", sorted(CHANGES))
def test_every_answer_changing_parameter_changes_the_key(name):
    changed = {**BASE, **CHANGES[name]}
    assert key(changed) != key()


def test_tool_choice_alone_changes_the_key():
    with_tools = {**BASE, "tools": TOOLS}
    assert key({**with_tools, "tool_choice": "auto"}) != key({**with_tools, "tool_choice": "required"})


def test_messages_extra_body_and_target_change_the_key():
    assert key(messages=[MSGS[0], {"role": "user", "content": "How do I reset my password ?"}]) != key()
    assert key(messages=[{"role": "system", "content": "Be brief."}, MSGS[1]]) != key()
    assert key(extra_body={"enable_thinking": True}) != key()
    other_tier = target_id("large", [SimpleNamespace(id="v:m", extra_body={})])
    other_dep = target_id("t", [SimpleNamespace(id="v:m2", extra_body={})])
    dep_body = target_id("t", [SimpleNamespace(id="v:m", extra_body={"top_k": 5})])
    assert len({key(), key(target=other_tier), key(target=other_dep), key(target=dep_body)}) == 4


def test_stream_options_and_key_order_do_not_change_the_key():
    assert key({**BASE, "stream_options": {"include_usage": True}}) == key()
    assert key({"max_tokens": 64, "temperature": 0}) == key()


def test_semantic_group_ignores_only_the_last_user_question():
    a = key_parts(TARGET, MSGS, BASE, {})
    b = key_parts(TARGET, [MSGS[0], {"role": "user", "content": "I forgot my password, how to reset it?"}], BASE, {})
    c = key_parts(TARGET, [{"role": "system", "content": "Other bot."}, MSGS[1]], BASE, {})
    assert a.exact != b.exact and a.group == b.group and a.group != c.group
    assert a.query == "How do I reset my password?"


def test_namespaces_separate_features_and_tenants():
    assert namespace_for("faq", {"tenant": "a"}, ["tenant"]) == "feature=faq;tenant=a"
    assert len({namespace_for("faq", {"tenant": "a"}, ["tenant"]), namespace_for("faq", {"tenant": "b"}, ["tenant"]),
                namespace_for("chat", {"tenant": "a"}, ["tenant"]), namespace_for("faq", {}, ["tenant"])}) == 4


ON = CacheSettings(CacheConfig(enabled=True, ttl_s=60))


@pytest.mark.parametrize("params,used", [
    ({"temperature": 0}, True), ({"seed": 1, "temperature": 0.7}, True), ({"temperature": 0.7}, False), ({}, False),
])
def test_only_reproducible_requests_are_cached_by_default(params, used):
    d = decide(ON, CallCache(), "t", params)
    assert d.use is used and d.outcome == (None if used else "bypass")


def test_overrides_of_the_reproducible_rule_and_ttls():
    assert decide(ON, CallCache("always"), "t", {"temperature": 1}).use
    loose = CacheSettings(CacheConfig(enabled=True, reproducible_only=False))
    assert decide(loose, CallCache(), "t", {}).use
    assert decide(ON, CallCache(False), "t", {"temperature": 0}).outcome == "bypass"
    assert decide(ON, CallCache(True, 5.0), "t", {"temperature": 0}).ttl_s == 5.0
    tiered = CacheSettings(CacheConfig(), {"t": TierCacheConfig(ttl_s=3600)})
    assert decide(tiered, CallCache(), "t", {"seed": 1}).ttl_s == 3600
    assert decide(tiered, CallCache(), "other", {"seed": 1}).use is False  # cache off outside tier t
    off = CacheSettings(CacheConfig())
    assert decide(off, CallCache(), "t", {"seed": 1}) == decide(off, CallCache(), None, {})
    assert decide(off, CallCache(True), "t", {"seed": 1}).use  # cache=True works without [cache]
    # The call's own cache=True caches it whatever its temperature (the caller asked for it); config-
    # and tier-level caching keep the reproducible-only rule.
    assert decide(ON, CallCache(True), "t", {"temperature": 1}).use
    assert decide(off, CallCache(True), "t", {}).use
    assert decide(tiered, CallCache(), "t", {"temperature": 1}).outcome == "bypass"


def test_bad_cache_arguments_are_typed_errors():
    with pytest.raises(InvalidRequestError, match="cache"):
        pop_cache_args({"cache": "yes"})
    with pytest.raises(InvalidRequestError, match="cache_ttl_s"):
        pop_cache_args({"cache": True, "cache_ttl_s": -1})
    kwargs, call = pop_cache_args({"model": "t", "cache": True, "cache_ttl_s": 9})
    assert kwargs == {"model": "t"} and call == CallCache(True, 9.0)
