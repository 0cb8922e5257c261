"""API keys: a string type that never shows itself, and a scrubber for text that may echo one.

Platforms sometimes quote the key they rejected ("Incorrect API key provided: sk-abc..."), raw or
URL-encoded. Every key the config loads (an `api_key`, or the value of an auth-like header such as
`x-api-key` or `Authorization`) is held in a `SecretStr` and registered here; every error message,
`provider_message`, span status and health line passes through `scrub` before it is stored, and
`ScrubFilter` does the same for the log records of httpx, httpcore, aiohttp and llmroute. A key
therefore cannot reach a log line, a trace attribute, a repr, a pickle or an exception.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Mapping

from llmroute.errors import ConfigError
from llmroute._runtime.forksafe import renew_module_locks
from llmroute._runtime.redaction import MASK, is_secret_header, register_secret, scrub

__all__ = [
    "SecretStr",
    "MASK",
    "register_secret",
    "scrub",
    "is_secret_header",
    "reveal_headers",
    "SecretHeader",
    "wire_headers",
    "ScrubFilter",
    "install_log_scrubbing",
]

class SecretStr:
    """Holds an API key. `str()`, `repr()`, f-strings, pydantic's `model_dump` and pickling show a
    mask; `.get()` returns the key."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        if not isinstance(value, str):
            raise TypeError(f"a secret must be a str, not {type(value).__name__}")
        self._value = value
        if "${" not in value:  # a `${VAR}` template is not the key; the expanded value is
            register_secret(value)

    def get(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"SecretStr('{MASK}')"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return MASK

    def __bool__(self) -> bool:
        return bool(self._value)

    def __len__(self) -> int:
        return len(self._value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SecretStr) and other._value == self._value

    def __hash__(self) -> int:
        return hash(("SecretStr", self._value))

    def __reduce__(self) -> Any:
        # Pickled (a crash dump, a multiprocessing queue, a pickled config): only the mask travels.
        return (_masked_secret, ())

    def __deepcopy__(self, memo: Any) -> "SecretStr":
        return self

    def __copy__(self) -> "SecretStr":
        return self

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema

        def validate(value: Any) -> "SecretStr":
            if isinstance(value, SecretStr):
                return value
            if isinstance(value, str):
                return cls(value)
            raise ValueError(f"expected a string, got {type(value).__name__}")

        return core_schema.no_info_plain_validator_function(
            validate, serialization=core_schema.plain_serializer_function_ser_schema(lambda v: MASK)
        )


class _MaskedSecret(SecretStr):
    """What an unpickled `SecretStr` becomes: the mask, and an error if anyone tries to use it."""

    __slots__ = ()

    def get(self) -> str:
        raise ConfigError("this key was masked when it was pickled; load the config again in this process",
                          key="api_key")


def _masked_secret() -> SecretStr:
    return _MaskedSecret(MASK)


class SecretHeader(SecretStr):
    """A header value made of a key (`Bearer <key>`): masked everywhere, like the key, until the
    transport writes it (`wire_headers`). Built per request without registering anything."""

    __slots__ = ("_prefix", "_secret")

    def __init__(self, secret: SecretStr, prefix: str = "") -> None:  # noqa: D107 - no registration: the key is
        self._prefix = prefix
        self._secret = secret
        self._value = ""

    def get(self) -> str:
        return self._prefix + self._secret.get()

    def __repr__(self) -> str:
        return f"SecretHeader('{self._prefix}{MASK}')"

    __str__ = __repr__

    def __bool__(self) -> bool:
        return bool(self._secret)

    def __len__(self) -> int:
        return len(self._prefix) + len(self._secret)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SecretHeader) and other.get() == self.get()

    def __hash__(self) -> int:
        return hash(("SecretHeader", self._prefix, self._secret))


class _OnTheWire(str):
    """A revealed header value as the HTTP library takes it (a str), whose repr is still the mask:
    a stack frame of the library that holds it, printed with its locals, shows no key."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"'{MASK}'"


def wire_headers(headers: Mapping[str, Any]) -> dict[str, str]:
    """Headers as the HTTP library sends them: keys revealed at the last moment, as strings whose
    repr is the mask (the transport calls this inline, so no frame of llmroute holds the result)."""
    return {name: _OnTheWire(value.get()) if isinstance(value, SecretStr) else value for name, value in headers.items()}


def reveal_headers(headers: Mapping[str, Any]) -> dict[str, str]:
    """Configured headers as plain strings, for the one place that puts them on the wire."""
    return {name: value.get() if isinstance(value, SecretStr) else value for name, value in headers.items()}


class ScrubFilter(logging.Filter):
    """A logging filter that formats the record and scrubs keys out of the message (and traceback text)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string is the caller's bug; do not hide the record
            return True
        cleaned = scrub(message)
        if cleaned != message or record.args:
            record.msg, record.args = cleaned, None
        if record.exc_info and not record.exc_text:
            record.exc_text = scrub(logging.Formatter().formatException(record.exc_info))
        elif record.exc_text:
            record.exc_text = scrub(record.exc_text)
        return True


# Loggers that may print a URL, a header or a server's error text. A filter applies only to records
# logged on the logger it is attached to, so each module logger is named.
SCRUBBED_LOGGERS = (
    "httpx", "httpcore.connection", "httpcore.http11", "httpcore.http2", "httpcore.proxy",
    "aiohttp.client", "aiohttp.internal", "aiohttp.access", "aiohttp.server", "aiohttp.web",
    "llmroute", "llmroute.ledger", "llmroute.budgets", "llmroute.resilience", "llmroute._runtime.telemetry",
)
_filter = ScrubFilter()
_install_lock = threading.Lock()
renew_module_locks(__name__, "_install_lock")
_installed = False


def install_log_scrubbing() -> None:
    """Attach `ScrubFilter` to the HTTP clients' and llmroute's loggers (once per process)."""
    global _installed
    if _installed:
        return
    with _install_lock:
        if _installed:
            return
        for name in SCRUBBED_LOGGERS:
            logger = logging.getLogger(name)
            if _filter not in logger.filters:
                logger.addFilter(_filter)
        _installed = True
