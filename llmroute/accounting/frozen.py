"""Frozen dataclasses built from trusted values in one step: `Fill(cls).make(values)`.

A frozen dataclass's generated `__init__` stores each field with `object.__setattr__` (a lookup and a
call per field): `LedgerRecord` (31 fields) and `Cost` (19) cost several µs each that way, and the call
core makes one of each per attempt (and a `failover.Send`). `Fill` gives the same instance (every field in its declared order,
defaults and default factories applied) from a dict of values the caller's own code computed. It
never validates (a dataclass's `__init__` does not either), never runs `__post_init__` (the classes
filled here have none) and must never be used for a class that defines one or uses `__slots__`.
Standard library only.
"""

from __future__ import annotations

from dataclasses import MISSING, fields
from typing import Any, Callable, Dict, Generic, List, Tuple, TypeVar

__all__ = ["Fill"]

T = TypeVar("T")


class Fill(Generic[T]):
    """Makes instances of the frozen dataclass `cls` from values, as its `__init__` would."""

    def __init__(self, cls: type[T]) -> None:
        if hasattr(cls, "__post_init__") or hasattr(cls, "__slots__"):
            raise TypeError(f"{cls.__name__}: Fill cannot build a dataclass with __post_init__ or __slots__")
        self._cls = cls
        self._template: Dict[str, Any] = {}  # every field in order: its default (MISSING when required)
        self._factories: List[Tuple[str, Callable[[], Any]]] = []
        self._required: List[str] = []
        for f in fields(cls):  # type: ignore[arg-type]  # a dataclass
            self._template[f.name] = f.default
            if f.default_factory is not MISSING:
                self._factories.append((f.name, f.default_factory))
            elif f.default is MISSING:
                self._required.append(f.name)

    def make(self, values: Dict[str, Any]) -> T:
        """An instance whose fields are `values` (each a field name; the required ones given) over
        the defaults. TypeError for a name that is not a field or a required field left out.
        `values` must be a dict the caller made for this call: when it has as many names as there are
        fields, it is taken to name every field (the callers' literals do; a misspelt name would
        leave a field unset, an AttributeError on first read) and becomes the instance's own
        `__dict__` (a dataclass reads its fields by name, so their order there does not matter)."""
        if len(values) == len(self._template):
            state = values
        else:
            state = self._template.copy()
            for name, factory in self._factories:
                if name not in values:
                    state[name] = factory()
            state.update(values)
            if len(state) != len(self._template) or self._missing(state):
                unknown = sorted(set(values) - set(self._template))
                missing = [name for name in self._required if name not in values]
                raise TypeError(f"{self._cls.__name__}: unknown fields {unknown}, missing fields {missing}")
        instance: T = object.__new__(self._cls)
        object.__setattr__(instance, "__dict__", state)
        return instance

    def _missing(self, state: Dict[str, Any]) -> bool:
        for name in self._required:
            if state[name] is MISSING:
                return True
        return False
