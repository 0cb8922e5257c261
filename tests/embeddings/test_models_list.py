"""`client.models.list()` over the loopback servers: every platform's list shape, ids usable in
`create(model=...)`, and a provider that cannot be listed named in `.errors` without hiding the rest."""

from __future__ import annotations

import asyncio

import pytest

import llmroute as L
from tests.embeddings.helpers import PLATFORMS, embed_config
from tests.servers.fault import status
from tests.servers.script import Reply


def _expected_ids(server) -> set[str]:
    return {f"p:{m}" for m in [*server.models, *server.embedding_models]}


def test_every_platform_lists_chat_and_embedding_models(platform):
    name, server = platform
    with L.Client(embed_config(name, server)) as client:
        listed = client.models.list()
    assert {m.id for m in listed} == _expected_ids(server) and len(listed) == len(_expected_ids(server))
    assert listed.object == "list" and listed.errors == {}
    model = PLATFORMS[name][2]
    entry = next(m for m in listed.data if m.model == model)
    assert entry.id == f"p:{model}" and entry.provider == "p" and entry.object == "model"
    assert server.last_request.method == "GET" and server.last_request.path.endswith("/models")
    if name == "bailian-native":  # DashScope's native root has no list: compatible mode's, same key
        assert server.last_request.path == "/compatible-mode/v1/models"


def test_together_bare_array_keeps_type_and_context_length(together_server):
    with L.Client(embed_config("together", together_server)) as client:
        listed = client.models.list()
    embed = next(m for m in listed.data if m.model == "BAAI/bge-large-en-v1.5")
    assert embed.type == "embedding" and embed.context_length == 512 and embed.owned_by == "BAAI"


def test_a_listed_id_can_be_called(vllm_server):
    with L.Client(embed_config("vllm", vllm_server)) as client:
        ids = [m.id for m in client.models.list()]
        resp = client.embeddings.create(model="p:BAAI/bge-m3", input="x")
    assert "p:BAAI/bge-m3" in ids and resp.route.deployment == "p:BAAI/bge-m3"


def _two_providers(fault_server, vllm_server) -> dict:
    return {
        "providers": {"f": {"kind": "openai-compatible", "base_url": fault_server.base_url},
                      "v": {"kind": "vllm", "base_url": vllm_server.base_url}},
        "tiers": {"embed": {"kind": "embedding", "deployments": ["v:BAAI/bge-m3"]}},
        "pricing": {"strict": False},
    }


def test_a_failing_provider_is_named_and_the_others_still_listed(fault_server, vllm_server):
    fault_server.push(status(503))
    with L.Client(_two_providers(fault_server, vllm_server)) as client:
        listed = client.models.list()
    assert {m.provider for m in listed} == {"v"}
    assert isinstance(listed.errors["f"], L.OverloadedError)


def test_async_lists_concurrently_and_raises_when_every_provider_fails(fault_server, vllm_server):
    async def main(push):
        push()
        async with L.AsyncClient(_two_providers(fault_server, vllm_server)) as client:
            return await client.models.list()

    listed = asyncio.run(main(lambda: None))
    assert {m.provider for m in listed} == {"f", "v"}
    with pytest.raises(L.APIConnectionError, match="no provider could list.*f: ServerError.*v: OverloadedError"):
        asyncio.run(main(lambda: (fault_server.push(status(500)), vllm_server.push(status(503)))))


def test_one_provider_raises_its_own_typed_error(together_server):
    together_server.push(Reply(error="auth"))
    with L.Client(embed_config("together", together_server)) as client:
        with pytest.raises(L.AuthenticationError) as info:
            client.models.list(provider="p")
        with pytest.raises(L.InvalidRequestError) as unknown:
            client.models.list(provider="nope")
    assert info.value.provider == "p" and together_server.api_key not in repr(info.value)
    assert unknown.value.field == "provider"


def test_retrieve_finds_a_listed_model_by_its_id_as_openai_python_does(vllm_server, fault_server):
    # openai-python's `client.models.retrieve(model)`: one model, or NotFoundError.
    with L.Client(_two_providers(fault_server, vllm_server)) as client:
        model = client.models.retrieve("v:BAAI/bge-m3")
        assert model.id == "v:BAAI/bge-m3" and model.provider == "v" and model.model == "BAAI/bge-m3"
        assert vllm_server.last_request.method == "GET" and vllm_server.last_request.path.endswith("/models")
        with pytest.raises(L.NotFoundError) as info:
            client.models.retrieve("v:no-such-model")
        assert "v:no-such-model" in str(info.value) and info.value.status == 404
        with pytest.raises(L.InvalidRequestError):
            client.models.retrieve("")
    # A one-server client (`base_url=`) takes the server's own ids, as its list gives them.
    prices = {"BAAI/bge-m3": {"input_per_million": 0, "output_per_million": 0}}
    with L.Client(base_url=vllm_server.base_url, api_key="sk-x", prices=prices) as client:
        assert client.models.retrieve("BAAI/bge-m3").id == "BAAI/bge-m3"


def test_async_retrieve(vllm_server, fault_server):
    async def main():
        async with L.AsyncClient(_two_providers(fault_server, vllm_server)) as client:
            found = await client.models.retrieve("v:BAAI/bge-m3")
            with pytest.raises(L.NotFoundError):
                await client.models.retrieve("nope")
            return found

    assert asyncio.run(main()).model == "BAAI/bge-m3"
