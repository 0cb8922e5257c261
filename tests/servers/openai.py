"""Loopback OpenAI Chat Completions server: the baseline every other platform is compared with (docs/platforms.md §0).

Quirks reproduced: include_usage adds a final `choices: []` chunk and puts
`usage: null` on all other chunks; no usage without the flag; a separate role
chunk with empty content first; `x-ratelimit-*` headers with durations on 429;
two different 429 causes (rate limit vs quota). Must never call the real API.
"""

from __future__ import annotations

from typing import Any

from tests.servers.openai_compat import OpenAICompatServer, Plan


class OpenAIServer(OpenAICompatServer):
    platform = "openai"
    base_path = "/v1"
    embedding_models = {"text-embedding-3-small": 1536}  # OpenAI: dimensions shortens a v3 vector
    dimensions_models = {"text-embedding-3-small": None}
    default_models = {"gpt-4o-mini": 128_000, "gpt-4o": 128_000}
    default_api_key = "sk-test-openai"
    # §0 final usage chunk example carries service_tier and system_fingerprint.
    chunk_extras = {"service_tier": "default", "system_fingerprint": "fp_loopback"}

    def response_headers(self, plan: Plan | None) -> dict[str, Any]:
        # §0 rate-limit headers; reset values are durations like "12ms".
        return {
            "x-request-id": f"req_{next(self._ids)}",
            "x-ratelimit-limit-requests": "500",
            "x-ratelimit-remaining-requests": "499",
            "x-ratelimit-reset-requests": "120ms",
            "x-ratelimit-limit-tokens": "200000",
            "x-ratelimit-remaining-tokens": "199000",
            "x-ratelimit-reset-tokens": "300ms",
        }
