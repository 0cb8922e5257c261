"""The breaker registry and the health table."""

from __future__ import annotations

import logging

from llmroute.resilience.deployment_health import BreakerRegistry, format_health
from llmroute.resilience.policy import ResiliencePolicy

from .helpers import auth_error, server_error


def test_one_breaker_per_deployment_with_its_own_policy():
    pols = {"a:m": ResiliencePolicy(consecutive_failures=1), "b:m": ResiliencePolicy(consecutive_failures=5)}
    reg = BreakerRegistry(pols)
    reg.record("a:m", 0.0, server_error("a:m"))
    reg.record("b:m", 0.0, server_error("b:m"))
    health = reg.health(0.0)
    assert list(health) == ["a:m", "b:m"]
    assert health["a:m"].state == "open" and health["b:m"].state == "closed"
    assert reg.breaker("a:m") is reg.breaker("a:m")


def test_registered_deployments_show_before_any_call():
    reg = BreakerRegistry()
    reg.register(["x:y", "p:q"])
    assert {k: v.state for k, v in reg.health(0.0).items()} == {"p:q": "closed", "x:y": "closed"}


def test_transitions_are_reported_and_disables_are_loud(caplog):
    seen = []
    reg = BreakerRegistry(ResiliencePolicy(consecutive_failures=1), on_transition=seen.append)
    with caplog.at_level(logging.INFO, logger="llmroute.resilience"):
        reg.record("a:m", 0.0, server_error("a:m"))
        reg.record("b:m", 0.0, auth_error("b:m"))
    assert [(t.deployment_id, t.to_state, t.disabled) for t in seen] == [("a:m", "open", False), ("b:m", "open", True)]
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "b:m" in errors[0].getMessage() and "out of rotation" in errors[0].getMessage()
    assert "sk-abcdefghijklmnop" not in caplog.text


def test_format_health_table():
    reg = BreakerRegistry(ResiliencePolicy(consecutive_failures=1, open_s=30))
    reg.record("a:m", 0.0, server_error("a:m"), ttft_s=0.4, latency_s=2.0)
    reg.record("b:m", 0.0, auth_error("b:m"))
    reg.record("c:m", 0.0, None, ttft_s=0.2, latency_s=1.0)
    text = format_health(reg.health(10.0), now=10.0)
    lines = text.splitlines()
    assert lines[0].split()[:2] == ["deployment", "state"]
    row_a = next(l for l in lines if l.startswith("a:m"))
    assert "open" in row_a and "20.0s" in row_a and "100%" in row_a and "ServerError" in row_a
    assert "disabled" in next(l for l in lines if l.startswith("b:m"))
    assert any(l.startswith("!! b:m") and "API key" in l for l in lines)
    assert "0.20/0.20" in next(l for l in lines if l.startswith("c:m"))
    assert format_health({}).endswith("(no deployments)")
