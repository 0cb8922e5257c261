"""Log probabilities as platforms send them -> OpenAI's `ChoiceLogprobs` shape. Sans-I/O.

Most servers send OpenAI's shape, `{"content": [{token, logprob, bytes, top_logprobs}], "refusal": ...}`,
in plain answers and on every streamed chunk. Two others occur (docs/platforms.md §11.15): the legacy
completions shape `{tokens, token_logprobs, top_logprobs: [{token: logprob}]}` (Fireworks when
`logprobs` is an integer), and a bare number per streamed chunk (Together), the log probability of
the chunk's token. Both are rewritten to OpenAI's shape; anything else is dropped (None).
"""

from __future__ import annotations

from typing import Any, Dict, List

__all__ = ["logprobs_from_wire"]


def _legacy(value: Dict[str, Any]) -> Dict[str, Any] | None:
    tokens = value.get("tokens")
    logprobs = value.get("token_logprobs")
    if not isinstance(tokens, list) or not isinstance(logprobs, list):
        return None
    tops = value.get("top_logprobs")
    content: List[Dict[str, Any]] = []
    for i, (token, logprob) in enumerate(zip(tokens, logprobs)):
        if not isinstance(token, str) or not isinstance(logprob, (int, float)):
            return None
        top = tops[i] if isinstance(tops, list) and i < len(tops) else None
        alternatives = (
            [{"token": t, "logprob": p} for t, p in top.items() if isinstance(p, (int, float))]
            if isinstance(top, dict) else []
        )
        content.append({"token": token, "logprob": logprob, "bytes": None, "top_logprobs": alternatives})
    return {"content": content, "refusal": None}


def logprobs_from_wire(value: Any, token_text: str | None = None) -> Dict[str, Any] | None:
    """A choice's `logprobs` field as received -> OpenAI's shape (a dict), or None.

    `token_text` is the chunk's text, used when the value is a bare number (one token per chunk).
    """
    if value is None:
        return None
    if isinstance(value, dict):
        if "content" in value or "refusal" in value:
            return value
        return _legacy(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and token_text is not None:
        return {"content": [{"token": token_text, "logprob": value, "bytes": None, "top_logprobs": []}],
                "refusal": None}
    return None
