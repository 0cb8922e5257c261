"""Loopback Together AI server (docs/platforms.md §1): its chat wire format and documented quirks.

Reproduced (each cited inline): usage on the finish_reason chunk with no separate
`choices: []` chunk, sent even without stream_options for most models; `eos`
finish_reason; `delta.reasoning`; flat `usage.cached_tokens`; the OpenAI-like error
envelope; 402 credits, 403 context length, 429 `dynamic_request_limited` with
`x-ratelimit-reset`, 503 overloaded. Must never call the real platform.
"""

from __future__ import annotations

from typing import Any

from tests.servers.base import Response
from tests.servers.openai_compat import ErrorSpec, OpenAICompatServer, Plan, Usage
from tests.servers.script import RecordedRequest

_RATE_HEADERS = (("x-ratelimit-limit", "10"), ("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "1"),
                 ("x-tokenlimit-limit", "20000"), ("x-tokenlimit-remaining", "0"))


class TogetherServer(OpenAICompatServer):
    platform = "together"
    base_path = "/v1"
    # docs/embeddings.md: OpenAI's shape, but no `usage` on the answer; GET /models is a bare array.
    embedding_models = {"BAAI/bge-large-en-v1.5": 1024, "intfloat/multilingual-e5-large-instruct": 1024}
    embedding_usage = False
    # §1 "Models, context, prices"; Kimi is here for the include_usage-only quirk.
    default_models = {
        "meta-llama/Llama-3.3-70B-Instruct-Turbo": 131_072,
        "Qwen/Qwen2.5-7B-Instruct-Turbo": 32_768,
        "meta-llama/Meta-Llama-3.1-8B-Instruct-Turbo": 131_072,
        "moonshotai/Kimi-K3": 262_144,
        "openai/gpt-oss-120b": 131_072,  # a reasoning model
        "acme/unpriced-chat": 32_768,  # no shipped price: the strict-pricing tests call it
    }
    default_api_key = "together-test-key"
    reasoning_field = "reasoning"  # §1 Streaming SSE: `delta.reasoning`, not reasoning_content
    usage_placement = "finish_chunk"  # §1: usage rides on the finish_reason chunk, no choices:[] chunk
    usage_null_on_chunks = True  # §1: "Earlier chunks have usage: null"
    max_tokens_fields = ("max_tokens",)  # §1 Request fields (OpenAPI): max_tokens only
    natural_finish = "eos"  # §1 FinishReason enum includes non-OpenAI `eos`
    chunk_extras: dict[str, Any] = {}
    # docs/platforms.md §11.15 (openapi.yaml): plain answers carry `LogprobsPart` {tokens, token_logprobs};
    # each streamed chunk a bare number.
    plain_logprobs = "legacy"
    stream_logprobs = "number"

    errors = {
        # §1 Errors: body {"error":{"message","type","param","code"}} and the status table.
        "auth": ErrorSpec(401, "invalid_request_error", "invalid_api_key",
                          "Invalid API key provided. You can find your API key in your account settings."),
        "not_found": ErrorSpec(404, "invalid_request_error", "model_not_available",
                               "Unable to access model {model}. Please check the list of supported models."),
        "bad_request": ErrorSpec(400, "invalid_request_error", None, "Invalid request."),
        "credits": ErrorSpec(402, "invalid_request_error", "credit_limit",
                             "Credit limit exceeded. Please add credits to your account."),
        # §1: 403 "input token count + max_tokens must be less than the context length".
        "context": ErrorSpec(403, "invalid_request_error", None,
                             "Input validation error: input token count ({prompt}) + max_tokens ({max_tokens}) "
                             "must be less than the context length ({context})."),
        # §1 Rate limits: above the dynamic rate -> 429 dynamic_request_limited / dynamic_token_limited,
        # with x-ratelimit-reset as "the suggested retry interval" (seconds).
        "rate_limit": ErrorSpec(429, "dynamic_request_limited", None,
                                "You are sending requests above your dynamic rate limit.", _RATE_HEADERS),
        "token_limit": ErrorSpec(429, "dynamic_token_limited", None,
                                 "You are sending tokens above your dynamic token limit.", _RATE_HEADERS),
        "server": ErrorSpec(500, "server_error", None, "Internal server error."),
        # §1: at or below your rate but the platform lacks capacity -> 503.
        "overloaded": ErrorSpec(503, "server_error", None, "The server is overloaded or not ready yet."),
        "timeout": ErrorSpec(504, "server_error", None, "Request timed out."),
    }

    def __init__(self, *, cached_tokens_in_details: bool = False,
                 usage_needs_flag_models: frozenset[str] = frozenset({"moonshotai/Kimi-K3"}),
                 natural_finish: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # §1: reasoning models report prompt_tokens_details.cached_tokens, others a flat usage.cached_tokens.
        self.cached_tokens_in_details = cached_tokens_in_details
        # §1: some models (e.g. Kimi-K3) stream usage only when include_usage is sent.
        self.usage_needs_flag_models = usage_needs_flag_models
        if natural_finish is not None:
            self.natural_finish = natural_finish

    def wants_stream_usage(self, body: dict[str, Any]) -> bool:
        if body.get("model") in self.usage_needs_flag_models:
            return super().wants_stream_usage(body)
        return True

    def check_context(self, body: dict[str, Any], model: str, prompt: int, limit: int | None) -> int | Response | None:
        # §1: context_length_exceeded_behavior defaults to "error"; "truncate" lowers max_tokens instead.
        context = self.models.get(model, 0)
        if body.get("context_length_exceeded_behavior") == "truncate" and context and prompt < context:
            return min(limit, context - prompt) if limit is not None else None
        return super().check_context(body, model, prompt, limit)

    def usage_json(self, usage: Usage) -> dict[str, Any]:
        # §1 observed final chunk: details are null and cached_tokens sits at the top of usage.
        out: dict[str, Any] = {
            "completion_tokens": usage.completion, "prompt_tokens": usage.prompt,
            "total_tokens": usage.total_tokens, "completion_tokens_details": None, "prompt_tokens_details": None,
        }
        if self.cached_tokens_in_details:
            out["prompt_tokens_details"] = {"cached_tokens": usage.cached}
        else:
            out["cached_tokens"] = usage.cached
        return out

    def delta(self, kind: str, text: str) -> dict[str, Any]:
        out = super().delta(kind, text)
        out["token_id"] = 0  # §1: extra `choices[].delta.token_id`
        return out

    def response_headers(self, plan: Plan | None) -> dict[str, str]:
        # §1 Rate limits: these headers come on ordinary responses too.
        return {"x-ratelimit-limit": "10", "x-ratelimit-remaining": "9", "x-ratelimit-reset": "1",
                "x-tokenlimit-limit": "20000", "x-tokenlimit-remaining": "19000"}




    # -- models ----------------------------------------------------------------------------------
    async def list_models(self, request: RecordedRequest) -> Response:
        """GET /v1/models: a bare JSON array of model objects with `type`, `context_length`, `pricing`
        (together-python `Models.list` reads the body as a list; docs/embeddings.md)."""
        denied = await self.models_preamble(request)
        if denied is not None:
            return denied
        data = [{"id": m, "object": "model", "created": 0, "type": "chat", "organization": m.split("/")[0],
                 "context_length": ctx, "pricing": {"input": 0, "output": 0}} for m, ctx in self.models.items()]
        data += [{"id": m, "object": "model", "created": 0, "type": "embedding", "organization": m.split("/")[0],
                  "context_length": 512, "pricing": {"input": 0, "output": 0}} for m in self.embedding_models]
        return Response.json(data)
