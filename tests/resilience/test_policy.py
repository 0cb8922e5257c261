"""ResiliencePolicy defaults, overrides and errors that name the key."""

from __future__ import annotations

import pytest

from llmroute.errors import ConfigError
from llmroute.resilience.policy import ResiliencePolicy, merge, policy_from_config

ISSUE_KEYS = {
    "window_s": 30,
    "min_calls": 10,
    "failure_rate": 0.5,
    "slow_ttft_s": 10,
    "slow_rate": 0.8,
    "consecutive_failures": 5,
    # Shorter than the first round's 30 / 300 s: a recovered deployment must get traffic back within
    # one open_max_s, not after the rest of an outage-length run (README, "Timeouts and defaults").
    "open_s": 10,
    "open_max_s": 30,
    "half_open_probes": 3,
    "max_retries": 2,
    "retry_budget": 0.2,
    "deadline_s": 120,
}


def test_the_issue_keys_exist_with_their_defaults():
    p = ResiliencePolicy()
    for key, value in ISSUE_KEYS.items():
        assert getattr(p, key) == value, key
    assert p.hedge_after_ms is None  # hedging is opt-in


def test_a_tier_then_a_deployment_override_layer_over_the_defaults():
    base = policy_from_config({"open_s": 10, "open_max_s": 100})
    tier = merge(base, {"max_retries": 0}, key="tiers.large.resilience")
    dep = merge(tier, {"open_s": 20})
    assert (dep.open_s, dep.open_max_s, dep.max_retries) == (20, 100, 0)
    assert base.open_s == 10 and tier.open_s == 10  # values, not mutated
    assert merge(base, None) is base


def test_unknown_keys_are_errors_naming_the_key():
    with pytest.raises(ConfigError) as info:
        merge(ResiliencePolicy(), {"open_seconds": 3}, key="tiers.large.resilience")
    assert info.value.key == "tiers.large.resilience.open_seconds"
    assert "unknown key" in str(info.value)


def test_bad_values_name_the_key():
    with pytest.raises(ConfigError) as info:
        policy_from_config({"failure_rate": 1.5})
    assert info.value.key == "resilience.failure_rate"


def test_cross_field_checks():
    with pytest.raises(ConfigError, match="open_max_s"):
        policy_from_config({"open_s": 60, "open_max_s": 30})
    with pytest.raises(ConfigError, match="backoff_max_s"):
        policy_from_config({"backoff_base_s": 5, "backoff_max_s": 1})


def test_policies_are_frozen_values():
    from pydantic import ValidationError

    p = ResiliencePolicy()
    with pytest.raises(ValidationError, match="frozen"):
        p.open_s = 1  # type: ignore[misc]


def test_successes_to_close_defaults_to_the_probe_count():
    assert ResiliencePolicy(half_open_probes=4).successes_to_close == 4
    assert ResiliencePolicy(half_open_probes=4, half_open_successes=2).successes_to_close == 2
