"""Server identification (docs/failover.md, "Knowing what a server can do"): the sans-I/O reader on
each server's answers, and the background prober against the loopback servers and a closed port."""

from __future__ import annotations

import json
import socket
from typing import Any, Callable, Iterator

import pytest

import llmroute as L
from llmroute.config import Config
from llmroute._call.server_probe import ServerIdentities
from llmroute.providers.server_identity import identify, model_family
from tests.servers.fault import FaultServer
from tests.servers.llamacpp_wire import LlamaCppWireServer
from tests.servers.sglang import SGLangServer
from tests.servers.tgi import TGIServer
from tests.servers.vllm import VLLMServer


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


@pytest.fixture
def fresh() -> Iterator[Callable[[Any], Any]]:
    """Start a server of its own for the test (identifications are kept per process, per server)."""
    started: list[Any] = []

    def start(server: Any) -> Any:
        started.append(server.start())
        return server
    yield start
    for server in started:
        server.stop()


def identified(prov: Any) -> Any:
    identities = ServerIdentities()
    identities.want([prov])
    identities.wait([prov.name], timeout_s=10.0)
    return identities.known(prov.name)


@pytest.mark.parametrize("make, server", [(VLLMServer, "vllm"), (SGLangServer, "sglang"), (TGIServer, "tgi"),
                                          (FaultServer, None)])
def test_the_prober_identifies_each_loopback_server_over_a_socket(fresh, make, server):
    srv = fresh(make())
    found = identified(provider(srv.base_url))
    assert found is not None and found.server == server, found
    assert srv.probes and srv.requests == []  # marked, kept apart from the calls, no chat request
    assert all(p.method == "GET" and p.headers.get("x-llmroute-probe") == "identify" for p in srv.probes)


def test_the_loopback_llama_cpp_is_identified_by_its_server_header(fresh):
    srv = fresh(LlamaCppWireServer())
    found = identified(provider(srv.base_url))
    assert found is not None and found.server == "llamacpp" and "Server" in found.evidence
    assert len(srv.probes) == 1  # the first answer told: nothing more was asked


def test_a_server_that_does_not_answer_is_not_identified_and_behaves_as_before():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again at once: connection refused
    found = identified(provider(f"http://127.0.0.1:{port}/v1"))
    assert found is not None and found.server is None and "not identified" in found.evidence


def client_config(srv: Any, kind: str = "openai-compatible", **deployment: Any) -> dict[str, Any]:
    return {"providers": {"p": {"kind": kind, "base_url": srv.base_url}},
            "tiers": {"t": {"deployments": [{"id": "p:Qwen/Qwen2.5-7B-Instruct", **deployment}]}},
            "pricing": {"p:*": {"input_per_million": 0, "output_per_million": 0}}, "ledger": {"sink": "memory"}}


def test_identification_runs_once_per_server_for_the_process_and_writes_no_ledger_row(fresh):
    srv = fresh(VLLMServer())
    for _ in range(2):  # two clients, three calls each
        with L.Client(config=client_config(srv)) as client:
            for _ in range(3):
                client.chat.completions.create(model="t", messages=[{"role": "user", "content": "hi"}])
            client._engine.identities.wait(["p"], timeout_s=10.0)
            identity = client._engine.identities.known("p")
            rows = client._engine.ledger.records
        assert identity is not None and identity.server == "vllm"
        assert len(rows) == 3 and all(r.status == "ok" for r in rows)  # the three calls, nothing else
    assert len(srv.probes) == 1  # owned_by told at once, and the second client knew already


@pytest.mark.parametrize("kind, setting, asked", [
    ("openai-compatible", {"identify_server": False}, False),
    ("openai-compatible", {"continue_prefill": False}, False),
    ("vllm", {}, False),  # the kind already says what the server is
    ("vllm", {"identify_server": True}, True),
])
def test_who_is_asked(fresh, kind, setting, asked):
    srv = fresh(VLLMServer())
    with L.Client(config=client_config(srv, kind, **setting)) as client:
        client.chat.completions.create(model="t", messages=[{"role": "user", "content": "hi"}])
        client._engine.identities.wait(["p"], timeout_s=10.0)
    assert bool(srv.probes) is asked


@pytest.mark.parametrize("server, age_s, stale", [
    ("vllm", 3599.0, False), ("vllm", 3600.0, True), (None, 59.0, False), (None, 60.0, True)])
def test_an_answer_is_asked_again_once_it_is_old(server, age_s, stale):
    from llmroute._call.server_probe import stale as is_stale
    from llmroute.providers.server_identity import Identity
    assert is_stale(Identity(server, "evidence"), found_at=100.0, now=100.0 + age_s) is stale


def test_a_server_down_at_the_first_ask_is_identified_once_the_retry_interval_passed(fresh):
    from llmroute._call.server_probe import _REGISTRY, UNIDENTIFIED_RETRY_S
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again at once: refused until the server below starts
    prov = provider(f"http://127.0.0.1:{port}/v1")
    identities = ServerIdentities()
    identities.want([prov])
    identities.wait([prov.name], timeout_s=10.0)
    assert identities.known(prov.name).server is None  # down: not identified
    srv = fresh(VLLMServer(port=port))
    identities.refresh([prov.name])  # fresh answer: not asked again yet
    assert not identities.pending([prov.name]) and srv.probes == []
    with _REGISTRY.lock:  # the answer ages past the retry interval
        for key in _REGISTRY.found_at:
            _REGISTRY.found_at[key] -= UNIDENTIFIED_RETRY_S
    identities.refresh([prov.name])
    identities.wait([prov.name], timeout_s=10.0)
    found = identities.known(prov.name)
    assert found is not None and found.server == "vllm" and len(srv.probes) >= 1
