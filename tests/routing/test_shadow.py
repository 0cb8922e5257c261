"""Shadow comparisons (`[routing.shadow]`): the pure pieces, and the sync and async clients over
loopback (plain and streamed calls), a vLLM server as the small tier and an SGLang one as the large
tier and judge; reports leaving shadow traffic out."""

from __future__ import annotations

import json
import sqlite3

import pytest

from llmroute import Client
from llmroute.config import Config
from llmroute.errors import ConfigError
from llmroute.routing.outcomes import outcomes_from_ledger
from llmroute.routing.shadow import RUBRIC, judge_messages, parse_verdict, shadow_request, should_shadow
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
    streamed = {"model": "auto", "messages": [], "stream": True, "stream_options": {"include_usage": True},
                "metadata": {"team": "a"}, "feature": "f"}
    assert shadow_request(streamed, "large") == {"model": "large", "messages": [], "metadata": {"team": "a", "shadow": "1"},
                                                 "feature": "f"}  # a shadow is a plain call, even of a stream
    assert streamed["metadata"] == {"team": "a"}  # the caller's arguments are not changed
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


def test_only_classifier_routed_small_calls_are_shadowed_streams_once_ended(servers, tmp_path):
    vllm, sglang = servers
    with Client(config=_shadow_config(servers, tmp_path, judge=None)) as client:
        client.chat.completions.create(model="auto", messages=HARD)  # large: not shadowed
        client.chat.completions.create(model="small", messages=EASY)  # a tier by name: not routed
        vllm.push(Reply(pieces=["one ", "two ", "three"], gap_s=0.05))  # a stream the caller leaves early
        with client.chat.completions.create(model="auto", messages=EASY, stream=True) as stream:
            next(iter(stream))  # closed before it ended: no assembled answer, nothing to compare
        assert client._shadow.submitted == 0
        with client.chat.completions.create(model="auto", messages=EASY, stream=True,
                                            stream_options={"include_usage": True}) as stream:
            for _ in stream:
                pass
            assert client._shadow.submitted == 1  # offered the moment it ended
        client.chat.completions.create(model="auto", messages=EASY)
        assert client._shadow.submitted == 2
    hard, *shadows = sglang.chat_requests()  # HARD, then the two shadows (no judge configured)
    assert len(shadows) == 2 and all(s.json["messages"] == EASY for s in shadows)


def test_a_sample_beyond_max_in_flight_is_dropped_not_queued(servers, tmp_path):
    vllm, sglang = servers
    sglang.push(Reply(pieces=["slow large answer"], delay_s=1.5), model=LARGE_MODEL)
    with Client(config=_shadow_config(servers, tmp_path, judge=None, max_in_flight=1)) as client:
        client.chat.completions.create(model="auto", messages=EASY)
        client.chat.completions.create(model="auto", messages=EASY)  # the one slot is busy: dropped
        assert (client._shadow.submitted, client._shadow.dropped) == (1, 1)
    assert len(sglang.chat_requests()) == 1


def test_async_client_shadows_plain_and_streamed_calls_in_the_background(servers, tmp_path):
    import asyncio

    from llmroute import AsyncClient

    vllm, sglang = servers
    # the shadow is slow: the caller gets its answer while the shadow is still running
    sglang.push(Reply(pieces=["The large answer."], delay_s=1.5), Reply(pieces=["B"]), model=LARGE_MODEL)
    sglang.push(Reply(pieces=["The large answer, again."]), Reply(pieces=["T"]), model=LARGE_MODEL)

    async def go():
        async with AsyncClient(config=_shadow_config(servers, tmp_path, max_in_flight=1)) as client:
            plain = await client.chat.completions.create(model="auto", messages=EASY, metadata={"team": "a"})
            shadow = client._shadow
            (task,) = shadow._tasks
            assert shadow.submitted == 1 and not task.done()  # the caller did not wait for it
            stream = await client.chat.completions.create(model="auto", messages=EASY, stream=True)
            async for _ in stream:
                pass
            assert (shadow.submitted, shadow.dropped) == (1, 1)  # the slot was taken: dropped
            await asyncio.gather(*shadow._tasks)
            stream = await client.chat.completions.create(model="auto", messages=EASY, stream=True)
            async for _ in stream:
                pass
            assert shadow.submitted == 2
            return plain, stream.response
        # aclose() waited for the second shadow

    plain, streamed = asyncio.run(go())
    shadow_a, judge_a, shadow_b, judge_b = sglang.chat_requests()
    assert shadow_a.json["model"] == LARGE_MODEL and shadow_a.json["messages"] == EASY
    assert judge_b.json["messages"][0]["content"] == RUBRIC
    with sqlite3.connect(tmp_path / "ledger.db") as db:
        feedback = db.execute("SELECT request_id, score, label, source FROM feedback ORDER BY request_id").fetchall()
        marks = [json.loads(meta).get("shadow") for (meta,) in db.execute("SELECT metadata FROM ledger")]
    assert sorted(feedback) == sorted([(plain.route.request_id, 0.0, "judge: B", "shadow"),
                                       (streamed.route.request_id, 1.0, "judge: tie", "shadow")])
    assert sorted(marks, key=str) == sorted([None, None, None, "1", "1", "1", "1"], key=str)


def test_reports_leave_shadow_traffic_out_unless_asked(servers, tmp_path, capsys):
    from llmroute import report
    from llmroute.cli import main

    vllm, sglang = servers
    sglang.push(Reply(pieces=["The large answer."]), Reply(pieces=["A"]), model=LARGE_MODEL)
    with Client(config=_shadow_config(servers, tmp_path)) as client:
        client.chat.completions.create(model="auto", messages=EASY, feature="support")
    ledger = tmp_path / "ledger.db"
    (row,) = report(ledger, by="feature,tier")
    assert (row["feature"], row["tier"], row["requests"]) == ("support", "small", 1)
    rows = report(ledger, by="feature,tier", include_shadow=True)
    assert [(r["tier"], r["requests"]) for r in rows] == [("large", 2), ("small", 1)]  # the shadow and the judge
    assert rows.totals[0]["requests"] == 3 and report(ledger).totals[0]["requests"] == 1  # self-hosted: cost 0
    assert main(["report", "--ledger", str(ledger), "--by", "tier", "--format", "json"]) == 0
    assert [g["tier"] for g in json.loads(capsys.readouterr().out)["groups"]] == ["small"]
    assert main(["report", "--ledger", str(ledger), "--by", "tier", "--format", "json", "--include-shadow"]) == 0
    assert [g["tier"] for g in json.loads(capsys.readouterr().out)["groups"]] == ["large", "small"]


def test_shadow_is_off_by_default_and_checked_at_load(servers):
    with Client(config=_config(*servers)) as client:
        assert client._shadow is None
    with pytest.raises(ConfigError) as info:
        Config.from_dict(_config(*servers, routing={"shadow": {"rate": 0.1, "judge": "nope"}}))
    assert info.value.key == "routing.shadow.judge"
    with pytest.raises(ConfigError) as info:
        Config.from_dict(_config(*servers, routing={"shadow": {"rate": 2}}))
    assert "routing.shadow.rate" in str(info.value)
