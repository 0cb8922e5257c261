"""Bad `create()` arguments: a typed error naming the argument, raised before anything is sent.

Every case runs against the loopback fault server, which counts the requests it receives: none may
arrive, and the memory ledger must stay empty (nothing was sent, nothing is billed)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import llmroute as L
from tests.resilience.client_helpers import MESSAGES, TIER, tier_config


class Unserialisable:
    pass


def _deep(levels: int) -> Any:
    value: Any = "x"
    for _ in range(levels):
        value = {"a": value}
    return value


USER = {"role": "user", "content": "hi"}

# (create() keyword arguments, the field the InvalidRequestError must name)
BAD: list[tuple[dict[str, Any], str]] = [
    ({"temperature": float("nan")}, "temperature"),
    ({"temperature": float("inf")}, "temperature"),
    ({"temperature": 3}, "temperature"),
    ({"temperature": "0.2"}, "temperature"),
    ({"top_p": -0.1}, "top_p"),
    ({"presence_penalty": float("-inf")}, "presence_penalty"),
    ({"timeout": float("inf")}, "timeout"),
    ({"timeout": float("nan")}, "timeout"),
    ({"timeout": 0}, "timeout"),
    ({"timeout": True}, "timeout"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": 2.5}, "max_tokens"),
    ({"n": True}, "n"),
    ({"seed": 2**70}, "seed"),
    ({"top_logprobs": 99}, "top_logprobs"),
    ({"logprobs": "yes"}, "logprobs"),
    ({"logit_bias": {"abc": 1}}, "logit_bias"),
    ({"logit_bias": {"50256": float("nan")}}, "logit_bias.50256"),
    ({"stop": 5}, "stop"),
    ({"stop": ["a", None]}, "stop"),
    ({"tools": {"type": "function"}}, "tools"),
    ({"tools": ["not a dict"]}, "tools[0]"),
    ({"tools": [{"type": "function", "function": {"parameters": {"x": float("nan")}}}]},
     "tools[0].function.parameters.x"),
    ({"tools": [{"type": "function"}]}, "tools[0].function"),
    ({"tools": [{"type": "function", "function": {"parameters": {"type": "object"}}}]}, "tools[0].function.name"),
    ({"tools": [{"type": "function", "function": {"name": ""}}]}, "tools[0].function.name"),
    ({"stream": True, "stream_options": {"include_usage": "yes"}}, "stream_options.include_usage"),
    ({"stream_options": {"include_usage": 1}}, "stream_options.include_usage"),
    ({"response_format": "json"}, "response_format"),
    ({"stream": "yes"}, "stream"),
    ({"user": "a\r\nb"}, "user"),
    ({"extra_body": {"x": Unserialisable()}}, "extra_body.x"),
    ({"extra_body": {"x": float("nan")}}, "extra_body.x"),
    ({"extra_body": {1: "x"}}, "extra_body"),
    ({"extra_body": _deep(200)}, "extra_body"),
    ({"extra_body": "x"}, "extra_body"),
    ({"extra_headers": {"X-Ok": "a\nb"}}, "extra_headers"),
    ({"extra_headers": {"X-Ok": "caf\u00e9 \u4e2d"}}, "extra_headers"),
    ({"extra_headers": {"Bad Name": "v"}}, "extra_headers"),
    ({"extra_headers": {"X-Num": 5}}, "extra_headers"),
    ({"extra_query": {"q": object()}}, "extra_query.q"),
    ({"extra_query": {"q": float("inf")}}, "extra_query.q"),
    ({"model": "t\r\nX-Injected: 1"}, "model"),
    ({"model": "a b"}, "model"),
    ({"model": "p:../../admin"}, "model"),
    ({"model": "p:a\\b"}, "model"),
    ({"model": "x" * 1000}, "model"),
    ({"model": ""}, "model"),
    ({"feature": "f" * 1_000_000}, "feature"),
    ({"feature": "a\nb"}, "feature"),
    ({"feature": 3}, "feature"),
    ({"metadata": {"k": "v" * 1_000_000}}, "metadata.k"),
    ({"metadata": {f"k{i}": "v" for i in range(100)}}, "metadata"),
    ({"metadata": {"k": 1}}, "metadata.k"),  # the key whose value is not a string
    ({"metadata": ["k"]}, "metadata"),
    ({"pool": "nope"}, "pool"),
    ({"messages": []}, "messages"),
    ({"messages": "hi"}, "messages"),
    ({"messages": [USER, "hi"]}, "messages[1]"),
    ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": ["hi"]}]}, "messages[0].content[0]"),
    ({"messages": [{"role": "user", "content": [{"text": "hi"}]}]}, "messages[0].content[0].type"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}, "messages[0].content[0].text"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
     "messages[0].content[0].image_url"),
    ({"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": "x"}]}]},
     "messages[0].content[0].input_audio"),
    ({"messages": [{"role": "user", "content": "hi", "name": "a\nb"}]}, "messages[0].name"),
    ({"messages": [{"role": "assistant", "content": None, "tool_calls": "x"}]}, "messages[0].tool_calls"),
    ({"messages": [{"role": "user", "content": "hi", "extra": _deep(500)}]}, "messages[0]"),
    ({"messages": [{"role": "user", "content": "hi", "x": float("nan")}]}, "messages[0].x"),
]


@pytest.fixture
def config(fault_server: Any) -> dict[str, Any]:
    return tier_config({"a": fault_server})


@pytest.mark.parametrize("kwargs,field", BAD, ids=[f"{i}-{f}" for i, (_, f) in enumerate(BAD)])
def test_bad_argument_is_named_before_any_io(config: dict[str, Any], fault_server: Any, kwargs: dict[str, Any],
                                             field: str) -> None:
    call = {"model": TIER, "messages": MESSAGES, **kwargs}
    with L.Client(config=config) as client:
        with pytest.raises(L.InvalidRequestError) as info:
            client.chat.completions.create(**call)
        # Nesting errors name the path down to the level that went too deep.
        exact = not (isinstance(kwargs.get("extra_body"), dict) or "extra" in str(kwargs.get("messages")))
        assert info.value.field == field if exact else info.value.field.startswith(field), str(info.value)
        assert str(info.value).startswith(info.value.field)
        assert client._engine.ledger.records == []
    assert fault_server.chat_requests() == []


def test_async_client_checks_the_same_way(config: dict[str, Any], fault_server: Any) -> None:
    async def main() -> None:
        async with L.AsyncClient(config=config) as client:
            for kwargs, field in BAD[:10]:
                with pytest.raises(L.InvalidRequestError) as info:
                    await client.chat.completions.create(model=TIER, messages=MESSAGES, **kwargs)
                assert info.value.field == field

    asyncio.run(main())
    assert fault_server.chat_requests() == []


@pytest.mark.parametrize("name", ["max_token", "temprature", "top_k", "stream_option"])
def test_unknown_keyword_is_a_type_error_like_the_openai_sdk(config: dict[str, Any], fault_server: Any,
                                                             name: str) -> None:
    with L.Client(config=config) as client:
        with pytest.raises(TypeError, match=name):
            client.chat.completions.create(model=TIER, messages=MESSAGES, **{name: 1})
    from llmroute._call import validate

    with pytest.raises(TypeError, match="extra_body"):
        validate.check_create_args({"model": TIER, "messages": MESSAGES, name: 1}, pools={"interactive"})
    assert fault_server.chat_requests() == []


def test_good_arguments_reach_the_platform(config: dict[str, Any], fault_server: Any) -> None:
    with L.Client(config=config) as client:
        client.chat.completions.create(
            model=TIER, messages=[{"role": "user", "content": [{"type": "text", "text": "hi"},
                                                               {"type": "image_url", "image_url": {"url": "data:,"}}]}],
            temperature=0.5, top_p=1, stop=["\n\n"], seed=7, logit_bias={50256: -100}, max_tokens=5,
            extra_body={"top_k": 3, "nested": _deep(20)}, extra_headers={"X-Trace": "abc"},
            extra_query={"api-version": "2024-10-01", "debug": True}, metadata={"team": "x"}, feature="f",
        )
    request = fault_server.chat_requests()[-1]
    assert request.json["top_k"] == 3 and request.json["temperature"] == 0.5
    assert request.json["logit_bias"] == {"50256": -100}
    assert request.headers.get("x-trace") == "abc"
    assert "api-version=2024-10-01" in request.query and "debug=true" in request.query
    for ours in ("feature", "metadata", "pool", "timeout", "extra_body", "extra_headers", "extra_query"):
        assert ours not in request.json


def test_bad_argument_never_touches_breaker_budget_or_slot(fault_server: Any) -> None:
    config = tier_config({"a": fault_server}, resilience={"max_concurrency": 1, "consecutive_failures": 1,
                                                          "min_calls": 1})
    with L.Client(config=config) as client:
        for kwargs, _ in BAD:
            with pytest.raises(L.InvalidRequestError):
                client.chat.completions.create(**{"model": TIER, "messages": MESSAGES, **kwargs})
        assert client.health()["a:m"].state == "closed"
        out = client.chat.completions.create(model=TIER, messages=MESSAGES)
        assert out.choices[0].message.content


def test_a_request_that_cannot_be_built_is_refused_before_sending(fault_server: Any) -> None:
    """A configured header httpx cannot encode: InvalidRequestError, nothing sent, nothing billed, slot back."""
    config = tier_config({"a": fault_server}, resilience={"max_concurrency": 1, "queue_timeout_s": 0},
                         providers={"a": {"headers": {"X-Team": "\u56e2\u961f"}}})
    with L.Client(config=config) as client:
        for _ in range(2):
            with pytest.raises(L.InvalidRequestError) as info:
                client.chat.completions.create(model=TIER, messages=MESSAGES)
            assert info.value.field in ("extra_headers", "request")  # caught when built, or by httpx
        assert client._engine.limits.in_flight("a:m") == 0
        assert all(not r.priced or r.cost == 0 for r in client._engine.ledger.records)
        assert all(r.input_tokens == 0 for r in client._engine.ledger.records)
    assert fault_server.chat_requests() == []
