"""Loopback Fireworks AI server (docs/platforms.md §2): its chat wire format and documented quirks.

Reproduced: base path /inference/v1; usage always on the last (finish_reason) chunk,
no stream_options needed; `delta.reasoning_content`, or reasoning inline in `<think>`
tags for chosen models; `max_tokens` and `max_completion_tokens` mutually exclusive;
silent max_tokens truncation unless `context_length_exceeded_behavior="error"`;
`perf_metrics` (with cached-prompt-tokens) when `perf_metrics_in_response=true`;
errors with `code:"NOT_FOUND"`, 402, 412; rate-limit headers. Never calls the platform.
"""

from __future__ import annotations

from typing import Any

from tests.servers.base import Response
from tests.servers.openai_compat import ErrorSpec, OpenAICompatServer, Plan, Usage

_RATE_HEADERS = (("X-Ratelimit-Limit-Tokens-Prompt", "60000"),
                 ("X-Ratelimit-Limit-Tokens-Cache-Adjusted-Prompt", "15000"),
                 ("X-Ratelimit-Limit-Tokens-Generated", "600"))


class FireworksServer(OpenAICompatServer):
    platform = "fireworks"
    base_path = "/inference/v1"  # §2 Endpoint: https://api.fireworks.ai/inference/v1
    embedding_models = {"nomic-ai/nomic-embed-text-v1.5": 768}  # docs/embeddings.md: dimensions (Matryoshka)
    dimensions_models = {"nomic-ai/nomic-embed-text-v1.5": None}
    default_models = {  # §2 Models table
        "accounts/fireworks/models/llama-v3p1-8b-instruct": 131_072,
        "accounts/fireworks/models/llama-v3p3-70b-instruct": 131_072,
        "accounts/fireworks/models/qwen2p5-72b-instruct": 131_072,
        "accounts/fireworks/models/gpt-oss-120b": 131_072,  # priced with a cached-input rate (docs/pricing.md)
    }
    default_api_key = "fw-test-key"
    reasoning_field = "reasoning_content"  # §2 chunk schema: delta.reasoning_content
    usage_placement = "finish_chunk"  # §2: "usage ... returned in the very last chunk" (finish_reason set)
    usage_null_on_chunks = False
    chunk_extras: dict[str, Any] = {}

    def logprobs_style(self, body: dict[str, Any], stream: bool) -> str | None:
        # §11.15: an integer `logprobs` gets the legacy completions shape, `true` OpenAI's.
        value = body.get("logprobs")
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return "legacy"
        return super().logprobs_style(body, stream)

    errors = {
        # §2 Errors: status table; body observed as {"error":{"message","param","code":"NOT_FOUND",...}}
        # (gRPC-style codes; only NOT_FOUND is observed, the other code names are unconfirmed).
        "auth": ErrorSpec(401, "invalid_request_error", "UNAUTHENTICATED", "The API key you provided is invalid."),
        "not_found": ErrorSpec(404, "invalid_request_error", "NOT_FOUND",
                               "Model not found, inaccessible, and/or not deployed"),
        "bad_request": ErrorSpec(400, "invalid_request_error", "INVALID_ARGUMENT", "Invalid request."),
        "credits": ErrorSpec(402, "invalid_request_error", "PAYMENT_REQUIRED",
                             "Account is over its spending limit or out of credits."),
        "forbidden": ErrorSpec(403, "invalid_request_error", "PERMISSION_DENIED", "Forbidden."),
        "suspended": ErrorSpec(412, "invalid_request_error", "FAILED_PRECONDITION", "Account suspended."),
        # §2: a 400 "The prompt is too long: N, model maximum context length: M" form (unconfirmed).
        "context": ErrorSpec(400, "invalid_request_error", "INVALID_ARGUMENT",
                             "The prompt is too long: {prompt}, model maximum context length: {context}"),
        "rate_limit": ErrorSpec(429, "rate_limit_error", "RESOURCE_EXHAUSTED",
                                "Too many requests: rate limit exceeded.", _RATE_HEADERS),
        "server": ErrorSpec(500, "server_error", "INTERNAL", "Internal server error."),
        "overloaded": ErrorSpec(503, "server_error", "UNAVAILABLE", "Service Overloaded"),  # §2 load shedding
    }

    def __init__(self, *, inline_think_models: frozenset[str] = frozenset(), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # §2: "For some models [reasoning] is left inline in content inside <think> tags".
        self.inline_think_models = inline_think_models

    def error_body(self, spec: ErrorSpec, message: str, param: str | None) -> Any:
        return {"error": {"object": "error", "type": spec.type, "message": message,
                          "param": param, "code": spec.code}}

    def wants_stream_usage(self, body: dict[str, Any]) -> bool:
        return True  # §2: usage comes on the last chunk without any flag

    def max_tokens_of(self, body: dict[str, Any]) -> int | Response | None:
        # §2 Request fields: max_completion_tokens is an alias, mutually exclusive with max_tokens.
        if body.get("max_tokens") is not None and body.get("max_completion_tokens") is not None:
            return self.error_response("bad_request", param="max_tokens",
                                       message="max_tokens and max_completion_tokens are mutually exclusive")
        return super().max_tokens_of(body)

    def check_context(self, body: dict[str, Any], model: str, prompt: int, limit: int | None) -> int | Response | None:
        # §2 / §11.6: the default `truncate` silently lowers max_tokens; only `error` fails.
        context = self.models.get(model, 0)
        if not context or prompt + (limit or 0) <= context:
            return limit
        if body.get("context_length_exceeded_behavior") == "error" or prompt >= context:
            return self.error_response("context", prompt=prompt, context=context, param="messages")
        return context - prompt

    def make_plan(self, body, model, prompt, limit, reply):  # type: ignore[override]
        plan = super().make_plan(body, model, prompt, limit, reply)
        if model in self.inline_think_models:
            reasoning = [t for k, t in plan.items if k == "reasoning"]
            content = [("content", t) for k, t in plan.items if k == "content"]
            if reasoning:
                thought = [("content", "<think>")] + [("content", t) for t in reasoning] + [("content", "</think>")]
                plan.items = thought + content
        return plan

    def perf_metrics(self, plan: Plan) -> dict[str, Any]:
        usage = plan.usage or Usage(0, 0)
        return {"prompt-tokens": usage.prompt, "cached-prompt-tokens": usage.cached,
                "server-time-to-first-token": 0.001, "server-processing-time": 0.002}

    def final_chunk_extras(self, plan: Plan) -> dict[str, Any]:
        # §2: perf_metrics on the final chunk only when perf_metrics_in_response=true.
        return {"perf_metrics": self.perf_metrics(plan)} if plan.request.get("perf_metrics_in_response") else {}

    def completion_body(self, plan: Plan) -> dict[str, Any]:
        body = super().completion_body(plan)
        body.update(self.final_chunk_extras(plan))
        return body

    def response_headers(self, plan: Plan | None) -> dict[str, str]:
        headers = dict(_RATE_HEADERS)
        if plan is not None and not plan.request.get("stream"):
            # §2: non-streaming responses carry metrics in fireworks-* headers.
            metrics = self.perf_metrics(plan)
            headers["fireworks-prompt-tokens"] = str(metrics["prompt-tokens"])
            headers["fireworks-cached-prompt-tokens"] = str(metrics["cached-prompt-tokens"])
            headers["fireworks-server-time-to-first-token"] = str(metrics["server-time-to-first-token"])
        return headers
