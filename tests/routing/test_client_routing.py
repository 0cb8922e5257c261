"""`model="auto"` through the public `Client` and `AsyncClient` (plain and streamed), over loopback.

Two self-hosted servers stand in for the tiers: vLLM serves the small tier (a 7B model), SGLang the
large one (a 70B model). Each test asserts which server received the request and which model it
named, and what `route.tier`, `.reason` and `.score` say: rules first, then `routing.default`, then
the classifier. Also: a rule naming a deployment, a rule naming an unknown tier (ConfigError at
load), and the router's score in the SQLite ledger feeding `llmroute calibrate`.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import llmroute as L
from llmroute import AsyncClient, Client
from tests.providers.helpers import NO_RETRIES, adrain, drain, run

SMALL_MODEL = "Qwen/Qwen2.5-7B-Instruct"
LARGE_MODEL = "meta-llama/Llama-3.3-70B-Instruct"
SMALL_DEP = f"sm:{SMALL_MODEL}"
LARGE_DEP = f"lg:{LARGE_MODEL}"
REPO = Path(__file__).resolve().parents[2]

# Clearly on either side of the default threshold (0.55); test_classifier.py covers the scores.
EASY = [{"role": "user", "content": "hi"}]
HARD = [{"role": "user", "content": "Write a Python function that merges overlapping intervals and explain "
                                    "its time complexity step by step."}]


def _config(vllm_server: Any, sglang_server: Any, routing: dict[str, Any] | None = None,
            ledger: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "providers": {
            "sm": {"kind": "vllm", "base_url": vllm_server.base_url},
            "lg": {"kind": "sglang", "base_url": sglang_server.base_url},
        },
        "tiers": {"small": {"deployments": [SMALL_DEP]}, "large": {"deployments": [LARGE_DEP]}},
        "routing": {"default": "auto", **(routing or {})},
        "resilience": dict(NO_RETRIES),
        "pricing": {
            "sm:*": {"input_per_million": 0, "output_per_million": 0},
            "lg:*": {"input_per_million": 0, "output_per_million": 0},
        },
        "ledger": ledger or {"sink": "memory"},
    }


def _served_by(vllm_server: Any, sglang_server: Any) -> str:
    """Which server got the (single) request of the test, checked by the model it was asked for."""
    small, large = len(vllm_server.requests), len(sglang_server.requests)
    assert small + large == 1, (small, large)
    if small:
        assert vllm_server.last_request.json["model"] == SMALL_MODEL
        return "small"
    assert sglang_server.last_request.json["model"] == LARGE_MODEL
    return "large"


# --- the classifier -------------------------------------------------------------------------------

@pytest.mark.parametrize(("messages", "tier"), [(EASY, "small"), (HARD, "large")])
def test_classifier_routes_sync(servers, messages, tier):
    with Client(config=_config(*servers)) as client:
        resp = client.chat.completions.create(model="auto", messages=messages)
    assert _served_by(*servers) == tier
    route = resp.route
    assert route.tier == tier and route.deployment == (SMALL_DEP if tier == "small" else LARGE_DEP)
    assert route.reason.startswith("classifier: ")
    assert route.score is not None and (route.score >= 0.55) == (tier == "large")
    assert f"{route.score:.2f}" in route.reason


def test_classifier_routes_sync_stream(servers):
    with Client(config=_config(*servers)) as client:
        with client.chat.completions.create(model="auto", messages=HARD, stream=True) as stream:
            _, text, _ = drain(stream)
    assert text and _served_by(*servers) == "large"
    route = stream.response.route
    assert route.tier == "large" and route.reason.startswith("classifier: ") and route.score >= 0.55


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("messages", "tier"), [(EASY, "small"), (HARD, "large")])
def test_classifier_routes_async(servers, messages, tier, stream):
    async def go():
        async with AsyncClient(config=_config(*servers)) as client:
            out = await client.chat.completions.create(model="auto", messages=messages, stream=stream)
            if not stream:
                return out.route
            async with out:
                _, text, _ = await adrain(out)
            assert text
            return out.response.route

    route = run(go())
    assert _served_by(*servers) == tier
    assert route.tier == tier and route.reason.startswith("classifier: ")
    assert route.score is not None and (route.score >= 0.55) == (tier == "large")


def test_threshold_is_read_from_config(servers):
    # At threshold 0 every request is large, even a greeting: the threshold is the config's.
    with Client(config=_config(*servers, routing={"threshold": 0.0})) as client:
        resp = client.chat.completions.create(model="auto", messages=EASY)
    assert _served_by(*servers) == "large" and resp.route.tier == "large" and ">= 0.00" in resp.route.reason


# --- rules before the classifier ------------------------------------------------------------------

def test_feature_rule_wins_over_the_classifier(servers):
    routing = {"rules": [{"when": {"feature": "report"}, "tier": "large"}]}
    with Client(config=_config(*servers, routing=routing)) as client:
        resp = client.chat.completions.create(model="auto", messages=EASY, feature="report")
    assert _served_by(*servers) == "large"
    assert resp.route.tier == "large" and resp.route.reason == "rule: feature=report"
    assert resp.route.score is None  # the classifier did not run


def test_unmatched_rule_falls_through_to_the_classifier(servers):
    routing = {"rules": [{"when": {"feature": "report"}, "tier": "large"}]}
    with Client(config=_config(*servers, routing=routing)) as client:
        resp = client.chat.completions.create(model="auto", messages=EASY, feature="chat")
    assert _served_by(*servers) == "small"
    assert resp.route.reason.startswith("classifier: ") and resp.route.score is not None


def test_metadata_rule(servers):
    routing = {"rules": [{"when": {"metadata": {"plan": "enterprise"}}, "tier": "large"}]}
    vllm_server, sglang_server = servers
    with Client(config=_config(*servers, routing=routing)) as client:
        free = client.chat.completions.create(model="auto", messages=EASY, metadata={"plan": "free"})
        assert _served_by(*servers) == "small" and free.route.reason.startswith("classifier: ")
        vllm_server.reset()
        paid = client.chat.completions.create(model="auto", messages=EASY, metadata={"plan": "enterprise"})
    assert _served_by(*servers) == "large"
    assert paid.route.tier == "large" and paid.route.reason == "rule: metadata.plan=enterprise"


def test_min_input_tokens_rule(servers):
    routing = {"rules": [{"when": {"min_input_tokens": 2000}, "tier": "large"}]}
    vllm_server, _ = servers
    long_doc = [{"role": "user", "content": "Say hi to everyone on this list: " + "Ann Bob Cy Di " * 800}]
    with Client(config=_config(*servers, routing=routing)) as client:
        short = client.chat.completions.create(model="auto", messages=EASY)
        assert _served_by(*servers) == "small" and short.route.reason.startswith("classifier: ")
        vllm_server.reset()
        long = client.chat.completions.create(model="auto", messages=long_doc)
    assert _served_by(*servers) == "large"
    assert long.route.reason == "rule: min_input_tokens=2000" and long.route.score is None


def test_rule_naming_a_deployment(servers):
    # A rule may send a feature to one deployment rather than a tier.
    routing = {"rules": [{"when": {"feature": "cheap"}, "tier": SMALL_DEP}]}
    with Client(config=_config(*servers, routing=routing)) as client:
        resp = client.chat.completions.create(model="auto", messages=HARD, feature="cheap")
    assert _served_by(*servers) == "small"
    assert resp.route.deployment == SMALL_DEP and resp.route.reason == "rule: feature=cheap"


def test_first_matching_rule_wins(servers):
    routing = {"rules": [{"when": {"feature": "x"}, "tier": "small"}, {"when": {}, "tier": "large"}]}
    with Client(config=_config(*servers, routing=routing)) as client:
        resp = client.chat.completions.create(model="auto", messages=HARD, feature="x")
    assert _served_by(*servers) == "small" and resp.route.reason == "rule: feature=x"


def test_default_tier_skips_the_classifier(servers):
    with Client(config=_config(*servers, routing={"default": "small"})) as client:
        resp = client.chat.completions.create(model="auto", messages=HARD)
    assert _served_by(*servers) == "small"
    assert resp.route.tier == "small" and resp.route.reason == "default: small" and resp.route.score is None


def test_rule_naming_an_unknown_tier_is_a_config_error(servers):
    routing = {"rules": [{"when": {"feature": "a"}, "tier": "small"}, {"when": {"feature": "b"}, "tier": "medium"}]}
    with pytest.raises(L.ConfigError) as info:
        Client(config=_config(*servers, routing=routing))
    assert info.value.key == "routing.rules[1].tier"
    assert "medium" in str(info.value)
    vllm_server, sglang_server = servers
    assert not vllm_server.requests and not sglang_server.requests


# --- the score in the ledger, and calibration from it -----------------------------------------

def test_router_score_is_in_the_ledger_and_calibrate_reads_it(servers, tmp_path):
    db = tmp_path / "ledger.db"
    conversations = [EASY, HARD, [{"role": "user", "content": "Translate to French: good morning"}],
                     [{"role": "user", "content": "Prove that there are infinitely many primes."}]]
    scores = []
    routing = {"rules": [{"when": {"feature": "pinned"}, "tier": "small"}]}
    with Client(config=_config(*servers, routing=routing, ledger={"sink": "sqlite", "path": str(db)})) as client:
        for messages in conversations:
            scores.append(client.chat.completions.create(model="auto", messages=messages).route.score)
        pinned = client.chat.completions.create(model="auto", messages=HARD, feature="pinned")
        assert pinned.route.score is None
    con = sqlite3.connect(db)
    try:
        stored = [row[0] for row in con.execute("SELECT router_score FROM ledger ORDER BY id")]
    finally:
        con.close()
    assert len(stored) == 5
    assert stored[:4] == pytest.approx(scores) and stored[4] is None  # a rule-routed call has no score

    out = subprocess.run(
        [sys.executable, "-m", "llmroute", "calibrate", "--prompts", str(db), "--large-share", "0.3"],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )
    assert out.returncode == 0, out.stderr
    line = next(x for x in out.stdout.splitlines() if x.startswith("threshold="))
    threshold = float(line.split("=", 1)[1])
    assert sum(s >= threshold for s in scores) == 1  # round(0.3 * 4) of the scored calls at or above it
    assert "4 prompts" in out.stderr
