"""API keys: a string type that never prints itself, and a scrubber for text that may echo one.

Platforms sometimes quote the key they rejected ("Incorrect API key provided: sk-abc..."). Every
key the config loads is registered here, and every error message passes through `scrub` before it
is stored, so a key cannot reach a log line, a trace attribute, a repr or an exception.
"""

from __future__ import annotations

import re
import threading

__all__ = ["SecretStr", "register_secret", "scrub"]

_lock = threading.Lock()
_known: set[str] = set()
_pattern: re.Pattern[str] | None = None

# Key-shaped tokens that platforms echo even when we never registered them (a key from the env of
# another process, a key in a URL): OpenAI-style "sk-...", DashScope "sk-...", and Bearer headers.
_GENERIC = re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._\-]{8,}|\bsk-[A-Za-z0-9_\-]{8,}")


class SecretStr:
    """Holds an API key. `str()`, `repr()` and f-strings show a mask; `.get()` returns the key."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value
        register_secret(value)

    def get(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "SecretStr('***')"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return "***"

    def __bool__(self) -> bool:
        return bool(self._value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SecretStr) and other._value == self._value

    def __hash__(self) -> int:
        return hash(("SecretStr", self._value))

    def __reduce__(self):  # never pickled with its value into a crash dump or a multiprocessing queue
        raise TypeError("SecretStr cannot be pickled")


def register_secret(value: str) -> None:
    """Remember a key so that `scrub` masks it wherever it shows up."""
    global _pattern
    if not value or len(value) < 4:
        return
    with _lock:
        if value in _known:
            return
        _known.add(value)
        _pattern = re.compile("|".join(re.escape(v) for v in sorted(_known, key=len, reverse=True)))


def scrub(text: str) -> str:
    """Return `text` with every registered key and anything key-shaped replaced by `***`."""
    if not text:
        return text
    pattern = _pattern
    if pattern is not None:
        text = pattern.sub("***", text)
    return _GENERIC.sub(lambda m: (m.group(1) or "") + "***", text)
