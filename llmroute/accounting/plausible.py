"""Whether a platform's reported usage can be believed. Sans-I/O.

A usage object is money: a negative count, or one orders of magnitude past what a deployment can
process, is a platform bug (or a hostile server) and must not reach the ledger as fact. The call
then prices tiktoken's estimate instead, marked estimated, and the attempt's note says why.
"""

from __future__ import annotations

from typing import Any

__all__ = ["implausible_usage", "MAX_TOKENS_WITHOUT_WINDOW", "WINDOW_FACTOR"]

MAX_TOKENS_WITHOUT_WINDOW = 100_000_000  # no deployment today reads or writes 10^8 tokens in one call
WINDOW_FACTOR = 100  # "orders of magnitude" past a known context window


def implausible_usage(usage: Any, context_window: int | None) -> str | None:
    """Why `usage` cannot be true (None if it can): a negative count, or a count past the bound."""
    bound = context_window * WINDOW_FACTOR if context_window else MAX_TOKENS_WITHOUT_WINDOW
    values = (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens,
              usage.prompt_tokens_details.cached_tokens, usage.completion_tokens_details.reasoning_tokens)
    if None not in values and min(values) >= 0 and max(values) <= bound:
        return None  # every answer's usage: nothing to name
    counts = {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "cached_tokens": usage.prompt_tokens_details.cached_tokens,
        "reasoning_tokens": usage.completion_tokens_details.reasoning_tokens,
    }
    for name, value in counts.items():
        if value is None:
            continue
        if value < 0:
            return f"{name} {value} is negative"
        if value > bound:
            return f"{name} {value} is past {bound}"
    return None
