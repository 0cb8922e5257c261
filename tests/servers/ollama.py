"""Loopback Ollama server, OpenAI-compatible route (docs/platforms.md §9): its wire format and quirks.

Reproduced: the API key is "required but ignored"; usage only with include_usage, as
a final `choices: []` chunk with plain usage (no cached details); no `usage: null`
on other chunks; `delta.reasoning` / `message.reasoning`; errors
`{"error": {"message","type","param","code"}}` with type invalid_request_error (400),
not_found_error (404) or api_error; unknown model -> 404 "model ... not found";
context overflow 400 "The prompt is too long: N, model maximum context length: M";
`GET /` "Ollama is running", `/api/version`, `/api/tags`, `/api/ps`, no `/metrics`.
Never calls anything.
"""

from __future__ import annotations

from typing import Any

from tests.servers.base import Response
from tests.servers.openai_compat import ErrorSpec, OpenAICompatServer, Usage
from tests.servers.script import RecordedRequest


class OllamaServer(OpenAICompatServer):
    platform = "ollama"
    base_path = "/v1"
    embedding_models = {"nomic-embed-text": 768}  # /v1/embeddings (OpenAI compatibility)
    default_models = {"qwen2.5:7b": 32_768, "llama3.1:8b": 131_072}
    default_api_key = None
    auth_mode = "none"  # §9: api_key "required but ignored"
    reasoning_field = "reasoning"  # §9: `reasoning` on message and delta
    usage_null_on_chunks = False
    role_chunk = False
    max_tokens_fields = ("max_tokens",)
    chunk_extras = {"system_fingerprint": "fp_ollama"}
    choice_extras: dict[str, Any] = {}

    errors = {
        # §9 openai.NewError: type by status.
        "not_found": ErrorSpec(404, "not_found_error", None, 'model "{model}" not found, try pulling it first'),
        "bad_request": ErrorSpec(400, "invalid_request_error", None, "invalid request"),
        "context": ErrorSpec(400, "invalid_request_error", None,
                             "The prompt is too long: {prompt}, model maximum context length: {context}"),
        "server": ErrorSpec(500, "api_error", None, "an error was encountered while running the model"),
        "overloaded": ErrorSpec(503, "api_error", None, "server busy, please try again. maximum pending requests exceeded"),
    }

    def __init__(self, *, context_overflow: str = "error", **kwargs: Any) -> None:
        """`context_overflow`: "error" (the Ollama Cloud 400 of §9) or "truncate" (local servers cut the prompt)."""
        super().__init__(**kwargs)
        self.context_overflow = context_overflow

    def routes(self):  # type: ignore[override]
        routes = super().routes()
        routes[("GET", "/")] = self.root
        routes[("GET", "/api/version")] = self.api_version
        routes[("GET", "/api/tags")] = self.api_tags
        routes[("GET", "/api/ps")] = self.api_tags
        return routes

    def check_context(self, body, model, prompt, limit):  # type: ignore[override]
        context = self.models.get(model, 0)
        if self.context_overflow == "error" and context and prompt > context:
            return self.error_response("context", prompt=prompt, context=context)
        return limit

    def usage_json(self, usage: Usage) -> dict[str, Any]:
        # §9 ToUsage: from prompt_eval_count / eval_count, no details.
        return {"prompt_tokens": usage.prompt, "completion_tokens": usage.completion,
                "total_tokens": usage.total_tokens}

    async def root(self, request: RecordedRequest) -> Response:
        return Response.text("Ollama is running")

    async def api_version(self, request: RecordedRequest) -> Response:
        return Response.json({"version": "0.12.0"})

    async def api_tags(self, request: RecordedRequest) -> Response:
        return Response.json({"models": [{"name": m, "model": m} for m in self.models]})
