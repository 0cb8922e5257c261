"""Configs for the drop-in suite: the programs in this folder are written as for openai-python and
differ from it only in their import line and in how the client is configured (a config instead of
`api_key=`/`base_url=`). Every server is on 127.0.0.1: the real llama.cpp server (`llama_server`)
or the loopback OpenAI server (`openai_server`), which answers wrong keys with 401 and unknown models
with 404 as the platform does, and takes scripted replies (429 with Retry-After, 500, ...)."""

from __future__ import annotations

from typing import Any

from tests.servers.llamacpp import MODEL_ALIAS, llama_config

KEY = "sk-test-openai"  # the loopback server's key (a test value, never a real one)
MODEL = "gpt-4o-mini"


def llama(server: Any) -> dict[str, Any]:
    """The real llama.cpp server as tier "small" (its own model id also works: `local:<alias>`)."""
    return llama_config(server.base_url)


LLAMA_MODEL = f"local:{MODEL_ALIAS}"


def loopback(server: Any, *, providers: dict[str, dict[str, Any]] | None = None, tier: list[str] | None = None,
             resilience: dict[str, Any] | None = None) -> dict[str, Any]:
    """Tier "chat" on the loopback OpenAI server: provider "openai" with the right key by default;
    `providers` adds providers (name -> keys over kind/base_url/api_key) and `tier` lists the tier's
    deployments. No retries inside a call unless `resilience` says so: the programs do their own."""
    provs = {"openai": {"kind": "openai-compatible", "base_url": server.base_url, "api_key": KEY}}
    for name, keys in (providers or {}).items():
        provs[name] = {"kind": "openai-compatible", "base_url": server.base_url, "api_key": KEY, **keys}
    return {
        "providers": provs,
        "tiers": {"chat": {"deployments": tier or [f"openai:{MODEL}"]}},
        "resilience": {"max_retries": 0, **(resilience or {})},
        "pricing": {f"{name}:*": {"input_per_million": 0, "output_per_million": 0} for name in provs},
        "ledger": {"sink": "memory"},
    }
