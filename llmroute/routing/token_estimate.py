"""A conversation's size in tokens, estimated from its characters (no tokenizer): what every call's prompt
estimate (`_call/call.py`) and the routing rules' token conditions need, without the classifier's word tables
and patterns, which load only when a `model="auto"` call is scored (classifier.py re-exports these names).

Plain functions over strings; no I/O, no state, and no import of the classifier.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["estimate_tokens", "message_text"]

_SAMPLE_CHARS = 256  # a long text's ASCII share is judged by its first and last this many characters


def message_text(message: Mapping[str, Any]) -> str:
    """The text of one OpenAI-shaped message: a string, a list of text parts, or nothing.

    Image and audio parts carry no text; tool-call arguments count, since they fill the context.
    Shapes this does not know contribute no text rather than raising: the request is validated
    elsewhere and routing must not be the place a call fails.
    """
    content = message.get("content")
    if isinstance(content, str):
        text = content
    elif isinstance(content, (list, tuple)):
        text = "\n".join(
            part["text"] for part in content
            if isinstance(part, Mapping) and isinstance(part.get("text"), str)
        )
    else:
        text = ""
    tool_calls = message.get("tool_calls")
    if isinstance(tool_calls, (list, tuple)):
        for call in tool_calls:
            fn = call.get("function") if isinstance(call, Mapping) else None
            args = fn.get("arguments") if isinstance(fn, Mapping) else None
            if isinstance(args, str):
                text += "\n" + args
    return text


def _ascii_share(text: str) -> float:
    """Share of ASCII characters; a long text is judged by its first and last `_SAMPLE_CHARS`
    characters, so the cost is bounded whatever the size of the context."""
    if text.isascii():
        return 1.0
    if len(text) > 2 * _SAMPLE_CHARS:
        text = text[:_SAMPLE_CHARS] + text[-_SAMPLE_CHARS:]
    return len(text.encode("ascii", "ignore")) / len(text)


def _text_tokens(text: str) -> float:
    # Open-weight tokenizers (Qwen, Llama 3, DeepSeek) spend about 0.6-0.8 tokens per Chinese
    # character and ~4 characters per English token. Non-ASCII characters are counted as CJK: the
    # ASCII encoder drops them at C speed, and accented Latin letters are too few to matter.
    share = _ascii_share(text)
    return len(text) * (share / 4.0 + (1.0 - share) * 0.75)


def estimate_tokens(messages: Sequence[Mapping[str, Any]]) -> int:
    """Estimated input tokens of a conversation, from characters (no tokenizer on the hot path)."""
    total = 0.0
    for message in messages:
        if isinstance(message, Mapping):
            total += _text_tokens(message_text(message)) + 4  # role and separators
    return int(total + 0.5)
