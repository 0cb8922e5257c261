"""One embedding config per platform on the loopback servers, and what each platform's answer must be."""

from __future__ import annotations

from typing import Any

from tests.servers.embeddings import embedding_vector

TEXTS = ["the cat sat on the mat", "embeddings for retrieval"]
SERVER_TOKENS = 6 + 3  # whitespace words: what the loopback servers report as prompt_tokens
NO_RETRIES = {"max_retries": 0, "consecutive_failures": 10_000, "min_calls": 10_000, "open_on_retry_after": False}

# platform fixture -> (provider kind, protocol, embedding model, vector size, server sends usage)
PLATFORMS: dict[str, tuple[str, str, str, int, bool]] = {
    "together": ("together", "compatible", "BAAI/bge-large-en-v1.5", 1024, False),
    "fireworks": ("fireworks", "compatible", "nomic-ai/nomic-embed-text-v1.5", 768, True),
    "siliconflow": ("siliconflow", "compatible", "BAAI/bge-m3", 1024, True),
    "bailian": ("bailian", "compatible", "text-embedding-v4", 1024, True),
    "bailian-native": ("bailian", "native", "text-embedding-v4", 1024, True),
    "vllm": ("vllm", "compatible", "BAAI/bge-m3", 1024, True),
    "sglang": ("sglang", "compatible", "Alibaba-NLP/gte-Qwen2-1.5B-instruct", 1536, True),
    "tgi": ("tgi", "compatible", "BAAI/bge-small-en-v1.5", 384, True),
    "ollama": ("ollama", "compatible", "nomic-embed-text", 768, True),
    "openai": ("openai-compatible", "compatible", "text-embedding-3-small", 1536, True),
}
SERVER_OF = {"bailian-native": "bailian"}

INPUT_PRICE = 0.02  # per million input tokens, USD, set in each test config


def server_base_url(server: Any, protocol: str) -> str:
    return server.native_url if protocol == "native" else server.base_url


def embed_config(platform: str, server: Any, *, tier: str = "embed", ledger: str = "memory",
                 extra: dict[str, Any] | None = None) -> dict[str, Any]:
    kind, protocol, model, _, _ = PLATFORMS[platform]
    provider: dict[str, Any] = {"kind": kind, "base_url": server_base_url(server, protocol), "protocol": protocol}
    if server.api_key is not None:
        provider["api_key"] = server.api_key
    config: dict[str, Any] = {
        "providers": {"p": provider},
        "tiers": {tier: {"kind": "embedding", "deployments": [f"p:{model}"]}},
        "resilience": dict(NO_RETRIES),
        "pricing": {"p:*": {"input_per_million": INPUT_PRICE, "output_per_million": 0, "currency": "USD"}},
        "ledger": {"sink": ledger},
    }
    for key, value in (extra or {}).items():
        config[key] = value
    return config


def expected_vectors(platform: str, texts: list[str] = TEXTS, size: int | None = None) -> list[list[float]]:
    return [embedding_vector(t, size or PLATFORMS[platform][3]) for t in texts]
