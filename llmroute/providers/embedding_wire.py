"""Embeddings and model lists on the wire: request building and response parsing per platform. Sans-I/O.

Most platforms serve OpenAI's `POST {base}/embeddings` (`{"model", "input", "dimensions",
"encoding_format"}` in, `{"object": "list", "data": [{"embedding", "index"}], "usage"}` out). What
differs (docs/embeddings.md has the sources):

* Together answers without `usage`: the tokens are counted here and flagged as estimated.
* DashScope's native protocol is its own: `POST {base}/services/embeddings/text-embedding/text-embedding`
  with `{"model", "input": {"texts"}, "parameters": {"dimension", "text_type"}}`, answering
  `{"output": {"embeddings": [{"text_index", "embedding"}]}, "usage": {"total_tokens"}}`.
* `GET {base}/models` is `{"object": "list", "data": [...]}` everywhere except Together, which returns
  a bare JSON array of model objects (with `type`, `context_length`, `pricing`).

The adapters reuse the chat adapter's headers (the key), error mapping and base URL.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Type, Union

from llmroute import errors as E
from llmroute.providers.base import OpenAICompatAdapter, bearer
from llmroute._http.request import HttpRequest
from llmroute.types import Usage

if TYPE_CHECKING:
    from llmroute.config import Provider
    from llmroute.types import Usage

__all__ = ["EmbeddingInput", "EmbeddingAdapter", "BailianEmbeddingAdapter", "DashScopeNativeEmbeddingAdapter",
           "embedding_adapter_class",
           "models_request", "parse_model_list", "EmbeddingInputValue"]

EmbeddingInputValue = Union[str, List[str], List[int], List[List[int]]]


@dataclass
class EmbeddingInput:
    """What the caller asked to embed, validated: the input and the OpenAI parameters to send."""

    input: EmbeddingInputValue
    params: Dict[str, Any] = field(default_factory=dict)
    extra_body: Dict[str, Any] = field(default_factory=dict)
    extra_headers: Dict[str, str] = field(default_factory=dict)

    @property
    def count(self) -> int:
        """How many vectors the answer must hold: one per string or per token list."""
        value = self.input
        if isinstance(value, str) or (value and isinstance(value[0], int)):
            return 1
        return len(value)

    def texts(self) -> List[str] | None:
        """The input as a list of strings, or None when it is token ids."""
        if isinstance(self.input, str):
            return [self.input]
        strings = [v for v in self.input if isinstance(v, str)]
        return strings if len(strings) == len(self.input) else None


class EmbeddingAdapter(OpenAICompatAdapter):
    """OpenAI's embeddings endpoint, as Together, Fireworks, SiliconFlow, Bailian compatible mode,
    vLLM, SGLang, TEI, llama.cpp and Ollama's `/v1` serve it."""

    embeddings_path = "/embeddings"

    def max_inputs(self) -> int | None:
        """The most inputs one request may carry on this platform (None: no documented cap)."""
        return None

    def batches(self, call: EmbeddingInput) -> List[EmbeddingInput]:
        """`call` split into requests the platform accepts, in order (one, unless a cap applies)."""
        limit = self.max_inputs()
        value = call.input
        if limit is None or call.count <= limit or isinstance(value, str) or isinstance(value[0], int):
            return [call]
        return [EmbeddingInput(value[i:i + limit], call.params, call.extra_body, call.extra_headers)
                for i in range(0, len(value), limit)]

    def build_request(self, call: EmbeddingInput, *, stream: bool = False) -> HttpRequest:  # type: ignore[override]  # an embedding call, not a chat CallInput
        headers = self.headers(False)
        headers.update(call.extra_headers)
        return HttpRequest("POST", self.provider.base_url + self.embeddings_path, headers, self.embedding_body(call),
                           False)

    def embedding_body(self, call: EmbeddingInput) -> Dict[str, Any]:
        body: Dict[str, Any] = {"model": self.deployment.model, "input": call.input}
        body.update(call.params)
        body.update(self.deployment.extra_body)
        body.update(call.extra_body)
        return body

    def parse_embeddings(self, headers: Mapping[str, str], content: bytes,
                         call: EmbeddingInput) -> tuple[Dict[str, Any], "Usage" | None]:
        """A 2xx body -> (OpenAI-shaped response dict, the usage the platform reported or None)."""
        data = self.json_body(headers, content)
        items = data.get("data")
        if not isinstance(items, list):
            raise self._bad_body("no `data` list of embeddings")
        vectors = []
        for position, item in enumerate(items):
            if not isinstance(item, dict) or not isinstance(item.get("embedding"), (list, str)):
                raise self._bad_body(f"data[{position}] has no embedding")
            index = item.get("index", position)
            vectors.append({"object": "embedding", "index": index if isinstance(index, int) else position,
                            "embedding": item["embedding"]})
        out = {"object": "list", "data": self._in_order(vectors, call), "model": data.get("model") or self.deployment.model}
        if data.get("id"):
            out["id"] = data["id"]
        return out, _usage(data.get("usage"))

    def _in_order(self, vectors: List[Dict[str, Any]], call: EmbeddingInput) -> List[Dict[str, Any]]:
        """Sorted by index, one per input: a short answer is the platform's fault, not a result."""
        vectors.sort(key=lambda v: v["index"])
        if len(vectors) != call.count or [v["index"] for v in vectors] != list(range(call.count)):
            raise self._bad_body(f"{len(vectors)} embeddings for {call.count} inputs")
        return vectors


