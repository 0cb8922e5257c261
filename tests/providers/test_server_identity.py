"""Server identification (docs/failover.md, "Knowing what a server can do"): the sans-I/O reader on
each server's answers, and the background prober against the loopback servers and a closed port."""

from __future__ import annotations

import json
import socket

import pytest

import llmroute as L
from llmroute.config import Config
from llmroute._call.server_probe import ServerIdentities
from llmroute.providers.server_identity import identify, model_family
from tests.servers.llamacpp_wire import LlamaCppWireServer


def body(payload: object) -> bytes:
    return json.dumps(payload).encode()


@pytest.mark.parametrize("path, status, headers, payload, server", [
    ("models", 200, {}, {"data": [{"id": "q", "owned_by": "vllm"}]}, "vllm"),
    ("models", 200, {}, {"data": [{"id": "q", "owned_by": "sglang"}]}, "sglang"),
    ("models", 200, {}, {"data": [{"id": "q", "owned_by": "llamacpp"}]}, "llamacpp"),
    ("models", 200, {}, {"data": [{"id": "q", "owned_by": "library"}]}, "ollama"),
    ("models", 200, {}, {"data": [{"id": "q", "owned_by": "organization-owner"}]}, None),
    ("/info", 404, {"server": "llama.cpp"}, {"error": "File Not Found"}, "llamacpp"),
    ("/props", 200, {}, {"default_generation_settings": {}, "total_slots": 1}, "llamacpp"),
    ("/props", 200, {}, {"default_generation_settings": {}}, None),
    ("/info", 200, {}, {"model_id": "q", "max_total_tokens": 4096, "version": "3"}, "tgi"),
    ("/info", 200, {}, {"model_id": "q"}, None),
    ("/get_server_info", 200, {}, {"version": "0.5", "tp_size": 1}, "sglang"),
    ("/version", 200, {}, {"version": "0.11.0"}, "vllm"),
    ("/version", 200, {}, {"version": "0.11.0", "commit": "x"}, None),
    ("/version", 500, {}, {"version": "0.11.0"}, None),
    ("models", 200, {}, "not json", None),
])
def test_each_servers_own_answer_identifies_it_and_nothing_else_does(path, status, headers, payload, server):
    found = identify(path, status, headers, body(payload))
    assert (found.server if found else None) == server


def test_an_identified_server_maps_to_the_continuation_table():
    styles = {s: identify("models", 200, {}, body({"data": [{"id": "q", "owned_by": s}]})) for s in
              ("vllm", "sglang", "llamacpp")}
    assert {s: i.style for s, i in styles.items() if i} == {
        "vllm": "continue_final_message", "sglang": "continue_final_message", "llamacpp": "trailing_assistant"}
    tgi = identify("/info", 200, {}, body({"model_id": "q", "router": "text-generation-router"}))
    assert tgi is not None and tgi.server == "tgi" and tgi.style is None


@pytest.mark.parametrize("a, b, same", [
    ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b-instruct-awq", True),
    ("unsloth/gemma-3-270m-it-GGUF", "gemma-3-270m-it-Q8_0.gguf", True),
    ("llama3:8b", "llama3:70b", False),
    ("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B", False),
])
def test_model_family_ignores_quantisation_and_format_only(a, b, same):
    assert (model_family(a) == model_family(b)) is same


def provider(base_url: str, kind: str = "openai-compatible"):
    cfg = Config.from_dict({"providers": {"p": {"kind": kind, "base_url": base_url}},
                            "tiers": {"t": {"deployments": ["p:m"]}},
                            "pricing": {"p:*": {"input_per_million": 0, "output_per_million": 0}}})
    return cfg.providers["p"]


@pytest.mark.parametrize("platform, server", [("vllm", "vllm"), ("sglang", "sglang"), ("tgi", "tgi"),
                                               ("fault", None)])
def test_the_prober_identifies_each_loopback_server_over_a_socket(loopback_servers, platform, server):
    srv = loopback_servers.get(platform)
    srv.reset()
    identities = ServerIdentities()
    try:
        identities.want([provider(srv.base_url)])
        identities.wait(["p"], timeout_s=10.0)
        found = identities.known("p")
    finally:
        identities.close()
    assert found is not None and found.server == server, found
    assert srv.probes and srv.requests == []  # marked, kept apart from the calls, no chat request
    assert all(p.headers.get("x-llmroute-probe") == "identify" for p in srv.probes)


def test_the_loopback_llama_cpp_is_identified_by_its_server_header():
    srv = LlamaCppWireServer().start()
    identities = ServerIdentities()
    try:
        identities.want([provider(srv.base_url)])
        identities.wait(["p"], timeout_s=10.0)
        found = identities.known("p")
    finally:
        identities.close()
        srv.stop()
    assert found is not None and found.server == "llamacpp" and "Server" in found.evidence
    assert len(srv.probes) == 1  # the first answer told: nothing more was asked


def test_a_server_that_does_not_answer_is_not_identified_and_behaves_as_before():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again at once: connection refused
    identities = ServerIdentities()
    try:
        identities.want([provider(f"http://127.0.0.1:{port}/v1")])
        identities.wait(["p"], timeout_s=10.0)
        found = identities.known("p")
    finally:
        identities.close()
    assert found is not None and found.server is None and "not identified" in found.evidence


def test_identification_runs_once_per_provider_and_writes_no_ledger_row(vllm_server):
    cfg = {"providers": {"p": {"kind": "openai-compatible", "base_url": vllm_server.base_url}},
           "tiers": {"t": {"deployments": ["p:Qwen/Qwen2.5-7B-Instruct"]}},
           "pricing": {"p:*": {"input_per_million": 0, "output_per_million": 0}}, "ledger": {"sink": "memory"}}
    with L.Client(config=cfg) as client:
        for _ in range(3):
            client.chat.completions.create(model="t", messages=[{"role": "user", "content": "hi"}])
        client._engine.identities.wait(["p"], timeout_s=10.0)
        identity = client._engine.identities.known("p")
        rows = client._engine.ledger.records
    assert identity is not None and identity.server == "vllm"
    assert len(vllm_server.probes) == 1  # owned_by told at once
    assert len(rows) == 3 and all(r.status == "ok" for r in rows)  # the three calls, nothing else


@pytest.mark.parametrize("setting", [{"identify_server": False}, {"continue_prefill": False}])
def test_identification_is_off_when_the_config_says_so(vllm_server, setting):
    cfg = {"providers": {"p": {"kind": "openai-compatible", "base_url": vllm_server.base_url}},
           "tiers": {"t": {"deployments": [{"id": "p:Qwen/Qwen2.5-7B-Instruct", **setting}]}},
           "pricing": {"p:*": {"input_per_million": 0, "output_per_million": 0}}, "ledger": {"sink": "memory"}}
    with L.Client(config=cfg) as client:
        client.chat.completions.create(model="t", messages=[{"role": "user", "content": "hi"}])
        assert client._engine.identifying(["p:Qwen/Qwen2.5-7B-Instruct"]) == []
    assert vllm_server.probes == []
