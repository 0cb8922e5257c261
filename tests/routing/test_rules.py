"""Routing rules, the default tier, the classifier fallback and the load-time cross-checks."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from llmroute.errors import ConfigError
from llmroute.routing.rules import RouteDecision, RouteQuery, RoutingConfig, RoutingRuleWhen, check_routing, decide, rule_matches

TIERS = {"small", "large", "long"}


def _config(**extra) -> RoutingConfig:
    return RoutingConfig.model_validate({
        "threshold": 0.55,
        "rules": [
            {"when": {"feature": "report-generation"}, "tier": "large"},
            {"when": {"metadata": {"plan": "free"}}, "tier": "small"},
            {"when": {"min_input_tokens": 6000}, "tier": "long", "pool": "long-ctx"},
        ],
        **extra,
    })


def _ask(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def test_defaults():
    config = RoutingConfig()
    assert (config.default, config.threshold, config.rules) == ("auto", 0.55, [])
    assert (config.large_tier, config.small_tier) == ("large", "small")


@pytest.mark.parametrize("bad", [{"threshold": 1.5}, {"threshold": -0.1}, {"unknown": 1},
                                 {"rules": [{"when": {"colour": "red"}, "tier": "small"}]},
                                 {"rules": [{"when": {}, "tier": "small", "extra": 1}]}])
def test_bad_section_is_rejected(bad):
    with pytest.raises(ValidationError):
        RoutingConfig.model_validate(bad)


def test_first_matching_rule_wins_with_its_reason():
    decision = decide(_config(), RouteQuery(messages=_ask("hi"), feature="report-generation", metadata={"plan": "free"}))
    assert decision == RouteDecision(tier="large", reason="rule: feature=report-generation", rule_index=0)


def test_metadata_rule():
    decision = decide(_config(), RouteQuery(messages=_ask("Prove Fermat's last theorem"), metadata={"plan": "free"}))
    assert (decision.tier, decision.reason, decision.score) == ("small", "rule: metadata.plan=free", None)
    assert decide(_config(), RouteQuery(messages=_ask("hi"), metadata={"plan": "pro"})).rule_index is None


def test_input_token_rule_estimates_when_not_given_and_carries_the_pool():
    long_doc = _ask("Summarize: " + "word " * 30_000)
    decision = decide(_config(), RouteQuery(messages=long_doc))
    assert (decision.tier, decision.pool, decision.reason) == ("long", "long-ctx", "rule: min_input_tokens=6000")
    assert decide(_config(), RouteQuery(messages=long_doc, input_tokens=10)).tier != "long"


def test_default_tier_skips_the_classifier():
    decision = decide(_config(default="small"), RouteQuery(messages=_ask("Design a distributed database")))
    assert decision == RouteDecision(tier="small", reason="default: small")


def test_classifier_decides_against_the_threshold():
    code = decide(_config(), RouteQuery(messages=_ask("Write a Python function that merges overlapping intervals, with tests")))
    assert code.tier == "large" and code.score is not None and code.score >= 0.55
    assert code.reason.startswith("classifier: code request") and ">= 0.55)" in code.reason
    hello = decide(_config(), RouteQuery(messages=_ask("你好")))
    assert hello.tier == "small" and "< 0.55)" in hello.reason and hello.category == "greeting"


def test_threshold_extremes_and_custom_tier_names():
    query = RouteQuery(messages=_ask("hi"))
    assert decide(_config(threshold=0.0), query).tier == "large"
    assert decide(_config(threshold=1.0), RouteQuery(messages=_ask("Prove the Riemann hypothesis"))).tier == "small"
    config = RoutingConfig(large_tier="70b", small_tier="7b")
    assert decide(config, query).tier == "7b"
    assert decide(config, query, small_tier="tiny").tier == "tiny"


def test_reason_never_prints_equal_numbers_on_both_sides():
    query = RouteQuery(messages=_ask("What does our refund policy say about annual plans?"))
    score = decide(_config(), query).score
    just_above = decide(_config(threshold=min(1.0, score + 0.001)), query)
    assert just_above.tier == "small"
    left, right = just_above.reason.rsplit("(score ", 1)[1].rstrip(")").split(" < ")
    assert left != right


@pytest.mark.parametrize(
    "when, query, expected",
    [
        ({"feature": ["a", "b"]}, RouteQuery(feature="b"), True),
        ({"feature": ["a", "b"]}, RouteQuery(feature=None), False),
        ({"metadata": {"n": "1"}}, RouteQuery(metadata={"n": 1}), True),
        ({"max_input_tokens": 100}, RouteQuery(input_tokens=101), False),
        ({"min_max_tokens": 2000}, RouteQuery(max_tokens=4096), True),
        ({"min_max_tokens": 2000}, RouteQuery(max_tokens=None), False),
        ({"max_max_tokens": 256}, RouteQuery(max_tokens=100), True),
        ({"has_tools": True}, RouteQuery(has_tools=False), False),
        ({"json_schema": True}, RouteQuery(has_json_schema=True), True),
        ({"json_schema": False, "has_tools": True}, RouteQuery(has_tools=True, has_json_schema=False), True),
        ({}, RouteQuery(), True),
    ],
)
def test_rule_conditions(when, query, expected):
    assert rule_matches(RoutingRuleWhen.model_validate(when), query, query.input_tokens or 0) is expected


def test_check_routing_accepts_a_good_config():
    check_routing(_config(), TIERS)
    check_routing(RoutingConfig.model_validate({"rules": [{"when": {}, "tier": "together:llama-70b"}]}),
                  {"small", "large"}, {"together:llama-70b"})


def test_unknown_rule_tier_names_the_key():
    config = RoutingConfig.model_validate({"rules": [{"when": {}, "tier": "small"}, {"when": {}, "tier": "huge"}]})
    with pytest.raises(ConfigError) as info:
        check_routing(config, {"small", "large"})
    assert info.value.key == "routing.rules[1].tier"
    assert "huge" in str(info.value)


def test_unknown_default_and_missing_large_tier():
    with pytest.raises(ConfigError) as info:
        check_routing(RoutingConfig(default="medium"), TIERS)
    assert info.value.key == "routing.default"
    with pytest.raises(ConfigError) as info:
        check_routing(RoutingConfig(), {"7b", "70b"})
    assert info.value.key == "routing.large_tier"
    check_routing(RoutingConfig(default="7b"), {"7b", "70b"})  # no classifier, no large/small needed


def test_impossible_rule_is_an_error():
    config = RoutingConfig.model_validate({"rules": [{"when": {"min_input_tokens": 10, "max_input_tokens": 5}, "tier": "small"}]})
    with pytest.raises(ConfigError) as info:
        check_routing(config, TIERS)
    assert info.value.key == "routing.rules[0].when"
