"""The cache through the public clients, over real sockets to the vLLM loopback server: hits, misses,
bypasses, streamed replay, what is never stored, TTLs with a fake clock, tenants, tiers, the ledger."""

from __future__ import annotations

import asyncio
import json
from decimal import Decimal

import pytest

from llmroute import AsyncClient, Client
from llmroute.errors import ServerError, StreamInterruptedError
from tests.cache.conftest import DEP, MESSAGES, MODEL, cache_config
from tests.servers.script import Reply


def call(client, **kw):
    kw.setdefault("model", "t")
    kw.setdefault("messages", MESSAGES)
    kw.setdefault("temperature", 0)
    return client.chat.completions.create(**kw)


def sent(server) -> int:
    return len(server.chat_requests())


def test_a_repeated_request_is_served_from_the_cache_with_the_savings_in_the_ledger(vllm_server):
    with Client(config=cache_config(vllm_server)) as client:
        first = call(client, feature="faq")
        second = call(client, feature="faq")
        records = client._engine.ledger.records
    assert sent(vllm_server) == 1
    assert (first.route.cache, second.route.cache) == ("miss", "hit")
    assert second.choices[0].message.content == first.choices[0].message.content
    assert second.usage == first.usage and second.route.deployment == DEP and second.route.tier == "t"
    assert second.cost.amount == Decimal(0) and first.cost.amount > 0
    miss, hit = records
    assert (miss.cache, miss.cost_saved) == ("miss", None)
    assert hit.cache == "hit" and hit.cost == Decimal(0) and hit.cost_saved == miss.cost
    assert hit.input_tokens == hit.output_tokens == 0 and hit.request_id == second.route.request_id
    assert hit.feature == "faq" and hit.deployment == DEP and hit.status == "ok"


@pytest.mark.parametrize("change", [
    {"temperature": 0, "seed": 3}, {"max_tokens": 3}, {"top_p": 0.5}, {"stop": ["x"]}, {"n": 1},
    {"response_format": {"type": "json_object"}}, {"extra_body": {"top_k": 2}},
    {"messages": [{"role": "user", "content": "please say hello there!"}]},
])
def test_a_change_of_an_answer_changing_parameter_is_a_miss(vllm_server, change):
    with Client(config=cache_config(vllm_server)) as client:
        call(client)
        again = call(client, **change)
    assert again.route.cache == "miss" and sent(vllm_server) == 2


def test_tenants_and_features_never_share_answers(vllm_server):
    with Client(config=cache_config(vllm_server)) as client:
        call(client, feature="faq", metadata={"tenant": "acme"})
        assert call(client, feature="faq", metadata={"tenant": "globex"}).route.cache == "miss"
        assert call(client, feature="other", metadata={"tenant": "acme"}).route.cache == "miss"
        assert call(client, feature="faq", metadata={"tenant": "acme", "user": "u2"}).route.cache == "hit"
        # Invalidation by namespace drops acme's answers only.
        assert client.cache.clear(feature="faq", metadata={"tenant": "acme"}) == 1
        assert call(client, feature="faq", metadata={"tenant": "acme"}).route.cache == "miss"
        assert call(client, feature="faq", metadata={"tenant": "globex"}).route.cache == "hit"
    assert sent(vllm_server) == 4


def test_unreproducible_and_opted_out_calls_bypass_the_cache(vllm_server):
    with Client(config=cache_config(vllm_server)) as client:
        hot = [call(client, temperature=0.8) for _ in range(2)]
        off = [call(client, cache=False) for _ in range(2)]
        forced = [call(client, temperature=0.8, cache="always") for _ in range(2)]
        records = client._engine.ledger.records
    assert [r.route.cache for r in hot + off + forced] == ["bypass"] * 4 + ["miss", "hit"]
    assert sent(vllm_server) == 5
    assert [r.cache for r in records] == ["bypass"] * 4 + ["miss", "hit"]


def test_cache_true_on_a_call_caches_it_at_any_temperature_and_bypasses_are_said_once(vllm_server, caplog):
    with Client(config=cache_config(vllm_server)) as client:
        asked = [call(client, temperature=0.9, cache=True) for _ in range(2)]
        default = [call(client, temperature=None, cache=True, max_tokens=3) for _ in range(2)]
        with caplog.at_level("WARNING", logger="llmroute.cache"):
            hot = [call(client, temperature=0.8) for _ in range(3)]
    assert [r.route.cache for r in asked + default] == ["miss", "hit", "miss", "hit"]
    assert [r.route.cache for r in hot] == ["bypass"] * 3
    said = [r.getMessage() for r in caplog.records if "bypass the cache" in r.getMessage()]
    assert len(said) == 1 and "tier 't'" in said[0] and "cache=True" in said[0]  # once per (tier, reason)
    assert sent(vllm_server) == 5


