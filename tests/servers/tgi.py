"""Loopback HuggingFace TGI server (docs/platforms.md §7): its OpenAI route and documented quirks.

Reproduced: no auth; the model field is ignored (any id works); include_usage off by
default, a final `choices: []` chunk with plain usage (no cached/reasoning details)
when asked; no reasoning field; the non-OpenAI error body `{"error": str,
"error_type": str}` with TGI's status mapping (422 validation and context overflow,
429 overloaded/queue full, 424 generation error, 500 incomplete generation);
mid-stream errors as a `data:` event with the same JSON; `/health` 200 or 503
`{"error":"unhealthy","error_type":"healthcheck"}`; `/info`; `/metrics`. Never calls anything.
"""

from __future__ import annotations

from typing import Any

from tests.servers.base import Response
from tests.servers.openai_compat import ErrorSpec, OpenAICompatServer, Plan, Usage, sse
from tests.servers.script import RecordedRequest


class TGIServer(OpenAICompatServer):
    platform = "tgi"
    base_path = "/v1"
    embedding_models = {"BAAI/bge-small-en-v1.5": 384}  # TEI's OpenAI route, same /v1 base
    default_models = {"tgi": 4096}  # context = max_total_tokens; the model name is not checked
    default_api_key = None
    auth_mode = "none"  # §7 Auth: none built in
    usage_null_on_chunks = True
    max_tokens_fields = ("max_tokens",)
    role_chunk = False
    chunk_extras = {"system_fingerprint": "3.3.6-native"}
    choice_extras = {"logprobs": None}
    logprob_bytes = False  # §11.15: TGI's logprob entries have token, logprob, top_logprobs; no bytes
    mid_stream_error_kind = "generation"
    done_after_error = False

    errors = {
        # §7 status mapping from `impl From<InferError>`.
        "bad_request": ErrorSpec(422, "validation", None, "Input validation error: invalid request"),
        "validation": ErrorSpec(422, "validation", None, "Input validation error: invalid request"),
        # §7 Context overflow (router/src/validation.rs).
        "context": ErrorSpec(422, "validation", None,
                             "Input validation error: `inputs` tokens + `max_new_tokens` must be <= {context}. "
                             "Given: {prompt} `inputs` tokens and {max_tokens} `max_new_tokens`"),
        "overloaded": ErrorSpec(429, "overloaded", None, "Model is overloaded"),  # §7: queue full
        "rate_limit": ErrorSpec(429, "overloaded", None, "Model is overloaded"),
        "generation": ErrorSpec(424, "generation", None, "Request failed during generation: Server error"),
        "template": ErrorSpec(422, "template_error", None, "Template error: chat template failed"),
        "server": ErrorSpec(500, "incomplete_generation", None, "Incomplete generation"),
    }

    def __init__(self, *, context_tokens: int = 4096, **kwargs: Any) -> None:
        kwargs.setdefault("models", {"tgi": context_tokens})
        super().__init__(**kwargs)
        self.healthy = True

    def routes(self):  # type: ignore[override]
        routes = super().routes()
        routes[("GET", "/health")] = self.health
        routes[("GET", "/info")] = self.info
        routes[("GET", "/metrics")] = self.metrics
        return routes

    def error_body(self, spec: ErrorSpec, message: str, param: str | None) -> Any:
        return {"error": message, "error_type": spec.type}

    def mid_stream_error(self, kind: str, message: str | None) -> bytes:
        spec = self.errors[kind]
        return sse({"error": message or spec.message, "error_type": spec.type})  # §7: same JSON as a data event

    def accepts_model(self, model: Any) -> bool:
        return True  # TGI serves one model and ignores the request's model field

    def check_context(self, body: dict[str, Any], model: str, prompt: int, limit: int | None) -> int | Response | None:
        context = next(iter(self.models.values()))
        if prompt + (limit or 0) > context:
            return self.error_response("context", context=context, prompt=prompt, max_tokens=limit or 0)
        return limit

    def make_plan(self, body, model, prompt, limit, reply):  # type: ignore[override]
        plan = super().make_plan(body, next(iter(self.models)), prompt, limit, reply)
        plan.id = ""  # TGI chunk ids are empty
        return plan

    def usage_json(self, usage: Usage) -> dict[str, Any]:
        # §7: usage {prompt_tokens, completion_tokens, total_tokens}, no cached or reasoning details.
        return {"prompt_tokens": usage.prompt, "completion_tokens": usage.completion,
                "total_tokens": usage.total_tokens}

    def response_headers(self, plan: Plan | None) -> dict[str, str]:
        return {"x-compute-type": "loopback"}

    async def health(self, request: RecordedRequest) -> Response:
        if self.healthy:
            return Response(200)
        return Response.json({"error": "unhealthy", "error_type": "healthcheck"}, 503)  # §7 /health

    async def info(self, request: RecordedRequest) -> Response:
        return Response.json({"model_id": next(iter(self.models)), "max_total_tokens": next(iter(self.models.values())),
                              "version": "3.3.6"})

    async def metrics(self, request: RecordedRequest) -> Response:
        lines = [f"tgi_request_count {self.requests_total}", "tgi_queue_size 0",
                 f"tgi_batch_current_size {self.running}"]
        return Response.text("\n".join(lines) + "\n")
