"""Loopback llama.cpp server identity and continuation (for failover tests that need many of them).

The real server (tests/servers/llamacpp.py) is the reference; this mimics what llmroute reads from
it, checked against that server: every response carries `Server: llama.cpp`; `GET /v1/models` cards
have `owned_by: "llamacpp"`; `GET /props` has `default_generation_settings` and `total_slots`; `/info`
and `/version` are 404; a trailing assistant message is continued (the prefill), unless `refuse`
(thinking mode: 400 "Assistant response prefill is incompatible with enable_thinking"). Never calls
anything.
"""

from __future__ import annotations

from typing import Any

from tests.servers.base import Response
from tests.servers.openai_compat import OpenAICompatServer, Plan
from tests.servers.script import RecordedRequest


class LlamaCppWireServer(OpenAICompatServer):
    platform = "llamacpp"
    base_path = "/v1"
    default_models = {"gemma-3-270m": 2048}
    default_api_key = None
    auth_mode = "optional"
    prefill = "trailing_assistant"
    chunk_extras: dict[str, Any] = {}

    def __init__(self, *, refuse_prefill: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if refuse_prefill:
            self.prefill = "refuse"

    def accepts_model(self, model: Any) -> bool:
        return True  # one model loaded; the request's model field is not checked

    def routes(self):  # type: ignore[override]
        routes = super().routes()
        routes[("GET", "/props")] = self.props
        return routes

    async def handle(self, request: RecordedRequest) -> Response:
        response = await super().handle(request)
        response.headers.append(("Server", "llama.cpp"))
        return response

    def response_headers(self, plan: Plan | None) -> dict[str, str]:
        return {}

    async def props(self, request: RecordedRequest) -> Response:
        model, context = next(iter(self.models.items()))
        return Response.json({"default_generation_settings": {"n_ctx": context, "params": {"temperature": 0.8}},
                              "total_slots": 2, "model_path": f"/models/{model}.gguf", "build_info": "loopback"})
