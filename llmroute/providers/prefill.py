"""Continuing a partial answer: which deployments can, and the request that asks them to.

When an answer dies after content started, the conversation plus the partial answer as a final
assistant message is sent to a deployment that can continue an assistant prefill, and the texts are
joined. Each platform marks "continue this message" its own way (sources in docs/failover.md):

* vLLM and SGLang: `continue_final_message: true` and `add_generation_prompt: false` in the body.
* llama.cpp's server: a trailing assistant message is continued by default (`--no-prefill-assistant`
  turns that off; thinking mode refuses it with a 400).
* Bailian / DashScope compatible mode: `"partial": true` on the last assistant message ("partial
  mode", Qwen models in non-thinking mode).
* Together, Fireworks, SiliconFlow, TGI, Ollama: not documented, so off unless a deployment sets
  `continue_prefill = true` (then the vLLM form is sent).

An `openai-compatible` (or self-hosted kind's) deployment identified as one of these servers uses
that server's style (`server_identity.SERVER_STYLE`, chosen by `_call/engine.Engine.continue_style`).

Sans-I/O: plain functions over `CallInput`.
"""

from __future__ import annotations

from typing import Dict

from llmroute.providers.base import CallInput

__all__ = ["CONTINUE_STYLE_BY_KIND", "continue_style", "continuation_call"]

# kind -> how that kind is asked to continue a final assistant message.
CONTINUE_STYLE_BY_KIND: Dict[str, str] = {
    "vllm": "continue_final_message",
    "sglang": "continue_final_message",
    "llamacpp": "trailing_assistant",
    "bailian": "partial",
}


def continue_style(kind: str, protocol: str, configured: bool | None) -> str | None:
    """How a deployment continues a partial answer, or None when it cannot.

    `configured` is the deployment's `continue_prefill` (None: the kind's documented default)."""
    if configured is False:
        return None
    style = CONTINUE_STYLE_BY_KIND.get(kind)
    if kind == "bailian" and protocol != "compatible":
        style = None  # the native protocol takes the same flag in another envelope: not built here
    if style is None and configured:
        return "continue_final_message"
    return style


def continuation_call(call: CallInput, partial_text: str, style: str, *, produced_tokens: int) -> CallInput:
    """The call that asks for the rest of `partial_text`: the conversation, then the partial answer
    as a final assistant message marked the way `style` says. An output cap shrinks by what the
    partial answer already used."""
    message: Dict[str, object] = {"role": "assistant", "content": partial_text}
    extra_body = dict(call.extra_body)
    if style == "partial":
        message["partial"] = True
    elif style == "continue_final_message":
        extra_body["continue_final_message"] = True
        extra_body["add_generation_prompt"] = False
    params = dict(call.params)
    for cap in ("max_tokens", "max_completion_tokens"):
        if params.get(cap):
            params[cap] = max(1, int(params[cap]) - produced_tokens)
    return CallInput(messages=[*call.messages, message], params=params, extra_body=extra_body,
                     extra_headers=dict(call.extra_headers))
