"""Loopback Alibaba Bailian / DashScope server (docs/platforms.md §4): compat mode and the native API.

Compat mode (§4a, `/compatible-mode/v1/chat/completions`): include_usage honoured ->
a final `choices: []` usage chunk, otherwise no usage at all; `usage: null`,
`system_fingerprint: null`, `logprobs: null` on chunks; `chatcmpl-<uuid>` ids;
`prompt_tokens_details.cached_tokens`; errors OpenAI-like plus a top-level `id`
(`data_inspection_failed`, `Arrearage` as 400, `invalid_api_key`, throttling 429,
context "Range of input length should be [1, N]"); output moderation mid-stream.

Native mode (§4b, `/api/v1/services/aigc/text-generation/generation`): body
`{model, input: {messages}, parameters}`; streams only with `X-DashScope-SSE: enable`;
events `id:` / `event:result` / `:HTTP_STATUS/200` / `data:`; no `[DONE]`;
cumulative text unless `parameters.incremental_output`; usage
`input_tokens/output_tokens/total_tokens` on every event; `finish_reason` the string
"null" mid-stream; flat errors `{code, message, request_id}`; `event:error` mid-stream.
Never calls the real platform.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

from tests.servers.base import RESET, Flush, Reset, Response, wait_until
from tests.servers.openai_compat import (
    SSE_HEADERS,
    ErrorSpec,
    OpenAICompatServer,
    Plan,
    StreamUsage,
    Usage,
    LenientFormat,
    count_prompt_tokens,
)
from tests.servers.embeddings import embedding_vector, input_tokens
from tests.servers.script import RecordedRequest, Reply

NATIVE_PATH = "/api/v1/services/aigc/text-generation/generation"
NATIVE_EMBEDDING_PATH = "/api/v1/services/embeddings/text-embedding/text-embedding"

# §4 Errors (both modes): kind -> (native code, compat code/type, status, message).
_CATALOG: dict[str, tuple[str, str, int, str]] = {
    "auth": ("InvalidApiKey", "invalid_api_key", 401, "Invalid API-key provided."),
    "access_denied": ("AccessDenied", "access_denied", 403, "Access denied."),
    "not_found": ("ModelNotFound", "model_not_found", 404, "Model not exist."),
    "bad_request": ("InvalidParameter", "invalid_parameter_error", 400, "Invalid parameter."),
    "context": ("InvalidParameter", "invalid_parameter_error", 400, "Range of input length should be [1, {context}]"),
    "content_filter": ("DataInspectionFailed", "data_inspection_failed", 400,
                       "Input data may contain inappropriate content."),
    "output_filter": ("DataInspectionFailed", "data_inspection_failed", 400,
                      "Output data may contain inappropriate content."),
    "arrearage": ("Arrearage", "Arrearage", 400,
                  "Access denied, please make sure your account is in good standing."),
    "rate_limit": ("Throttling.RateQuota", "limit_requests", 429, "Requests rate limit exceeded, please try again later."),
    "quota": ("Throttling.AllocationQuota", "insufficient_quota", 429,
              "Allocated quota exceeded, please increase your quota limit."),
    "burst": ("Throttling.BurstRate", "limit_burst_rate", 429, "Request rate increased too quickly."),
    "server": ("InternalError", "internal_error", 500, "An internal error has occured, please try again later."),
    "overloaded": ("ServiceUnavailable", "service_unavailable", 503, "Service is busy, please try again later."),
}


class BailianServer(OpenAICompatServer):
    platform = "bailian"
    base_path = "/compatible-mode/v1"  # §4a base URLs end in /compatible-mode/v1
    # docs/embeddings.md: text-embedding-v4/v3, at most 10 texts per request, listed dimensions only.
    embedding_models = {"text-embedding-v4": 1024, "text-embedding-v3": 1024}
    dimensions_models = {"text-embedding-v4": (2048, 1536, 1024, 768, 512, 256, 128, 64),
                         "text-embedding-v3": (1024, 768, 512)}
    max_embedding_inputs = 10
    default_models = {  # §4 Models; per-model input caps are unconfirmed
        "qwen-plus": 131_072,
        "qwen-turbo": 131_072,
        "qwen-max": 32_768,
        "qwen2.5-7b-instruct": 131_072,
        "qwen2.5-72b-instruct": 131_072,
        "qwen3-8b": 131_072,
        "qwq-plus": 131_072,  # served only as a stream (stream_only_models)
        "qwen-flash": 1_000_000,  # tiered, thinking and context-cache prices (docs/pricing.md)
        "qwen-plus-us": 1_000_000,
        "qwen3-max": 262_144,
    }
    default_api_key = "sk-dashscope-test"
    reasoning_field = "reasoning_content"  # §4a deep thinking: reasoning_content
    usage_placement = "empty_chunk"  # §4a: include_usage -> last chunk has choices:[] and usage
    usage_null_on_chunks = True  # §4a observed: "usage": null on chunks
    chunk_extras = {"system_fingerprint": None}  # §4a observed
    mid_stream_error_kind = "output_filter"  # §4 Errors: output moderation can hit mid-stream
    done_after_error = False

    errors = {kind: ErrorSpec(status, compat, compat, message) for kind, (_, compat, status, message) in _CATALOG.items()}
    native_errors = {kind: ErrorSpec(status, None, native, message) for kind, (native, _, status, message) in _CATALOG.items()}

    sse_errors = False  # see native_generation_framed

    def __init__(self, *, max_tokens_policy: str = "both", **kwargs: Any) -> None:
        """`max_tokens_policy` (§4a max_tokens deprecation, unconfirmed): "both" accepts either field;
        "max_completion_tokens" rejects max_tokens with 400 (after the reported 2026-05-30 cut-over);
        "max_tokens" rejects max_completion_tokens with 400 (a region that never got the alias)."""
        super().__init__(**kwargs)
        if max_tokens_policy not in ("both", "max_completion_tokens", "max_tokens"):
            raise ValueError(f"unknown max_tokens_policy {max_tokens_policy!r}")
        self.max_tokens_policy = max_tokens_policy

    def routes(self):  # type: ignore[override]
        routes = super().routes()
        routes[("POST", NATIVE_PATH)] = self.native_generation_framed
        routes[("POST", NATIVE_EMBEDDING_PATH)] = self.native_embeddings
        return routes

    def chat_paths(self) -> set[str]:
        return {self.base_path + "/chat/completions", NATIVE_PATH}

    @property
    def native_url(self) -> str:
        """The native API base (what the DashScope SDK calls base_http_api_url)."""
        return self.root_url + "/api/v1"

    def next_id(self) -> str:
        return f"chatcmpl-{uuid.uuid4()}"  # §4a observed id format

    # -- compat mode ---------------------------------------------------------------------------
    def error_body(self, spec: ErrorSpec, message: str, param: str | None) -> Any:
        # §4 Errors: compat body is OpenAI-like with an `id` next to it.
        return {"error": {"code": spec.code, "param": param, "message": message, "type": spec.type},
                "id": self.next_id()}

    def mid_stream_error(self, kind: str, message: str | None) -> bytes:
        # §4 Errors: mid-stream moderation is a bare `data: {"error": {...}}` (no id).
        spec = self.errors[kind]
        payload = {"error": {"message": message or spec.message, "type": spec.type, "param": None, "code": spec.code}}
        return b"data: " + json.dumps(payload).encode() + b"\n\n"

    # §11.10: models served only as streams (QwQ; Qwen3 open-source models with thinking on) refuse
    # a plain call with a 400 (wording from DashScope users' reports).
    stream_only_models = frozenset({"qwq-plus"})

    def max_tokens_of(self, body: dict[str, Any]) -> int | Response | None:
        if body.get("model") in self.stream_only_models and not body.get("stream"):
            return self.error_response("bad_request", param="stream", message=(
                "<400> InternalError.Algo.InvalidParameter: This model only support stream mode, "
                "please enable the stream parameter to access the model."))
        rejected = {"max_completion_tokens": "max_tokens", "max_tokens": "max_completion_tokens"}.get(self.max_tokens_policy)
        if rejected is not None and body.get(rejected) is not None:
            return self.error_response("bad_request", param=rejected,
                                       message=f"<400> InternalError.Algo.InvalidParameter: {rejected} is not supported")
        return super().max_tokens_of(body)

    def stream_usage(self, plan: Plan) -> StreamUsage:
        # §4a: chunks carry usage:null whether or not usage was asked for.
        where = super().stream_usage(plan)
        return where._replace(null_others=True)

    def completion_body(self, plan: Plan) -> dict[str, Any]:
        body = super().completion_body(plan)
        if plan.usage is not None:
            body["usage"] = self.usage_json(plan.usage)  # §4a non-stream usage
        return body

    @staticmethod
    def prompt_details(usage: Usage) -> dict[str, Any]:
        """`prompt_tokens_details` as Alibaba's context-cache page shows it: `cached_tokens`, and with an
        explicit cache `cache_creation_input_tokens`, `cache_creation.ephemeral_5m_input_tokens` and
        `cache_type: "ephemeral"` (docs/pricing.md)."""
        details: dict[str, Any] = {"cached_tokens": usage.cached}
        if usage.explicit or usage.cache_created:
            details["cache_creation"] = {"ephemeral_5m_input_tokens": usage.cache_created}
            details["cache_creation_input_tokens"] = usage.cache_created
            details["cache_type"] = "ephemeral"
        return details

    def usage_json(self, usage: Usage) -> dict[str, Any]:
        out = {"prompt_tokens": usage.prompt, "completion_tokens": usage.completion,
               "total_tokens": usage.total_tokens, "prompt_tokens_details": self.prompt_details(usage)}
        if usage.reasoning:
            out["completion_tokens_details"] = {"reasoning_tokens": usage.reasoning}  # thinking mode
        return out

    # -- native mode ---------------------------------------------------------------------------
    def native_error(self, kind: str, *, status: int | None = None, message: str | None = None,
                     headers: dict[str, str] | None = None, **fmt: Any) -> Response:
        spec = self.native_errors[kind]
        text = message if message is not None else spec.message.format_map(LenientFormat(fmt))
        code = status if status not in (None, 200) else spec.status
        # §4b: flat {"code","message","request_id"}.
        return Response.json({"code": spec.code, "message": text, "request_id": str(uuid.uuid4())}, code, headers)

    async def native_generation_framed(self, request: RecordedRequest) -> Response:
        """A streamed call's refusal before any output, when `sse_errors` is set, comes as one SSE
        frame with the error status (the DashScope SDK's `_handle_http_failed_response` reads that
        shape: a non-200 `text/event-stream` body with `event:error` and `data:{...}`)."""
        response = await self.native_generation(request)
        if (self.sse_errors and response.status >= 400 and response.stream is None
                and request.headers.get("x-dashscope-sse") == "enable"):
            payload = json.loads(response.body)
            headers = [(k, v) for k, v in response.headers if k.lower() != "content-type"]
            return Response(response.status, [("Content-Type", "text/event-stream")] + headers,
                            self.native_event(1, "error", response.status, payload))
        return response

    async def native_request(self, request: RecordedRequest) -> tuple[dict[str, Any], Reply] | Response:
        """What every native route does first: the key, a JSON object body, the scripted outcome."""
        if request.bearer is None or request.bearer != self.api_key:
            return self.native_error("auth")
        body = request.json
        if not isinstance(body, dict):
            return self.native_error("bad_request", message="Request body must be a JSON object.")
        model = body.get("model")
        reply = self.script.pop(request.path, model if isinstance(model, str) else None) or Reply()
        early = await self.scripted_outcome(reply, self.native_error)
        return early if early is not None else (body, reply)

    async def native_generation(self, request: RecordedRequest) -> Response:
        started = await self.native_request(request)
        if isinstance(started, Response):
            return started
        body, reply = started
        model = body.get("model")
        if not self.accepts_model(model):
            return self.native_error("not_found")
        inp = body.get("input")
        messages = inp.get("messages") if isinstance(inp, dict) else None
        prompt_text = inp.get("prompt") if isinstance(inp, dict) else None
        if not messages and not isinstance(prompt_text, str):
            # §4b: messages must go inside `input`.
            return self.native_error("bad_request", message="Either prompt or messages must exist")
        params = body.get("parameters") or {}
        if not isinstance(params, dict):
            return self.native_error("bad_request", message="parameters must be an object")
        prompt = count_prompt_tokens(messages) if messages else max(1, len(prompt_text.split()))
        limit = params.get("max_tokens")
        context = self.models.get(model, 0)
        if context and prompt > context:
            return self.native_error("context", context=context)
        plan = self.make_plan(params, model, prompt, limit, reply)
        plan.id = str(uuid.uuid4())  # native events carry request_id, not chatcmpl ids
        # §4b: streaming is switched on by the X-DashScope-SSE: enable header, not by a body flag.
        streaming = reply.stream if reply.stream is not None else request.headers.get("x-dashscope-sse") == "enable"
        self.requests_total += 1
        self.prompt_tokens_total += prompt
        if not streaming:
            if reply.ttft_s > 0:
                await asyncio.sleep(reply.ttft_s)
            if reply.reset_after_chunks is not None:
                return Response(reset=True)
            if reply.error_at is not None:
                return self.native_error(reply.error or self.mid_stream_error_kind, message=reply.message)
            return Response.json(self.native_payload(plan, len(plan.items), plan.finish_reason, True), 200,
                                 {"x-request-id": plan.id, **reply.headers})
        headers = {**SSE_HEADERS, "x-request-id": plan.id, **reply.headers}
        return Response(200, list(headers.items()), stream=self.native_frames(plan, reply))

    def native_payload(self, plan: Plan, produced: int, finish: str, incremental_piece: Any) -> dict[str, Any]:
        """One native event/response body after `produced` pieces.

        `incremental_piece` is the text of just this event (incremental_output) or True for
        "everything so far" (cumulative, the legacy default)."""
        items = plan.items[:produced]
        if incremental_piece is True:
            content = "".join(t for k, t in items if k == "content")
            reasoning = "".join(t for k, t in items if k == "reasoning")
        else:
            kind, text = incremental_piece
            content = text if kind == "content" else ""
            reasoning = text if kind == "reasoning" else ""
        # §4b parameters.result_format: "text" (legacy default) or "message".
        if plan.request.get("result_format") == "message":
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if reasoning:
                message["reasoning_content"] = reasoning  # §10.3: field name unconfirmed
            output: dict[str, Any] = {"choices": [{"message": message, "finish_reason": finish}]}
        else:
            output = {"text": content, "finish_reason": finish}
        payload: dict[str, Any] = {"output": output, "request_id": plan.id}
        if plan.usage is not None:
            usage = plan.usage if produced == len(plan.items) else plan.usage_after(produced)
            assert usage is not None
            payload["usage"] = {"input_tokens": usage.prompt, "output_tokens": usage.completion,
                                "total_tokens": usage.total_tokens}
            if usage.cached or usage.explicit or usage.cache_created:
                payload["usage"]["prompt_tokens_details"] = self.prompt_details(usage)  # §10.2: unconfirmed
            if usage.reasoning:
                payload["usage"]["output_tokens_details"] = {"reasoning_tokens": usage.reasoning}
        return payload

    @staticmethod
    def native_event(event_id: int, event: str, status: int, payload: dict[str, Any]) -> bytes:
        # §4b SSE framing: id:, event:, a :HTTP_STATUS/<code> comment line, data: (no space after colons).
        data = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
        return f"id:{event_id}\nevent:{event}\n:HTTP_STATUS/{status}\ndata:{data}\n\n".encode()

    async def native_frames(self, plan: Plan, reply: Reply) -> AsyncIterator[bytes | Reset | Flush]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + reply.ttft_s
        async for flush in wait_until(loop, deadline):
            yield flush
        incremental = plan.request.get("incremental_output") is True
        n = len(plan.items)
        self.running += 1
        try:
            for i in range(n + 1):
                if 0 < i < n:
                    deadline += reply.gap_after(i - 1)
                    async for flush in wait_until(loop, deadline):
                        yield flush
                if reply.reset_after_chunks == i:
                    yield RESET
                    return
                if reply.error_at == i:
                    spec = self.native_errors[reply.error or self.mid_stream_error_kind]
                    err = {"code": spec.code, "message": reply.message or spec.message, "request_id": plan.id}
                    # §4b: the SDK stops at the first event:error.
                    yield self.native_event(i + 1, "error", spec.status, err)
                    return
                if reply.malformed_at == i:
                    yield b"id:0\nevent:result\n:HTTP_STATUS/200\ndata:{\"output\":{\"text\":\n\n"
                if i == n:
                    break
                piece: Any = True if not incremental else plan.items[i]
                # §4b: finish_reason is the string "null" mid-stream.
                yield self.native_event(i + 1, "result", 200, self.native_payload(plan, i + 1, "null", piece))
                self.generation_tokens_total += 1
            final_piece: Any = True if not incremental else ("content", "")
            yield self.native_event(n + 1, "result", 200, self.native_payload(plan, n, plan.finish_reason, final_piece))
            # §4b: no [DONE] sentinel; the stream simply ends.
        finally:
            self.running -= 1

    # -- native embeddings (docs/embeddings.md) -------------------------------------------------
    async def native_embeddings(self, request: RecordedRequest) -> Response:
        """`{model, input: {texts}, parameters: {dimension, text_type}}` ->
        `{output: {embeddings: [{text_index, embedding}]}, usage: {total_tokens}, request_id}`."""
        started = await self.native_request(request)
        if isinstance(started, Response):
            return started
        body, reply = started
        model = body.get("model")
        if model not in self.embedding_models:
            return self.native_error("not_found")
        inp = body.get("input")
        texts = inp.get("texts") if isinstance(inp, dict) else None
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) and t for t in texts):
            return self.native_error("bad_request", message="input.texts should be a non-empty list of strings")
        if len(texts) > (self.max_embedding_inputs or len(texts)):
            return self.native_error("bad_request", message=(
                f"batch size is invalid, it should not be larger than {self.max_embedding_inputs}."))
        params = body.get("parameters") or {}
        size = self.embedding_models[model]
        dimension = params.get("dimension") if isinstance(params, dict) else None
        if dimension is not None:
            if dimension not in (self.dimensions_models.get(model) or ()):
                return self.native_error("bad_request", message=f"dimension {dimension!r} is not supported")
            size = dimension
        self.embedding_requests_total += 1
        tokens = sum(input_tokens(t) for t in texts)
        payload: dict[str, Any] = {
            "output": {"embeddings": [{"text_index": i, "embedding": embedding_vector(t, size)}
                                      for i, t in enumerate(texts)]},
            "request_id": str(uuid.uuid4()),
        }
        if not reply.omit_usage:
            payload["usage"] = {"total_tokens": tokens}
        return Response.json(payload, headers=reply.headers)