class BailianEmbeddingAdapter(EmbeddingAdapter):
    """Compatible mode: at most 10 texts per request for text-embedding-v3/v4, 25 for v1/v2
    (docs/embeddings.md); a longer input is sent as several requests of one attempt."""

    def max_inputs(self) -> int | None:
        return 25 if self.deployment.model in ("text-embedding-v1", "text-embedding-v2") else 10


class DashScopeNativeEmbeddingAdapter(BailianEmbeddingAdapter):
    """DashScope's own text-embedding protocol (`protocol = "native"`)."""

    embeddings_path = "/services/embeddings/text-embedding/text-embedding"
    # OpenAI names -> DashScope `parameters` names.
    _PARAMS = {"dimensions": "dimension", "text_type": "text_type", "output_type": "output_type"}

    def embedding_body(self, call: EmbeddingInput) -> Dict[str, Any]:
        texts = call.texts()
        if texts is None:
            raise E.BadRequestError("DashScope's native embeddings take text, not token ids",
                                    provider=self.provider.name, deployment=self.deployment.id)
        parameters: Dict[str, Any] = {}
        for name, value in call.params.items():
            if name == "encoding_format" and value == "float":
                continue
            if name == "user":
                continue  # attribution only
            if name not in self._PARAMS:
                raise E.BadRequestError(
                    f"parameter {name!r} has no equivalent in DashScope's native embeddings "
                    "(use protocol = \"compatible\", or pass it in extra_body)",
                    provider=self.provider.name, deployment=self.deployment.id)
            parameters[self._PARAMS[name]] = value
        extra = {**self.deployment.extra_body, **call.extra_body}
        if isinstance(extra.get("parameters"), dict):
            parameters.update(extra.pop("parameters"))
        parameters.update(extra)
        body: Dict[str, Any] = {"model": self.deployment.model, "input": {"texts": texts}}
        if parameters:
            body["parameters"] = parameters
        return body

    def parse_embeddings(self, headers: Mapping[str, str], content: bytes,
                         call: EmbeddingInput) -> tuple[Dict[str, Any], "Usage" | None]:
        data = self.json_body(headers, content)
        output = data.get("output")
        if not isinstance(output, dict):
            if "code" in data:
                raise self.error_from_event(data, headers)
            raise self._bad_body("no `output`")
        items = output.get("embeddings")
        if not isinstance(items, list):
            raise self._bad_body("no `output.embeddings` list")
        vectors = []
        for position, item in enumerate(items):
            if not isinstance(item, dict) or not isinstance(item.get("embedding"), list):
                raise self._bad_body(f"output.embeddings[{position}] has no embedding")
            index = item.get("text_index", position)
            vectors.append({"object": "embedding", "index": index if isinstance(index, int) else position,
                            "embedding": item["embedding"]})
        out = {"object": "list", "data": self._in_order(vectors, call), "model": self.deployment.model}
        if data.get("request_id"):
            out["id"] = data["request_id"]
        raw = data.get("usage")
        usage = None
        if isinstance(raw, dict) and isinstance(raw.get("total_tokens"), int):
            usage = _usage({"prompt_tokens": raw["total_tokens"], "total_tokens": raw["total_tokens"]})
        return out, usage


