"""Loopback vLLM OpenAI-compatible server (docs/platforms.md §5): its wire format and documented quirks.

Reproduced: a `stream_options` object turns include_usage on by default (final
`choices: []` chunk); `continuous_usage_stats` adds cumulative usage to every chunk;
`--enable-force-include-usage` as `force_include_usage=True`; `delta.reasoning`
(or the older `reasoning_content`); errors `{"error": {..., "code": <int status>}}`
or the older flat `{"object": "error", ...}`; context overflow 400 "Input length (N)
exceeds model's maximum context length (M)."; optional Bearer key; `/health` (503 only
when the engine is dead), `/v1/models` with `max_model_len`, Prometheus `/metrics`.
Never calls anything.
"""

from __future__ import annotations

from typing import Any

from tests.servers.base import Response
from tests.servers.openai_compat import ErrorSpec, OpenAICompatServer, Plan, StreamUsage
from tests.servers.script import RecordedRequest


class VLLMServer(OpenAICompatServer):
    platform = "vllm"
    prefill = "continue_final_message"  # docs/failover.md: continue_final_message + add_generation_prompt false
    base_path = "/v1"
    embedding_models = {"BAAI/bge-m3": 1024}  # a pooling model (--runner pooling)
    embedding_id_prefix = "embd-"
    default_models = {"Qwen/Qwen2.5-7B-Instruct": 32_768}
    default_api_key = None  # §5: auth only with --api-key
    auth_mode = "optional"
    reasoning_field = "reasoning"  # §5: `reasoning` since PR #27752; reasoning_content removed
    usage_placement = "empty_chunk"
    usage_null_on_chunks = False
    chunk_extras: dict[str, Any] = {}
    mid_stream_error_kind = "server"

    errors = {
        # §5 Error body: {"error": {"message","type","param","code": <HTTP status int>}}.
        "not_found": ErrorSpec(404, "NotFoundError", 404, "The model `{model}` does not exist."),
        "bad_request": ErrorSpec(400, "BadRequestError", 400, "Invalid request."),
        # §5 Context overflow text.
        "context": ErrorSpec(400, "BadRequestError", 400,
                             "Input length ({prompt}) exceeds model's maximum context length ({context})."),
        "max_tokens_too_large": ErrorSpec(
            400, "BadRequestError", 400,
            "'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's maximum context "
            "length is {context} tokens and your request has {prompt} input tokens."),
        "server": ErrorSpec(500, "InternalServerError", 500, "Internal server error."),
        "overloaded": ErrorSpec(503, "ServiceUnavailableError", 503, "The engine is not available."),
    }

    def __init__(self, *, legacy_errors: bool = False, reasoning_field: str | None = None,
                 force_include_usage: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.legacy_errors = legacy_errors  # §5: older releases used the flat object:"error" body
        if reasoning_field is not None:
            self.reasoning_field = reasoning_field  # "reasoning_content" for v0.8-0.10 era servers
        self.force_include_usage = force_include_usage  # §5 --enable-force-include-usage
        self.engine_dead = False  # set True to make /health answer 503 (§5 EngineDeadError)

    def routes(self):  # type: ignore[override]
        routes = super().routes()
        routes[("GET", "/health")] = self.health
        routes[("GET", "/metrics")] = self.metrics
        routes[("GET", "/version")] = self.version
        return routes

    def error_body(self, spec: ErrorSpec, message: str, param: str | None) -> Any:
        if self.legacy_errors:
            return {"object": "error", "message": message, "type": spec.type, "param": param, "code": spec.code}
        return {"error": {"message": message, "type": spec.type, "param": param, "code": spec.code}}

    def auth_response(self, request: RecordedRequest) -> Response | None:
        if self.api_key is None or request.bearer == self.api_key:
            return None
        return Response.json({"error": "Unauthorized"}, 401)  # vLLM's API-key middleware body

    def check_context(self, body: dict[str, Any], model: str, prompt: int, limit: int | None) -> int | Response | None:
        context = self.models.get(model, 0)
        if context and prompt > context:
            return self.error_response("context", prompt=prompt, context=context)
        if context and limit is not None and prompt + limit > context:
            return self.error_response("max_tokens_too_large", prompt=prompt, context=context, max_tokens=limit)
        return limit

    def stream_usage(self, plan: Plan) -> StreamUsage:
        # §5 should_include_usage: include_usage defaults to true inside a stream_options object;
        # continuous_usage_stats adds per-chunk usage; the force flag turns both on.
        options = plan.request.get("stream_options")
        options = options if isinstance(options, dict) else None
        if plan.usage is None:
            return StreamUsage(False, False, False, False)
        final = self.force_include_usage or (options is not None and bool(options.get("include_usage", True)))
        per_chunk = self.force_include_usage or (final and bool(options and options.get("continuous_usage_stats")))
        return StreamUsage(per_chunk=per_chunk, on_finish=per_chunk, empty_chunk=final, null_others=False)

    def model_card(self, model: str, context: int) -> dict[str, Any]:
        return {"id": model, "object": "model", "created": 0, "owned_by": "vllm", "root": model,
                "max_model_len": context}  # §5 ModelCard includes max_model_len

    async def health(self, request: RecordedRequest) -> Response:
        # §5 /health: empty body, 200, or 503 only on EngineDeadError; never authenticated.
        return Response(503 if self.engine_dead else 200)

    async def version(self, request: RecordedRequest) -> Response:
        return Response.json({"version": "0.11.0-loopback"})

    async def metrics(self, request: RecordedRequest) -> Response:
        # §5 Prometheus names (labels model_name, engine; counters with _total).
        model = next(iter(self.models), "")
        labels = f'{{engine="0",model_name="{model}"}}'
        lines = [
            "# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running{labels} {self.running}",
            "# TYPE vllm:num_requests_waiting gauge", f"vllm:num_requests_waiting{labels} 0",
            "# TYPE vllm:kv_cache_usage_perc gauge", f"vllm:kv_cache_usage_perc{labels} 0.0",
            "# TYPE vllm:prompt_tokens counter", f"vllm:prompt_tokens_total{labels} {self.prompt_tokens_total}",
            "# TYPE vllm:generation_tokens counter",
            f"vllm:generation_tokens_total{labels} {self.generation_tokens_total}",
        ]
        return Response.text("\n".join(lines) + "\n", headers={"Content-Type": "text/plain; version=0.0.4"})
