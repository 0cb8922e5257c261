"""Shadow comparisons (`[routing.shadow]`): the pure pieces, and the sync client over loopback, a
vLLM server as the small tier and an SGLang one as the large tier and judge."""

from __future__ import annotations

import json
import sqlite3

import pytest

from llmroute import Client
from llmroute.config import Config
from llmroute.errors import ConfigError
from llmroute.routing.outcomes import outcomes_from_ledger
from llmroute.routing.shadow import RUBRIC, judge_messages, parse_verdict, should_shadow
from tests.routing.test_client_routing import EASY, HARD, LARGE_MODEL, _config
from tests.servers.script import Reply


def test_sampling_verdicts_and_the_judge_prompt():
    assert should_shadow(tier="small", score=0.2, small_tier="small", rate=0.5, draw=0.49)
    assert not should_shadow(tier="small", score=0.2, small_tier="small", rate=0.5, draw=0.5)
    assert not should_shadow(tier="large", score=0.9, small_tier="small", rate=1.0, draw=0.0)
    assert not should_shadow(tier="small", score=None, small_tier="small", rate=1.0, draw=0.0)  # not routed
    assert not should_shadow(tier="small", score=0.2, small_tier="small", rate=0.0, draw=0.0)
    assert [parse_verdict(t) for t in ("B", " a.", "T", "tie", "**B**", "Answer: B", "", None)] == \
        ["B", "A", "tie", "tie", "B", None, None, None]
    judged = judge_messages([{"role": "system", "content": "x"}, {"role": "user", "content": "2+2?"}], "4", "four")
    assert judged[0] == {"role": "system", "content": RUBRIC}
    assert "Request:\n2+2?" in judged[1]["content"] and "Answer A:\n4" in judged[1]["content"]


def _shadow_config(servers, tmp_path, **shadow):
    ledger = {"sink": "sqlite", "path": str(tmp_path / "ledger.db"), "flush_interval_s": 0.05}
    return _config(*servers, routing={"shadow": {"rate": 1.0, "judge": "large", **shadow}}, ledger=ledger)


def test_a_small_tier_call_is_shadowed_and_judged(servers, tmp_path):
    vllm, sglang = servers
    sglang.push(Reply(pieces=["The large answer."]), Reply(pieces=["B"]), model=LARGE_MODEL)
    with Client(config=_shadow_config(servers, tmp_path)) as client:
        resp = client.chat.completions.create(model="auto", messages=EASY, metadata={"team": "a"})
        assert resp.route.tier == "small"
    # close() waited for the shadow job
    shadow_call, judge_call = sglang.chat_requests()
    assert shadow_call.json["messages"] == EASY and shadow_call.json["model"] == LARGE_MODEL
    assert judge_call.json["messages"][0]["content"] == RUBRIC and "The large answer." in judge_call.json["messages"][1]["content"]
    with sqlite3.connect(tmp_path / "ledger.db") as db:
        ledger = [(tier, json.loads(meta)) for tier, meta in db.execute("SELECT tier, metadata FROM ledger ORDER BY id")]
        feedback = db.execute("SELECT request_id, score, label, source, tier FROM feedback").fetchall()
    assert sorted(ledger, key=str) == sorted([("small", {"team": "a"}), ("large", {"team": "a", "shadow": "1"}),
                                              ("large", {"team": "a", "shadow": "1"})], key=str)
    assert feedback == [(resp.route.request_id, 0.0, "judge: B", "shadow", "small")]
    outcomes, _ = outcomes_from_ledger(tmp_path / "ledger.db")
    assert [(o.messages, o.small, o.large) for o in outcomes] == [(EASY, 0.0, 1.0)]


def test_only_classifier_routed_plain_small_calls_are_shadowed(servers, tmp_path):
    vllm, sglang = servers
    with Client(config=_shadow_config(servers, tmp_path, judge=None)) as client:
        client.chat.completions.create(model="auto", messages=HARD)  # large: not shadowed
        client.chat.completions.create(model="small", messages=EASY)  # a tier by name: not routed
        with client.chat.completions.create(model="auto", messages=EASY, stream=True) as stream:
            for _ in stream:
                pass
        assert client._shadow.submitted == 0
        client.chat.completions.create(model="auto", messages=EASY)
        assert client._shadow.submitted == 1
    assert len(sglang.chat_requests()) == 2  # HARD, and the one shadow (no judge configured)


def test_shadow_is_off_by_default_and_checked_at_load(servers):
    with Client(config=_config(*servers)) as client:
        assert client._shadow is None
    with pytest.raises(ConfigError) as info:
        Config.from_dict(_config(*servers, routing={"shadow": {"rate": 0.1, "judge": "nope"}}))
    assert info.value.key == "routing.shadow.judge"
    with pytest.raises(ConfigError) as info:
        Config.from_dict(_config(*servers, routing={"shadow": {"rate": 2}}))
    assert "routing.shadow.rate" in str(info.value)
