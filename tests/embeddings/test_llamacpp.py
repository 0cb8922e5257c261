"""Embeddings against the real llama.cpp server (xllamacpp, Gemma 3 270M) in embedding mode."""

from __future__ import annotations

import asyncio
import math

import pytest

import llmroute as L
from llmroute.accounting.ledger import MemorySink
from tests.servers.llamacpp import MODEL_ALIAS, start_llama_server


@pytest.fixture(scope="module")
def llama_embed():
    server = start_llama_server(embedding=True, parallel=1)
    try:
        yield server
    finally:
        server.stop()


def _config(base_url: str, *, before: str | None = None) -> dict:
    providers = {"local": {"kind": "llamacpp", "base_url": base_url}}
    deployments = [f"local:{MODEL_ALIAS}"]
    if before is not None:  # a deployment that refuses connections, tried first
        providers["dead"] = {"kind": "llamacpp", "base_url": before, "connect_timeout_s": 1}
        deployments.insert(0, f"dead:{MODEL_ALIAS}")
    price = {"input_per_million": 0.01, "output_per_million": 0, "currency": "USD"}
    return {
        "providers": providers,
        "tiers": {"embed": {"kind": "embedding", "deployments": deployments}},
        "resilience": {"max_retries": 0},
        "pricing": {f"{name}:*": dict(price) for name in providers},
    }


def _cosine(a, b) -> float:
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def test_real_llamacpp_embeddings_sync_and_async(llama_embed):
    texts = ["the cat sat on the mat", "a cat is sitting on a mat", "quarterly revenue grew by ten percent"]
    sink = MemorySink()
    with L.Client(_config(llama_embed.base_url), ledger=sink) as client:
        resp = client.embeddings.create(model="embed", input=texts, feature="rag")
        again = client.embeddings.create(model="embed", input=texts[0])
    vectors = [d.embedding for d in resp.data]
    assert len(vectors) == 3 and len({len(v) for v in vectors}) == 1 and len(vectors[0]) > 100
    assert again.data[0].embedding == pytest.approx(vectors[0], abs=1e-4)  # deterministic
    # Pooled vectors of a real model: the paraphrase is closer than the unrelated sentence.
    assert _cosine(vectors[0], vectors[1]) > _cosine(vectors[0], vectors[2])
    assert resp.usage.prompt_tokens > 0 and resp.route.usage_estimated is False  # llama.cpp reports usage
    assert sink.records[0].input_tokens == resp.usage.prompt_tokens and sink.records[0].feature == "rag"
    assert resp.cost.amount == sink.records[0].cost and resp.cost.amount > 0

    async def main():
        async with L.AsyncClient(_config(llama_embed.base_url)) as client:
            return await client.embeddings.create(model="embed", input=texts[:2])

    resp_async = asyncio.run(main())
    for got, want in zip([d.embedding for d in resp_async.data], vectors[:2]):
        assert got == pytest.approx(want, abs=1e-4)


def test_real_llamacpp_failover_from_a_dead_server_and_model_list(llama_embed):
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    with L.Client(_config(llama_embed.base_url, before=dead)) as client:
        resp = client.embeddings.create(model="embed", input="hello")
        listed = client.models.list()
    assert [a.status for a in resp.route.attempts] == ["error", "ok"]
    assert resp.route.attempts[0].error_type == "APIConnectionError"
    assert f"local:{MODEL_ALIAS}" in {m.id for m in listed} and isinstance(listed.errors["dead"], L.APIConnectionError)
