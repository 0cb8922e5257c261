"""The self-hosted path end to end: our clients over real sockets to a real llama.cpp server."""

from __future__ import annotations

import asyncio

import pytest

from llmroute import AsyncClient, Client, APIConnectionError, ContextLengthError, InvalidRequestError, RoutingError
from tests.servers.llamacpp import MODEL_ALIAS, llama_config

MESSAGES = [{"role": "user", "content": "提取这句话的关键词：今天上海下雨了"}]


@pytest.fixture(params=["llamacpp", "openai-compatible"])
def client(request, llama_server):
    with Client(config=llama_config(llama_server.base_url, kind=request.param)) as c:
        yield c


def test_plain_call_has_real_usage_and_route(client):
    resp = client.chat.completions.create(model="small", messages=MESSAGES, feature="kw", max_tokens=8, temperature=0.2)
    assert resp.choices[0].message.content
    assert resp.choices[0].finish_reason in ("stop", "length")
    assert resp.usage.completion_tokens > 0 and resp.usage.prompt_tokens > 0
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens
    assert resp.route.usage_estimated is False
    assert resp.route.provider == "local" and resp.route.deployment == f"local:{MODEL_ALIAS}"
    assert resp.route.tier == "small" and len(resp.route.attempts) == 1
    assert resp.route.attempts[0].status == "ok"
    assert "route" not in resp.model_dump()


def test_stream_assembles_the_same_shape(client):
    with client.chat.completions.create(model="small", messages=MESSAGES, max_tokens=8, stream=True) as stream:
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    final = stream.response
    assert final.choices[0].message.content == text and text
    assert final.usage.completion_tokens >= 1  # from llama.cpp's usage chunk (include_usage sent)
    assert final.route.usage_estimated is False
    assert final.route.attempts[0].ttft_s is not None and final.route.attempts[0].ttft_s > 0


def test_cached_tokens_reported_on_repeat(client):
    long = [{"role": "user", "content": "Repeat after me: " + "the quick brown fox " * 30}]
    client.chat.completions.create(model="small", messages=long, max_tokens=2)
    again = client.chat.completions.create(model="small", messages=long, max_tokens=2)
    assert again.usage.prompt_tokens_details.cached_tokens > 0


def test_context_length_error_is_typed(client):
    with pytest.raises(ContextLengthError) as info:
        client.chat.completions.create(model="small", messages=[{"role": "user", "content": "word " * 5000}], max_tokens=4)
    assert info.value.status == 400 and info.value.deployment == f"local:{MODEL_ALIAS}"
    assert "context" in str(info.value)


def test_refused_connection_names_deployment():
    with Client(config=llama_config("http://127.0.0.1:9/v1")) as c:
        with pytest.raises(APIConnectionError) as info:
            c.chat.completions.create(model="small", messages=MESSAGES)
    assert info.value.deployment == f"local:{MODEL_ALIAS}" and "refused" in str(info.value).lower()


def test_bad_arguments_are_typed(client):
    with pytest.raises(InvalidRequestError, match="messages"):
        client.chat.completions.create(model="small", messages=[])
    with pytest.raises(InvalidRequestError, match=r"messages\[0\].role"):
        client.chat.completions.create(model="small", messages=[{"role": "bot", "content": "x"}])
    with pytest.raises(InvalidRequestError, match="metadata"):
        client.chat.completions.create(model="small", messages=MESSAGES, metadata={"n": 1})
    with pytest.raises(RoutingError, match="'medium' is not a tier"):
        client.chat.completions.create(model="medium", messages=MESSAGES)
    with pytest.raises(RoutingError, match="unknown provider 'nope'"):
        client.chat.completions.create(model="nope:model", messages=MESSAGES)


def test_direct_deployment_id(client):
    resp = client.chat.completions.create(model=f"local:{MODEL_ALIAS}", messages=MESSAGES, max_tokens=2)
    assert resp.route.deployment == f"local:{MODEL_ALIAS}"


@pytest.mark.parametrize("transport", ["httpx", "aiohttp"])
def test_async_plain_and_stream(llama_server, transport):
    async def main():
        async with AsyncClient(config=llama_config(llama_server.base_url), transport=transport) as c:
            plain, stream = await asyncio.gather(
                c.chat.completions.create(model="small", messages=MESSAGES, max_tokens=4),
                c.chat.completions.create(model="large", messages=MESSAGES, max_tokens=4, stream=True),
            )
            parts = []
            async with stream:
                async for chunk in stream:
                    if chunk.choices:
                        parts.append(chunk.choices[0].delta.content or "")
            return plain, stream.response, "".join(parts)

    plain, final, text = asyncio.run(main())
    assert plain.usage.completion_tokens > 0 and not plain.route.usage_estimated
    assert final.choices[0].message.content == text
    assert final.route.tier == "large" and not final.route.usage_estimated


def test_async_connection_refused(llama_server):
    async def main():
        async with AsyncClient(config=llama_config("http://127.0.0.1:9/v1")) as c:
            await c.chat.completions.create(model="small", messages=MESSAGES, stream=True)

    with pytest.raises(APIConnectionError):
        asyncio.run(main())


def test_callable_ledger_sink_gets_every_attempt(llama_server):
    records = []
    with Client(config=llama_config(llama_server.base_url), ledger=records.append) as c:
        c.chat.completions.create(model="small", messages=MESSAGES, max_tokens=2, feature="kw")
        with pytest.raises(ContextLengthError):
            c.chat.completions.create(model="small", messages=[{"role": "user", "content": "word " * 5000}],
                                      max_tokens=2, feature="long")
    # llama.cpp closes keep-alive connections after a few requests: a request that met a closed one is
    # resent at once and its row says so (APIConnectionError, nothing billed); the calls' own rows follow.
    resent = [r for r in records if r.error_type == "APIConnectionError"]
    assert all(r.cost == 0 and r.output_tokens == 0 for r in resent)
    records = [r for r in records if r not in resent]
    assert [(r.feature, r.status) for r in records] == [("kw", "ok"), ("long", "error")]
    assert records[0].output_tokens == 2 and records[0].cost is not None and records[0].cost > 0
    assert records[1].error_type == "ContextLengthError"


@pytest.mark.parametrize("transport", ["httpx", "aiohttp"])
def test_llamacpp_keepalive_closes_cost_no_failures(llama_server, transport):
    """llama.cpp closes keep-alive connections after a few requests: resent at once, visible as an
    attempt (the server saw it), never counted by the breaker (a healthy server recycling connections)."""

    async def main():
        async with AsyncClient(config=llama_config(llama_server.base_url), transport=transport) as c:
            routes = []
            for _ in range(12):
                stream = await c.chat.completions.create(model="small", messages=MESSAGES, max_tokens=1, stream=True)
                async with stream:
                    async for _ in stream:
                        pass
                routes.append(stream.response.route)
            return routes, c.health()

    routes, health = asyncio.run(main())
    for route in routes:
        *dropped, last = route.attempts
        assert last.status == "ok" and len(dropped) <= 1
        assert all(a.error.code == "connection_dropped_before_reply" for a in dropped)
    assert health[f"local:{MODEL_ALIAS}"].failure_rate == 0
