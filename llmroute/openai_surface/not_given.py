"""openai-python's "not given" sentinels, read as an argument left out.

Code written for openai-python passes `openai.NOT_GIVEN` (or `openai.not_given`, `openai.omit`) to say
"leave this parameter out", e.g. `tools=tools or NOT_GIVEN`; openai-python drops such arguments before
building the request, and so does llmroute (`drop_not_given`, at the entry of every call). They are
recognised by their classes' names and module, so this module never imports openai (a `dev` dependency
only). Plain functions: no I/O, no state.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping

__all__ = ["is_not_given", "drop_not_given"]

_SENTINELS = frozenset({"NotGiven", "Omit"})  # openai._types: NotGiven (NOT_GIVEN, not_given), Omit (omit)


def is_not_given(value: Any) -> bool:
    """Is `value` one of openai-python's "not given" sentinels?"""
    kind = type(value)
    return kind.__name__ in _SENTINELS and kind.__module__.partition(".")[0] == "openai"


def drop_not_given(kwargs: Mapping[str, Any]) -> Dict[str, Any]:
    """`kwargs` without the arguments given as openai-python's "not given" sentinels (a copy)."""
    return {name: value for name, value in kwargs.items() if not is_not_given(value)}
