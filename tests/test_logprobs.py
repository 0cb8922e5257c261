"""Typed log probabilities (`ChoiceLogprobs`), plain and assembled from streams.

Over real loopback sockets to the platform servers in tests/servers (each sends logprobs in the shape
its platform documents, docs/platforms.md §11.15), and to the real llama.cpp server.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import llmroute as L
from llmroute.providers.base import StreamAssembler
from llmroute.providers.logprobs import logprobs_from_wire
from llmroute.types import ChatCompletionChunk, Usage
from tests.providers.helpers import MESSAGES, TIER, make_config
from tests.servers.script import Reply
from tests.servers.llamacpp import llama_config

# platform -> (kind, model, api key, a plain logprobs call is read as a stream)
PLATFORMS: dict[str, tuple[str, str, str | None, bool]] = {
    "vllm": ("vllm", "Qwen/Qwen2.5-7B-Instruct", None, True),
    "sglang": ("sglang", "Qwen/Qwen2.5-7B-Instruct", None, True),
    "tgi": ("tgi", "tgi", None, True),
    "fireworks": ("fireworks", "accounts/fireworks/models/llama-v3p1-8b-instruct", "fw-test-key", True),
    "together": ("together", "meta-llama/Llama-3.3-70B-Instruct-Turbo", "together-test-key", False),
    "openai": ("openai-compatible", "gpt-4o-mini", "sk-test-openai", False),
}


def _expected(pieces: list[str], top: int, with_bytes: bool) -> list[dict[str, Any]]:
    """What the loopback servers send (tests/servers/openai_compat.py: token_logprobs)."""
    out = []
    for i, text in enumerate(pieces):
        logprob = round(-0.1 * (i + 1), 6)
        alternatives = [(text, logprob)] + [(f"alt{k}", round(logprob - k, 6)) for k in range(1, top)]
        out.append({
            "token": text, "logprob": logprob, "bytes": list(text.encode()) if with_bytes else None,
            "top_logprobs": [{"token": t, "logprob": p, "bytes": list(t.encode()) if with_bytes else None}
                             for t, p in alternatives[:top]],
        })
    return out


def _entries(logprobs: L.ChoiceLogprobs | None) -> list[dict[str, Any]]:
    assert isinstance(logprobs, L.ChoiceLogprobs)
    assert logprobs.content is not None
    assert all(isinstance(e, L.ChatCompletionTokenLogprob) for e in logprobs.content)
    assert all(isinstance(t, L.TopLogprob) for e in logprobs.content for t in e.top_logprobs)
    return [e.model_dump(include={"token", "logprob", "bytes", "top_logprobs"}) for e in logprobs.content]


def _server_and_config(request: pytest.FixtureRequest, platform: str) -> tuple[Any, dict[str, Any]]:
    server = request.getfixturevalue(f"{platform}_server")
    kind, model, key, _ = PLATFORMS[platform]
    model = model if model in server.models else next(iter(server.models))
    return server, make_config(kind, server.base_url, model, api_key=key)


def _pieces(server: Any) -> list[str]:
    return server.default_pieces()


@pytest.mark.parametrize("platform", sorted(PLATFORMS))
def test_plain_call_has_typed_logprobs_read_as_a_stream_where_the_platform_streams_them(request, platform):
    server, config = _server_and_config(request, platform)
    with L.Client(config=config) as client:
        resp = client.chat.completions.create(model=TIER, messages=MESSAGES, logprobs=True, top_logprobs=2)
    sent = server.last_request.json
    assert (sent.get("stream") is True) is PLATFORMS[platform][3]
    pieces = _pieces(server)
    assert resp.choices[0].message.content == "".join(pieces)
    got = _entries(resp.choices[0].logprobs)
    if platform == "together":  # the legacy {tokens, token_logprobs, top_logprobs}: no bytes
        assert got == _expected(pieces, 2, with_bytes=False)
    else:
        assert got == _expected(pieces, 2, with_bytes=platform != "tgi")
    assert resp.choices[0].logprobs.refusal is None
    assert resp.model_dump()["choices"][0]["logprobs"]["content"][0]["token"] == pieces[0]


@pytest.mark.parametrize("platform", ["vllm", "fireworks", "tgi", "together"])
def test_streamed_chunks_carry_typed_logprobs_and_the_final_completion_joins_them(request, platform):
    server, config = _server_and_config(request, platform)
    with L.Client(config=config) as client:
        with client.chat.completions.create(model=TIER, messages=MESSAGES, logprobs=True, top_logprobs=3,
                                            stream=True) as stream:
            chunks = list(stream)
        final = stream.response
    pieces = _pieces(server)
    per_chunk = [c.choices[0].logprobs for c in chunks if c.choices and c.choices[0].logprobs is not None]
    assert len(per_chunk) == len(pieces)
    assert all(isinstance(lp, L.ChoiceLogprobs) and len(lp.content or []) == 1 for lp in per_chunk)
    joined = [e for lp in per_chunk for e in _entries(lp)]
    assert _entries(final.choices[0].logprobs) == joined
    if platform == "together":  # a bare number per chunk: the chunk's text is the token
        assert joined == [{**e, "bytes": None, "top_logprobs": []} for e in _expected(pieces, 3, False)]
    else:
        assert joined == _expected(pieces, 3, with_bytes=platform != "tgi")


def test_async_plain_and_stream_have_the_same_logprobs(vllm_server):
    config = make_config("vllm", vllm_server.base_url, "Qwen/Qwen2.5-7B-Instruct")

    async def main() -> tuple[Any, Any, list[Any]]:
        async with L.AsyncClient(config=config) as client:
            plain = await client.chat.completions.create(model=TIER, messages=MESSAGES, logprobs=True, top_logprobs=2)
            stream = await client.chat.completions.create(model=TIER, messages=MESSAGES, logprobs=True,
                                                          top_logprobs=2, stream=True)
            chunks = [c async for c in stream]
            return plain, stream.response, chunks

    plain, final, chunks = asyncio.run(main())
    assert vllm_server.requests[0].json["stream"] is True  # the plain call was read as a stream
    expected = _expected(vllm_server.default_pieces(), 2, with_bytes=True)
    assert _entries(plain.choices[0].logprobs) == expected == _entries(final.choices[0].logprobs)
    assert sum(len(c.choices[0].logprobs.content) for c in chunks if c.choices and c.choices[0].logprobs) == 3


def test_fireworks_legacy_shape_is_rewritten(fireworks_server):
    # An integer `logprobs` (sent through extra_body) gets Fireworks' legacy completions shape.
    config = make_config("fireworks", fireworks_server.base_url, "accounts/fireworks/models/llama-v3p1-8b-instruct",
                         api_key="fw-test-key")
    with L.Client(config=config) as client:
        resp = client.chat.completions.create(model=TIER, messages=MESSAGES, extra_body={"logprobs": 2, "top_logprobs": 2})
    assert fireworks_server.last_request.json["logprobs"] == 2
    expected = _expected(fireworks_server.default_pieces(), 2, with_bytes=False)
    got = _entries(resp.choices[0].logprobs)
    assert got == [{**e, "top_logprobs": [{**t, "bytes": None} for t in e["top_logprobs"]]} for e in expected]


def test_without_logprobs_asked_there_are_none(vllm_server):
    with L.Client(config=make_config("vllm", vllm_server.base_url, "Qwen/Qwen2.5-7B-Instruct")) as client:
        resp = client.chat.completions.create(model=TIER, messages=MESSAGES)
    assert resp.choices[0].logprobs is None


# -- the assembler and the wire shapes, without sockets ------------------------------------------------

def _chunk(index: int, content: str | None, logprobs: Any, refusal: str | None = None) -> ChatCompletionChunk:
    delta: dict[str, Any] = {"content": content}
    if refusal is not None:
        delta = {"refusal": refusal}
    return ChatCompletionChunk.model_validate(
        {"id": "c", "choices": [{"index": index, "delta": delta, "logprobs": logprobs}]})


def _entry(token: str, logprob: float) -> dict[str, Any]:
    return {"token": token, "logprob": logprob, "bytes": list(token.encode()), "top_logprobs": []}


def test_assembler_joins_content_and_refusal_logprobs_per_choice():
    assembler = StreamAssembler()
    assembler.add(_chunk(0, "Hel", {"content": [_entry("Hel", -0.1)]}))
    assembler.add(_chunk(1, "No", None, refusal="No"))
    assembler.add(_chunk(1, None, {"content": None, "refusal": [_entry("No", -0.3)]}))
    assembler.add(_chunk(0, "lo", {"content": [_entry("lo", -0.2)], "refusal": None}))
    assembler.add(_chunk(0, None, None))  # a chunk without logprobs changes nothing
    done = assembler.completion(Usage(), "m")
    first, second = done.choices
    assert [e.token for e in first.logprobs.content] == ["Hel", "lo"] and first.logprobs.refusal is None
    assert first.logprobs.content[1].logprob == -0.2 and first.logprobs.content[0].bytes == [72, 101, 108]
    assert second.logprobs.content == [] and [e.token for e in second.logprobs.refusal] == ["No"]
    empty = StreamAssembler()
    empty.add(_chunk(0, "x", None))
    assert empty.completion(Usage(), "m").choices[0].logprobs is None


def test_wire_shapes():
    openai = {"content": [_entry("a", -1.0)], "refusal": None}
    assert logprobs_from_wire(openai) is openai
    assert logprobs_from_wire({"tokens": ["a", "b"], "token_logprobs": [-1.0, -2.0],
                               "top_logprobs": [{"a": -1.0, "c": -3.0}, None]}) == {
        "content": [{"token": "a", "logprob": -1.0, "bytes": None,
                     "top_logprobs": [{"token": "a", "logprob": -1.0}, {"token": "c", "logprob": -3.0}]},
                    {"token": "b", "logprob": -2.0, "bytes": None, "top_logprobs": []}],
        "refusal": None}
    assert logprobs_from_wire(-0.5, "tok") == {
        "content": [{"token": "tok", "logprob": -0.5, "bytes": None, "top_logprobs": []}], "refusal": None}
    assert logprobs_from_wire(-0.5) is None  # a number without its token's text means nothing
    assert logprobs_from_wire(True, "x") is None and logprobs_from_wire("junk") is None
    assert logprobs_from_wire({"tokens": ["a"], "token_logprobs": ["bad"]}) is None


# -- the real llama.cpp server ---------------------------------------------------------------------------

LLAMA_MESSAGES = [{"role": "user", "content": "Say hi"}]


def _check_llama(logprobs: Any, content: str, top: int) -> list[tuple[str, float]]:
    entries = logprobs.content
    assert entries and "".join(e.token for e in entries) == content
    assert all(len(e.top_logprobs) == top and e.logprob <= 0 for e in entries)
    assert all(bytes(e.bytes or b"") == e.token.encode() for e in entries)
    return [(e.token, e.logprob) for e in entries]


def test_llamacpp_plain_and_stream_logprobs_sync(llama_server):
    with L.Client(config=llama_config(llama_server.base_url)) as client:
        plain = client.chat.completions.create(model="small", messages=LLAMA_MESSAGES, max_tokens=4, temperature=0,
                                               logprobs=True, top_logprobs=2)
        with client.chat.completions.create(model="small", messages=LLAMA_MESSAGES, max_tokens=4, temperature=0,
                                            logprobs=True, top_logprobs=2, stream=True) as stream:
            chunks = list(stream)
    assert plain.route.attempts[0].ttft_s is not None  # read as a stream: a first token was timed
    tokens = _check_llama(plain.choices[0].logprobs, plain.choices[0].message.content, 2)
    final = stream.response
    streamed = _check_llama(final.choices[0].logprobs, final.choices[0].message.content, 2)
    from_chunks = [(e.token, e.logprob) for c in chunks if c.choices and c.choices[0].logprobs
                   for e in c.choices[0].logprobs.content or ()]
    assert streamed == from_chunks
    assert [t for t, _ in streamed] == [t for t, _ in tokens]  # temperature 0: the same tokens


def test_llamacpp_plain_and_stream_logprobs_async(llama_server):
    async def main() -> tuple[Any, Any]:
        async with L.AsyncClient(config=llama_config(llama_server.base_url)) as client:
            plain = await client.chat.completions.create(model="small", messages=LLAMA_MESSAGES, max_tokens=4,
                                                         temperature=0, logprobs=True, top_logprobs=3)
            stream = await client.chat.completions.create(model="small", messages=LLAMA_MESSAGES, max_tokens=4,
                                                          temperature=0, logprobs=True, top_logprobs=3, stream=True)
            async for _ in stream:
                pass
            return plain, stream.response

    plain, final = asyncio.run(main())
    tokens = _check_llama(plain.choices[0].logprobs, plain.choices[0].message.content, 3)
    streamed = _check_llama(final.choices[0].logprobs, final.choices[0].message.content, 3)
    assert [t for t, _ in streamed] == [t for t, _ in tokens]


# -- recovery: one call, one way of reading --------------------------------------------------------------

def _two_deployments(first: Any, second: Any, kinds: tuple[str, str], models: tuple[str, str]) -> dict[str, Any]:
    return {
        "providers": {"a": {"kind": kinds[0], "base_url": first.base_url, "api_key": first.api_key},
                      "b": {"kind": kinds[1], "base_url": second.base_url, "api_key": second.api_key}},
        "tiers": {TIER: {"deployments": [f"a:{models[0]}", f"b:{models[1]}"]}},
        "resilience": {"max_retries": 0}, "pricing": {"strict": False},
    }


def test_a_cut_answer_finished_elsewhere_has_the_logprobs_of_both_parts(vllm_server, sglang_server):
    model = "Qwen/Qwen2.5-7B-Instruct"
    vllm_server.push(Reply(pieces=["one", " two", " three", " four"], reset_after_chunks=2))
    sglang_server.push(Reply(pieces=[" three", " four"]))
    with L.Client(config=_two_deployments(vllm_server, sglang_server, ("vllm", "sglang"), (model, model))) as client:
        resp = client.chat.completions.create(model=TIER, messages=MESSAGES, logprobs=True, top_logprobs=1)
    assert [a.status for a in resp.route.attempts] == ["interrupted", "ok"] and resp.route.recovery == "continued"
    tokens = [e.token for e in resp.choices[0].logprobs.content]
    assert tokens == ["one", " two", " three", " four"]  # two from vLLM, then two from SGLang
    assert "".join(tokens) == resp.choices[0].message.content
    assert [e.logprob for e in resp.choices[0].logprobs.content] == [-0.1, -0.2, -0.1, -0.2]


def test_a_tier_with_a_deployment_that_does_not_stream_logprobs_reads_every_attempt_plain(vllm_server,
                                                                                           together_server):
    vllm_server.push(Reply(status=503))
    models = ("Qwen/Qwen2.5-7B-Instruct", "meta-llama/Llama-3.3-70B-Instruct-Turbo")
    with L.Client(config=_two_deployments(vllm_server, together_server, ("vllm", "together"), models)) as client:
        resp = client.chat.completions.create(model=TIER, messages=MESSAGES, logprobs=True)
    assert "stream" not in vllm_server.last_request.json and "stream" not in together_server.last_request.json
    assert [a.status for a in resp.route.attempts] == ["error", "ok"]
    assert "".join(e.token for e in resp.choices[0].logprobs.content) == resp.choices[0].message.content


def test_dashscope_native_plain_answer_keeps_openai_shaped_logprobs(bailian_server):
    # The native protocol's logprobs shape is unconfirmed (docs/platforms.md §11.15): one in OpenAI's
    # shape is kept, anything else dropped.
    entry = {"token": "Hi", "bytes": [72, 105], "logprob": -0.5, "top_logprobs": [{"token": "Hi", "logprob": -0.5}]}
    body = {"request_id": "r1", "usage": {"input_tokens": 4, "output_tokens": 1},
            "output": {"choices": [{"message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop",
                                    "logprobs": {"content": [entry]}}]}}
    bailian_server.push(Reply(body=body), Reply(body={**body, "output": {"choices": [
        {**body["output"]["choices"][0], "logprobs": "unreadable"}]}}))
    config = make_config("bailian", bailian_server.native_url, "qwen-plus", api_key=bailian_server.default_api_key,
                         protocol="native")
    with L.Client(config=config) as client:
        resp = client.chat.completions.create(model=TIER, messages=MESSAGES, logprobs=True)
        other = client.chat.completions.create(model=TIER, messages=MESSAGES, logprobs=True)
    assert bailian_server.last_request.json["parameters"]["logprobs"] is True
    assert _entries(resp.choices[0].logprobs) == [{**entry, "top_logprobs": [{"token": "Hi", "logprob": -0.5,
                                                                               "bytes": None}]}]
    assert other.choices[0].message.content == "Hi" and other.choices[0].logprobs is None
