"""Shared helpers for the per-platform client tests: a one-deployment config, stream draining, and the
checks every error must pass (names the deployment, never shows the key).

The tests drive llmroute's public `Client` / `AsyncClient` over real loopback sockets to the servers
in tests/servers; nothing here mocks llmroute's HTTP layer.
"""

from __future__ import annotations

import asyncio
from typing import Any, Iterable

import pytest

from llmroute import AsyncClient, Client
from llmroute.accounting.tokens import count_message_tokens, count_text_tokens

__all__ = [
    "MESSAGES", "TIER", "NO_RETRIES", "make_config", "make_client", "drain", "adrain",
    "assert_clean_error", "expected_estimate", "call_error", "run", "with_async_client",
]

# Four whitespace words: the loopback servers report prompt_tokens = 4 for it.
MESSAGES = [{"role": "user", "content": "please say hello there"}]
SERVER_PROMPT_TOKENS = 4
TIER = "t"
# One attempt per call, no breaker memory: each test sees the platform's own answer.
NO_RETRIES = {"max_retries": 0, "consecutive_failures": 10_000, "min_calls": 10_000, "open_on_retry_after": False}


def make_config(kind: str, base_url: str, model: str, *, api_key: str | None = None, name: str | None = None,
                deployment: dict[str, Any] | None = None, **provider: Any) -> dict[str, Any]:
    """A config with one provider and one tier `t` holding one deployment of `model`."""
    name = name or kind.replace("-", "")
    prov: dict[str, Any] = {"kind": kind, "base_url": base_url, **provider}
    if api_key is not None:
        prov["api_key"] = api_key
    dep: dict[str, Any] = {"id": f"{name}:{model}", **(deployment or {})}
    # Pricing is not under test here: unpriced test models run with cost None instead of failing the load.
    return {"providers": {name: prov}, "tiers": {TIER: {"deployments": [dep]}}, "resilience": dict(NO_RETRIES),
            "pricing": {"strict": False}}


def make_client(*args: Any, **kwargs: Any) -> Client:
    return Client(config=make_config(*args, **kwargs))


def drain(stream: Any) -> tuple[list[Any], str, str]:
    """Read a stream to its end: (chunks, content text, reasoning text) as the caller saw them."""
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    reasoning = "".join(c.choices[0].delta.reasoning_content or "" for c in chunks if c.choices)
    return chunks, text, reasoning


async def adrain(stream: Any) -> tuple[list[Any], str, str]:
    chunks = [c async for c in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    reasoning = "".join(c.choices[0].delta.reasoning_content or "" for c in chunks if c.choices)
    return chunks, text, reasoning


def assert_clean_error(err: BaseException, deployment: str, secrets: Iterable[str] = ()) -> None:
    """The error names the deployment and holds no key in its text, repr or attributes."""
    assert getattr(err, "deployment", None) == deployment
    assert deployment in str(err)
    texts = [str(err), repr(err), str(getattr(err, "provider_message", "") or ""), str(err.args)]
    for secret in secrets:
        for text in texts:
            assert secret not in text, f"key leaked into {text!r}"


def expected_estimate(text: str, reasoning: str = "", messages: list[dict[str, Any]] = MESSAGES) -> tuple[int, int]:
    """(prompt, completion) tokens as llmroute must estimate them with tiktoken when usage is missing."""
    return count_message_tokens(messages), count_text_tokens(text) + count_text_tokens(reasoning)


def call_error(client: Client, cls: type, *, stream: bool = False, model: str = TIER,
               messages: list[dict[str, Any]] = MESSAGES, **kwargs: Any) -> Any:
    """Make a call that must fail with exactly `cls` (not a subclass or a parent); return the error."""
    with pytest.raises(cls) as info:
        out = client.chat.completions.create(model=model, messages=messages, stream=stream, **kwargs)
        if stream:
            drain(out)
    assert type(info.value) is cls, f"expected {cls.__name__}, got {type(info.value).__name__}: {info.value}"
    return info.value


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def with_async_client(config: dict[str, Any], fn: Any) -> Any:
    """Run `fn(client)` inside an `AsyncClient` that is closed afterwards."""
    async with AsyncClient(config=config) as client:
        return await fn(client)
