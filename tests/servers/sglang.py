"""Loopback SGLang OpenAI-compatible server (docs/platforms.md §6): its wire format and documented quirks.

Reproduced: `stream_options.include_usage` defaults to false (unlike vLLM);
`continuous_usage_stats` for per-chunk usage; a top-level `reasoning_tokens` in usage;
`finish_reason: "abort"` (script it with `Reply(finish_reason="abort")`);
`delta.reasoning_content`; the flat error body `{"object": "error", "message",
"type", "param", "code": int}`; optional Bearer key; `/health`, `/health_generate`,
`/get_model_info`, `/server_info`, Prometheus `/metrics`. Never calls anything.
"""

from __future__ import annotations

from typing import Any

from tests.servers.base import Response
from tests.servers.openai_compat import ErrorSpec, OpenAICompatServer, Plan, StreamUsage, Usage
from tests.servers.script import RecordedRequest


class SGLangServer(OpenAICompatServer):
    platform = "sglang"
    prefill = "continue_final_message"  # docs/failover.md: as vLLM
    base_path = "/v1"
    embedding_models = {"Alibaba-NLP/gte-Qwen2-1.5B-instruct": 1536}  # --is-embedding
    default_models = {"Qwen/Qwen2.5-7B-Instruct": 32_768}
    default_api_key = None  # §6: optional --api-key
    auth_mode = "optional"
    reasoning_field = "reasoning_content"  # §6 Reasoning
    usage_null_on_chunks = False
    chunk_extras: dict[str, Any] = {}

    errors = {
        # §6 flat ErrorResponse; context-overflow text is unconfirmed (§10.3).
        "auth": ErrorSpec(401, "Unauthorized", 401, "Unauthorized"),
        "not_found": ErrorSpec(404, "NotFoundError", 404, "The model '{model}' does not exist."),
        "bad_request": ErrorSpec(400, "BadRequestError", 400, "Invalid request."),
        "context": ErrorSpec(400, "BadRequestError", 400,
                             "Requested token count exceeds the model's maximum context length of {context} tokens. "
                             "You requested a total of {requested} tokens: {prompt} tokens from the input messages "
                             "and {max_tokens} tokens for the completion."),
        "server": ErrorSpec(500, "InternalServerError", 500, "Internal server error."),
        "overloaded": ErrorSpec(503, "ServiceUnavailable", 503, "The server is overloaded."),
    }

    def routes(self):  # type: ignore[override]
        routes = super().routes()
        for path in ("/health", "/health_generate"):
            routes[("GET", path)] = self.health
        routes[("GET", "/get_model_info")] = self.model_info
        routes[("GET", "/server_info")] = self.server_info
        routes[("GET", "/metrics")] = self.metrics
        return routes

    def error_body(self, spec: ErrorSpec, message: str, param: str | None) -> Any:
        return {"object": "error", "message": message, "type": spec.type, "param": param, "code": spec.code}

    def stream_usage(self, plan: Plan) -> StreamUsage:
        # §6: StreamOptions.include_usage defaults to False; continuous_usage_stats per chunk.
        options = plan.request.get("stream_options")
        if plan.usage is None or not isinstance(options, dict) or options.get("include_usage") is not True:
            return StreamUsage(False, False, False, False)
        per_chunk = options.get("continuous_usage_stats") is True
        return StreamUsage(per_chunk=per_chunk, on_finish=per_chunk, empty_chunk=True, null_others=False)

    def usage_json(self, usage: Usage) -> dict[str, Any]:
        return {"prompt_tokens": usage.prompt, "completion_tokens": usage.completion,
                "total_tokens": usage.total_tokens, "prompt_tokens_details": {"cached_tokens": usage.cached},
                "reasoning_tokens": usage.reasoning}  # §6: top-level reasoning_tokens

    def model_card(self, model: str, context: int) -> dict[str, Any]:
        return {"id": model, "object": "model", "created": 0, "owned_by": "sglang", "root": model,
                "max_model_len": context}

    async def health(self, request: RecordedRequest) -> Response:
        return Response(200)

    async def model_info(self, request: RecordedRequest) -> Response:
        model = next(iter(self.models), "")
        return Response.json({"model_path": model, "tokenizer_path": model, "is_generation": True})

    async def server_info(self, request: RecordedRequest) -> Response:
        return Response.json({"version": "0.5.0-loopback", "context_length": next(iter(self.models.values()), 0)})

    async def metrics(self, request: RecordedRequest) -> Response:
        model = next(iter(self.models), "")
        labels = f'{{model_name="{model}",engine_type="unified",tp_rank="0",pp_rank="0"}}'
        lines = [
            f"sglang:num_running_reqs{labels} {self.running}",
            f"sglang:num_queue_reqs{labels} 0",
            f"sglang:token_usage{labels} 0.0",
            f"sglang:prompt_tokens_total{labels} {self.prompt_tokens_total}",
            f"sglang:generation_tokens_total{labels} {self.generation_tokens_total}",
        ]
        return Response.text("\n".join(lines) + "\n")