def test_without_a_cache_section_nothing_changes_unless_a_call_asks(vllm_server):
    cfg = cache_config(vllm_server)
    del cfg["cache"]
    with Client(config=cfg) as client:
        plain = [call(client) for _ in range(2)]
        asked = [call(client, cache=True) for _ in range(2)]
    assert [r.route.cache for r in plain] == [None, None]
    assert [r.route.cache for r in asked] == ["miss", "hit"] and sent(vllm_server) == 3


def test_a_tier_cache_table_turns_the_cache_on_for_that_tier_with_its_ttl(vllm_server, clock):
    tiers = {"t": {"deployments": [DEP], "cache": {"ttl_s": 100}}, "u": {"deployments": [DEP]}}
    cfg = cache_config(vllm_server, tiers=tiers)
    cfg["cache"]["enabled"] = False
    with Client(config=cfg) as client:
        client.cache.clock = clock
        assert [call(client).route.cache for _ in range(2)] == ["miss", "hit"]
        assert [call(client, model="u").route.cache for _ in range(2)] == [None, None]
        clock.advance(99)
        assert call(client).route.cache == "hit"
        clock.advance(2)
        assert call(client).route.cache == "miss"


def test_entries_expire_after_their_ttl_on_a_fake_clock(vllm_server, clock):
    with Client(config=cache_config(vllm_server, cache={"ttl_s": 60})) as client:
        client.cache.clock = clock
        call(client)
        call(client, cache_ttl_s=5, max_tokens=4)
        clock.advance(6)
        assert call(client, max_tokens=4).route.cache == "miss"
        clock.advance(50)
        assert call(client).route.cache == "hit"
        clock.advance(5)
        assert call(client).route.cache == "miss"


def _stream(client, **kw):
    stream = call(client, stream=True, **kw)
    with stream:
        chunks = list(stream)
    return stream, chunks


def test_a_streamed_answer_is_replayed_chunk_for_chunk(vllm_server):
    vllm_server.push(Reply(pieces=["Hel", "lo", " from", " the", " cache"], reasoning=["thinking", " hard"]))
    with Client(config=cache_config(vllm_server)) as client:
        usage = {"stream_options": {"include_usage": True}}  # the usage chunk is replayed to a caller that asks
        first, original = _stream(client, **usage)
        second, replayed = _stream(client, **usage)
        third, without = _stream(client)
    assert without == [c for c in original if c.choices] and third.response.usage == first.response.usage
    assert (first.route.cache, second.route.cache) == ("miss", "hit")
    assert len(original) >= 7 and replayed == original
    assert [c.usage for c in replayed] == [c.usage for c in original] and original[-1].usage is not None
    finish = [ch.finish_reason for c in replayed for ch in c.choices if ch.finish_reason]
    assert finish == ["stop"] and sent(vllm_server) == 1
    assert second.response.choices[0].message.content == "Hello from the cache"
    assert second.response.choices[0].message.reasoning_content == "thinking hard"
    assert second.response.usage == first.response.usage


def test_plain_and_streamed_calls_hit_each_other(vllm_server):
    vllm_server.push(Reply(pieces=["one", " two"]))
    with Client(config=cache_config(vllm_server)) as client:
        streamed, _ = _stream(client)
        plain = call(client)
        assert plain.route.cache == "hit" and plain.choices[0].message.content == "one two"
        assert plain.usage == streamed.response.usage
        first_plain = call(client, max_tokens=2)
        replay, chunks = _stream(client, max_tokens=2, stream_options={"include_usage": True})
    assert replay.route.cache == "hit" and sent(vllm_server) == 2
    text = "".join(ch.delta.content or "" for c in chunks for ch in c.choices)
    assert text == first_plain.choices[0].message.content
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [ch.finish_reason for c in chunks for ch in c.choices if ch.finish_reason] == ["length"]
    assert first_plain.choices[0].finish_reason == "length"
    assert chunks[-1].usage == first_plain.usage


TOOL_SSE = "".join("data: " + json.dumps(e) + "\n\n" for e in [
    {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": MODEL,
     "choices": [{"index": 0, "delta": {"role": "assistant", "content": None, "tool_calls": [
         {"index": 0, "id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": ""}}]}}]},
    {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": MODEL,
     "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"q\": "}}]}}]},
    {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": MODEL,
     "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "\"x\"}"}}]}}]},
    {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": MODEL,
     "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": MODEL, "choices": [],
     "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}},
]) + "data: [DONE]\n\n"
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]


def test_streamed_tool_calls_replay_as_the_original_and_as_a_plain_answer(vllm_server):
    vllm_server.push(Reply(body=TOOL_SSE, headers={"Content-Type": "text/event-stream"}))
    with Client(config=cache_config(vllm_server)) as client:
        first, original = _stream(client, tools=TOOLS)
        second, replayed = _stream(client, tools=TOOLS)
        plain = call(client, tools=TOOLS)
    assert replayed == original and second.route.cache == "hit" and plain.route.cache == "hit"
    tool = plain.choices[0].message.tool_calls[0]
    assert (tool.id, tool.function.name, tool.function.arguments) == ("call_1", "lookup", '{"q": "x"}')
    assert plain.choices[0].finish_reason == "tool_calls" and plain.usage.total_tokens == 18
    assert sent(vllm_server) == 1


