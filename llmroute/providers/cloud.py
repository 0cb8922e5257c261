"""Together, Fireworks and SiliconFlow: OpenAI-compatible, with what each does differently.

What all three share with the base adapter (usage on the finish chunk or cumulative on every chunk,
`delta.reasoning`, `eos`, their error envelopes) is handled there; only request-side quirks live
here. Sources: docs/platforms.md §1-§3. Sans-I/O.
"""

from __future__ import annotations

from typing import Any, Dict

from llmroute.providers.base import CallInput, OpenAICompatAdapter

__all__ = ["TogetherAdapter", "FireworksAdapter", "SiliconFlowAdapter"]


class TogetherAdapter(OpenAICompatAdapter):
    """§1: errors on context overflow by default (400 or 403); usage on the finish_reason chunk."""


class FireworksAdapter(OpenAICompatAdapter):
    """§2: by default Fireworks silently lowers max_tokens when the prompt is too long.

    We ask it to fail instead (`context_length_exceeded_behavior = "error"`), so that a too-long
    request raises `ContextLengthError` and can move to a deployment with a larger window, rather
    than returning a truncated answer nobody asked for. A user's own setting wins.
    """

    def body(self, call: CallInput, stream: bool) -> Dict[str, Any]:
        body = super().body(call, stream)
        body.setdefault("context_length_exceeded_behavior", "error")
        return body


class SiliconFlowAdapter(OpenAICompatAdapter):
    """§3: cumulative usage on every stream chunk (the base keeps the last); `{"code","message"}` errors."""
