"""Self-hosted servers: vLLM, SGLang, TGI, llama.cpp, Ollama and any OpenAI-compatible server.

They all speak the OpenAI wire format; the base adapter reads their error envelopes (flat SGLang,
TGI's `{"error": str}`), reasoning fields and usage chunks. What is left is Ollama's list of
parameters it ignores (docs/platforms.md §9, §11.12). Sans-I/O.
"""

from __future__ import annotations

from typing import Any, Dict

from llmroute import errors as E
from llmroute.providers.base import OpenAICompatAdapter

__all__ = ["SelfHostedAdapter", "OllamaAdapter"]


class SelfHostedAdapter(OpenAICompatAdapter):
    """vLLM, SGLang, TGI, llama.cpp and plain OpenAI-compatible servers."""


class OllamaAdapter(OpenAICompatAdapter):
    """Ollama ignores `n`, `tool_choice`, `logit_bias` and `user` (§9): refuse what would change the answer."""

    def check_params(self, params: Dict[str, Any]) -> None:
        params.pop("user", None)  # attribution only: harmless to drop
        refused = []
        if params.get("n", 1) != 1:
            refused.append("n")
        if params.get("logit_bias"):
            refused.append("logit_bias")
        if params.get("tool_choice") not in (None, "auto"):
            refused.append("tool_choice")
        params.pop("n", None)
        params.pop("logit_bias", None)
        if params.get("tool_choice") == "auto":
            params.pop("tool_choice")
        if refused:
            raise E.BadRequestError(
                f"Ollama ignores {', '.join(refused)}; refusing rather than returning a different answer",
                provider=self.provider.name,
                deployment=self.deployment.id,
            )