def test_errors_refusals_filtered_and_interrupted_answers_are_never_stored(vllm_server):
    with Client(config=cache_config(vllm_server)) as client:
        vllm_server.push(Reply(error="server"))
        with pytest.raises(ServerError):
            call(client)
        vllm_server.push(Reply(pieces=["bad"], finish_reason="content_filter"))
        assert call(client).route.cache == "miss"
        vllm_server.push(Reply(pieces=["a", "b", "c", "d"], reset_after_chunks=2))
        with pytest.raises(StreamInterruptedError):
            _stream(client)
        vllm_server.push(Reply(body={"id": "r", "object": "chat.completion", "created": 1, "model": MODEL,
                                     "choices": [{"index": 0, "finish_reason": "stop", "message": {
                                         "role": "assistant", "content": None, "refusal": "I can't."}}],
                                     "usage": {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}}))
        assert call(client).route.cache == "miss"
        # Nothing of the four was stored: the fifth call goes to the server, the sixth hits.
        assert call(client).route.cache == "miss"
        assert call(client).route.cache == "hit"
        assert client.cache.stats()["stores"] == 1 and client.cache.stats()["not_stored"] == 2
    assert sent(vllm_server) == 5


def test_an_answer_larger_than_the_maximum_entry_size_is_not_stored(vllm_server):
    vllm_server.push(Reply(pieces=["x" * 5000]))
    with Client(config=cache_config(vllm_server, cache={"max_entry_bytes": 4096})) as client:
        assert [call(client).route.cache for _ in range(3)] == ["miss", "miss", "hit"]
        assert client.cache.stats()["too_large"] == 1


def test_async_client_hits_and_replays_streams(vllm_server):
    async def main():
        async with AsyncClient(config=cache_config(vllm_server), transport="httpx") as client:
            a = await call(client)
            b = await call(client)
            s1 = await call(client, stream=True, max_tokens=3)
            c1 = [c async for c in s1]
            s2 = await call(client, stream=True, max_tokens=3)
            async with s2:
                c2 = [c async for c in s2]
            await s2.close()  # awaitable, as AsyncStream.close is
            return a, b, s1, c1, s2, c2

    a, b, s1, c1, s2, c2 = asyncio.run(main())
    assert (a.route.cache, b.route.cache, s1.route.cache, s2.route.cache) == ("miss", "hit", "miss", "hit")
    assert c1 == c2 and (s2.response.choices[0].message.content == s1.response.choices[0].message.content)
    assert sent(vllm_server) == 2


def test_a_redis_url_from_the_environment_and_a_config_error_naming_the_key(vllm_server, redis_url, monkeypatch):
    from llmroute.errors import ConfigError

    monkeypatch.setenv("LLMROUTE_TEST_REDIS", redis_url)
    cfg = cache_config(vllm_server, cache={"backend": "redis", "url": "${LLMROUTE_TEST_REDIS}"})
    with Client(config=cfg) as client:
        assert [call(client).route.cache for _ in range(2)] == ["miss", "hit"]
    with pytest.raises(ConfigError, match="cache.ttl_s"):
        Client(config=cache_config(vllm_server, cache={"ttl_s": -1}))
    with pytest.raises(ConfigError, match="tiers.t.cache.ttl"):
        Client(config=cache_config(vllm_server, tiers={"t": {"deployments": [DEP], "cache": {"ttl": 5}}}))


def test_a_call_that_failed_over_is_stored_with_the_answering_attempt_only(vllm_server):
    tiers = {"t": {"deployments": [DEP, f"w:{MODEL}"]}}
    cfg = cache_config(vllm_server, tiers=tiers)
    cfg["providers"]["w"] = {"kind": "vllm", "base_url": vllm_server.base_url}
    cfg["pricing"][f"w:{MODEL}"] = {"input_per_million": 3, "output_per_million": 4, "currency": "USD"}
    with Client(config=cfg) as client:
        vllm_server.push(Reply(error="overloaded"), Reply(pieces=["second", " try"]))
        first, original = _stream(client)
        assert [a.status for a in first.route.attempts] == ["error", "ok"]
        second, replayed = _stream(client)
        records = client._engine.ledger.records
    assert second.route.cache == "hit" and replayed == original
    assert "".join(c.choices[0].delta.content or "" for c in replayed if c.choices) == "second try"
    answering = first.route.attempts[-1]
    assert second.route.deployment == answering.deployment
    assert records[-1].cost_saved == answering.cost.amount  # the answering attempt's cost, not the failed one's
