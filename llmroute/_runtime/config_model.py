"""`ConfigModel`: the pydantic base of the config sections' models, refusing `true`/`false` for a number.

pydantic's lax mode reads a boolean as a number (`timeout_s = true` became a 1 s timeout,
`max_retries = true` one retry): a config mistake that went through silently. A model built on
`ConfigModel` refuses a boolean for a field whose type is only numbers (int, float, Decimal, or None),
so the section's loader raises its `ConfigError` naming the key. Fields that take booleans, strings,
tables or anything else are untouched, and nothing else of pydantic's validation changes (a `"${VAR}"`
number read from the environment as text still converts). Validation only: no I/O, no state.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, get_args

from pydantic import BaseModel, ValidationInfo, field_validator

__all__ = ["ConfigModel"]

_NUMBERS = frozenset({int, float, Decimal})


class ConfigModel(BaseModel):
    """A config section's model: as `BaseModel`, but a number field refuses `true` and `false`."""

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_for_a_number(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, bool) and info.field_name is not None:
            annotation = cls.model_fields[info.field_name].annotation
            kinds = {a for a in (get_args(annotation) or (annotation,)) if a is not type(None)}
            if kinds and kinds <= _NUMBERS:
                raise ValueError(f"must be a number, not {str(value).lower()}")
        return value
