"""Which server is behind an OpenAI-compatible URL, from what it already exposes, and how it continues.

A deployment of kind `openai-compatible` may be any of the self-hosted servers (and one of a named
self-hosted kind may be another, when `identify_server = true` asks). Each one says what it is on free, unbilled GET endpoints (docs/failover.md,
"Knowing what a server can do"):

* `GET {base}/models`: `owned_by` is "vllm", "sglang" or "llamacpp" on those servers' cards.
* `GET {root}/props`: llama.cpp's server settings (`default_generation_settings`, `total_slots`).
* `GET {root}/info`: TGI's router info (`model_id` with `max_total_tokens` or `router`).
* `GET {root}/get_server_info`: SGLang's server arguments (`version` with server args).
* `GET {root}/version`: vLLM's `{"version": ...}` (the only key).
* a `Server: llama.cpp` response header.

`probe_paths` lists what to ask, in order; `identify` reads one answer and says which server it
shows (None: this answer does not tell); `SERVER_STYLE` maps a server to its continuation style
(the table in docs/failover.md, the same as `prefill.CONTINUE_STYLE_BY_KIND`).

Sans-I/O: plain functions over bytes and headers. It never sends anything, never reads a key's
value except to put it on the request it builds (`probe_request`), and never logs.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Mapping, Tuple

from llmroute._http.request import HttpRequest
from llmroute.providers.embedding_wire import models_request
from llmroute.providers.prefill import CONTINUE_STYLE_BY_KIND

if TYPE_CHECKING:
    from llmroute.config import Provider

__all__ = ["IDENTIFIABLE_KINDS", "NAMED_SELF_HOSTED", "SERVER_STYLE", "Identity", "probe_paths", "probe_request", "identify", "model_family"]

PROBE_HEADER = "X-LLMRoute-Probe"

# Kinds whose deployments may be any self-hosted server. A deployment of a named self-hosted kind
# (vllm, sglang, llamacpp, tgi) is asked only when its policy sets `identify_server = true`: its kind
# already says what the server is, and asking would change nothing unless the kind is wrong.
IDENTIFIABLE_KINDS = frozenset({"openai-compatible"})
NAMED_SELF_HOSTED = frozenset({"vllm", "sglang", "llamacpp", "tgi"})

# server -> continuation style (None: the server documents no way to continue a prefill).
SERVER_STYLE: Dict[str, str | None] = {
    "vllm": CONTINUE_STYLE_BY_KIND["vllm"],
    "sglang": CONTINUE_STYLE_BY_KIND["sglang"],
    "llamacpp": CONTINUE_STYLE_BY_KIND["llamacpp"],
    "tgi": None,
    "ollama": None,
}


@dataclass(frozen=True)
class Identity:
    """What a deployment's server turned out to be. `server` None: not identified (behave as today)."""

    server: str | None
    evidence: str  # e.g. "GET /v1/models owned_by=vllm", or why identification failed

    @property
    def style(self) -> str | None:
        return SERVER_STYLE.get(self.server) if self.server else None


def _root(base_url: str) -> str:
    base = base_url.rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


def probe_paths(provider: "Provider") -> Tuple[str, ...]:
    """The GET paths to ask, in order: the model list first (every server has one), then each
    server's own info endpoint. `identify` stops the walk at the first answer that tells."""
    return ("models", "/props", "/info", "/get_server_info", "/server_info", "/version")


def probe_request(provider: "Provider", path: str) -> HttpRequest:
    """The GET for `path` ("models": the provider's model list, with its key; others: from the root),
    marked `X-LLMRoute-Probe: identify` so that a server's logs (and the loopback test servers) can
    tell it from the calls."""
    listing = models_request(provider)
    listing.headers[PROBE_HEADER] = "identify"
    if path == "models":
        return listing
    return HttpRequest("GET", _root(provider.base_url) + path, dict(listing.headers), None, False)


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None


def identify(path: str, status: int, headers: Mapping[str, str], body: bytes) -> Identity | None:
    """The server that this answer to `GET path` shows, or None when it does not tell."""
    server_header = next((v for k, v in headers.items() if k.lower() == "server"), "")
    if "llama.cpp" in server_header.lower():
        return Identity("llamacpp", f"GET {path}: Server: {server_header}")
    if status != 200:
        return None
    data = _json(body)
    if not isinstance(data, dict):
        return None
    if path == "models":
        cards = data.get("data")
        owners = {c.get("owned_by") for c in cards if isinstance(c, dict)} if isinstance(cards, list) else set()
        for server, owner in (("vllm", "vllm"), ("sglang", "sglang"), ("llamacpp", "llamacpp"), ("ollama", "library")):
            if owner in owners:
                return Identity(server, f"GET models: owned_by={owner}")
        return None
    if path == "/props" and isinstance(data.get("default_generation_settings"), dict) and "total_slots" in data:
        return Identity("llamacpp", "GET /props: llama.cpp server settings")
    if path == "/info" and isinstance(data.get("model_id"), str) and ("max_total_tokens" in data or "router" in data):
        return Identity("tgi", "GET /info: TGI router info")
    if path in ("/get_server_info", "/server_info") and isinstance(data.get("version"), str) and len(data) > 1:
        return Identity("sglang", "GET /get_server_info: SGLang server info")
    if path == "/version" and set(data) == {"version"} and isinstance(data["version"], str):
        return Identity("vllm", "GET /version: vLLM version")
    return None


_QUANT_MARKS = ("gguf", "awq", "gptq", "fp8", "fp16", "bf16", "int4", "int8", "mlx", "exl2")
_QUANT_CODE = re.compile(r"(?<![a-z0-9])(i?q\d(_[a-z0-9]+)*)(?![a-z0-9])")  # llama.cpp's Q4_K_M, IQ3_XS, Q8_0


def model_family(model: str) -> str:
    """A model id reduced to what two servers of the same weights share: the last path segment,
    lower-cased, separators unified, quantisation and file-format marks (`-AWQ`, `.gguf`, `Q4_K_M`)
    dropped. "Qwen/Qwen2.5-7B-Instruct" and "qwen2.5-7b-instruct-awq" are one family; a replay is
    tried by default only within a family (and verified character by character anyway)."""
    name = _QUANT_CODE.sub("", model.rsplit("/", 1)[-1].lower())
    name = re.sub(r"[._:\s]+", "-", name)
    return "-".join(p for p in name.split("-") if p and p not in _QUANT_MARKS)
