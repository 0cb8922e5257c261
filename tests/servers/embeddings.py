"""`POST {base}/embeddings` for the loopback servers, in each platform's shape (docs/embeddings.md).

Mixed into `OpenAICompatServer`: a platform sets `embedding_models` (model -> vector size) and, where
it differs from OpenAI's shape, `embedding_usage` (Together sends none), `embedding_id_prefix`,
`max_embedding_inputs` (DashScope's 10 texts per request) and `dimensions_models` (the sizes a
model takes in `dimensions`). Scripted replies (`Reply(error=..., status=..., delay_s=..., reset_before=...)`)
apply as for chat. Deterministic: a text's vector is derived from its SHA-256, so tests can compare
vectors across platforms; prompt tokens = whitespace-separated words (at least 1 per input), or
the number of token ids given.
"""

from __future__ import annotations

import base64
import hashlib
import struct
from typing import Any

from tests.servers.base import Response
from tests.servers.script import RecordedRequest, Reply


def embedding_vector(item: Any, size: int) -> list[float]:
    """The loopback servers' embedding of one input (a text or a list of token ids)."""
    seed = (item if isinstance(item, str) else ",".join(map(str, item))).encode()
    out: list[float] = []
    counter = 0
    while len(out) < size:
        digest = hashlib.sha256(seed + struct.pack(">I", counter)).digest()
        out.extend(round(b / 255.0 - 0.5, 6) for b in digest)
        counter += 1
    return out[:size]


def input_tokens(item: Any) -> int:
    return max(1, len(item.split())) if isinstance(item, str) else len(item)


class EmbeddingsMixin:
    """Embeddings for a platform server; OpenAI's wire shape unless a platform overrides a hook."""

    embedding_models: dict[str, int] = {}
    embedding_usage = True  # a `usage` object on the answer
    embedding_id_prefix: str | None = None  # an `id` on the answer ("embd-" on vLLM)
    max_embedding_inputs: int | None = None
    # model -> the `dimensions` it takes (None: any size up to its own); absent: it refuses the field.
    dimensions_models: dict[str, tuple[int, ...] | None] = {}
    embedding_requests_total = 0

    def embedding_path(self) -> str:
        return self.base_path + "/embeddings"  # type: ignore[attr-defined]

    def embedding_inputs(self, body: dict[str, Any]) -> list[Any] | Response:
        value = body.get("input")
        if isinstance(value, str) and value:
            return [value]
        if isinstance(value, list) and value:
            if all(isinstance(v, int) for v in value):
                return [value]
            if all(isinstance(v, str) and v for v in value) or all(isinstance(v, list) and v for v in value):
                return value
        return self.error_response("bad_request", message="input must be a non-empty string or list",  # type: ignore[attr-defined]
                                   param="input")

    async def embeddings(self, request: RecordedRequest) -> Response:
        denied = self.auth_response(request)  # type: ignore[attr-defined]
        if denied is not None:
            return denied
        body = request.json
        if not isinstance(body, dict):
            return self.error_response("bad_request", message="Request body must be a JSON object.")  # type: ignore[attr-defined]
        model = body.get("model")
        reply = self.script.pop(request.path, model if isinstance(model, str) else None) or Reply()  # type: ignore[attr-defined]
        early = await self.scripted_outcome(reply)  # type: ignore[attr-defined]
        if early is not None:
            return early
        if model not in self.embedding_models:
            return self.error_response("not_found", model=model, param="model")  # type: ignore[attr-defined]
        inputs = self.embedding_inputs(body)
        if isinstance(inputs, Response):
            return inputs
        refused = self.check_embedding_request(body, model, inputs)
        if refused is not None:
            return refused
        size = self.embedding_models[model]
        dimensions = body.get("dimensions")
        if dimensions is not None:
            allowed = self.dimensions_models.get(model, ())
            ok = isinstance(dimensions, int) and (0 < dimensions <= size if allowed is None else dimensions in allowed)
            if model not in self.dimensions_models or not ok:
                return self.error_response("bad_request", message=f"dimensions {dimensions!r} is not supported "  # type: ignore[attr-defined]
                                           f"by {model}", param="dimensions")
            size = dimensions
        self.embedding_requests_total += 1
        vectors: list[Any] = [embedding_vector(item, size) for item in inputs]
        if body.get("encoding_format") == "base64":  # OpenAI's: little-endian float32, base64
            vectors = [base64.b64encode(struct.pack(f"<{len(v)}f", *v)).decode() for v in vectors]
        tokens = sum(input_tokens(item) for item in inputs)
        if reply.usage and "prompt_tokens" in reply.usage:
            tokens = reply.usage["prompt_tokens"]
        return Response.json(self.embedding_body(model, vectors, None if reply.omit_usage else tokens),
                             headers={**self.response_headers(None), **reply.headers})  # type: ignore[attr-defined]

    def check_embedding_request(self, body: dict[str, Any], model: str, inputs: list[Any]) -> Response | None:
        if self.max_embedding_inputs is not None and len(inputs) > self.max_embedding_inputs:
            return self.error_response("bad_request", param="input", message=(  # type: ignore[attr-defined]
                f"batch size is invalid, it should not be larger than {self.max_embedding_inputs}."))
        if body.get("encoding_format") not in (None, "float", "base64"):
            return self.error_response("bad_request", message="encoding_format must be float or base64",  # type: ignore[attr-defined]
                                       param="encoding_format")
        return None

    def embedding_body(self, model: str, vectors: list[Any], tokens: int | None) -> dict[str, Any]:
        out: dict[str, Any] = {"object": "list", "model": model,
                               "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]}
        if self.embedding_id_prefix is not None:
            out["id"] = f"{self.embedding_id_prefix}{self.embedding_requests_total}"
        if self.embedding_usage and tokens is not None:
            out["usage"] = {"prompt_tokens": tokens, "total_tokens": tokens}
        return out