def _usage(raw: Any) -> "Usage" | None:
    if not isinstance(raw, dict):
        return None
    prompt = raw.get("prompt_tokens")
    if not isinstance(prompt, int):
        prompt = raw.get("total_tokens")
    if not isinstance(prompt, int):
        return None
    return Usage(prompt_tokens=prompt, completion_tokens=0, total_tokens=prompt)


def embedding_adapter_class(kind: str, protocol: str = "compatible") -> Type[EmbeddingAdapter]:
    """Every kind serves embeddings; DashScope's native protocol has its own shape."""
    if kind == "bailian":
        return DashScopeNativeEmbeddingAdapter if protocol == "native" else BailianEmbeddingAdapter
    return EmbeddingAdapter


# -- model lists ------------------------------------------------------------------------------------

def models_base_url(provider: "Provider") -> str:
    """Where `GET /models` lives. DashScope's native root (/api/v1) has no model list; its compatible
    mode in the same region does (the key is the same)."""
    if provider.kind == "bailian" and provider.protocol == "native":
        native = provider.spec.native_base_urls.get(provider.region)
        if native and provider.base_url == native.rstrip("/"):
            return provider.spec.base_urls[provider.region]
        if provider.base_url.endswith("/api/v1"):
            return provider.base_url[: -len("/api/v1")] + "/compatible-mode/v1"
    return provider.base_url


def models_request(provider: "Provider") -> HttpRequest:
    headers: Dict[str, Any] = {"Accept": "application/json"}
    if provider.api_key:
        headers["Authorization"] = bearer(provider.api_key)  # revealed by the transport, as it writes it
    headers.update(provider.headers)
    return HttpRequest("GET", models_base_url(provider) + "/models", headers, None, False)


def parse_model_list(provider: "Provider", content: bytes) -> List[Dict[str, Any]]:
    """A 2xx body of `GET /models` -> model dicts with `id`, `object`, `created`, `owned_by` (and what
    else the platform sent). Raises `ServerError` for a body that is not a model list."""
    def bad(what: str) -> E.ServerError:
        return E.ServerError(f"unreadable model list: {what}", provider=provider.name)

    try:
        data = json.loads(content)
    except ValueError:
        raise bad("not JSON") from None
    if isinstance(data, dict):
        items: Any = data.get("data")
        if items is None and isinstance(data.get("models"), list):  # Ollama's native /api/tags shape
            items = [{"id": m.get("name") or m.get("model"), **m} for m in data["models"] if isinstance(m, dict)]
    else:
        items = data  # Together: a bare array
    if not isinstance(items, list):
        raise bad("no list of models")
    out = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("id"), str):
            continue
        model = dict(item)
        model.setdefault("object", "model")
        if not isinstance(model.get("created"), int):
            model["created"] = 0
        if not isinstance(model.get("owned_by"), str):
            model["owned_by"] = model.get("organization") if isinstance(model.get("organization"), str) else provider.kind
        out.append(model)
    return out

