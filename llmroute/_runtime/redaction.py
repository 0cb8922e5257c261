"""The scrubber for text that may echo an API key: every registered key (raw, URL-encoded,
JSON-escaped) and anything key-shaped becomes `***`. Imports nothing of llmroute, so that the error
types (llmroute/errors.py) can scrub their messages and `secrets.SecretStr` can raise them."""

from __future__ import annotations

import json
import re
import threading
from urllib.parse import quote, quote_plus

from llmroute._runtime.forksafe import renew_module_locks

__all__ = ["MASK", "register_secret", "scrub", "is_secret_header"]

MASK = "***"

_lock = threading.Lock()
renew_module_locks(__name__, "_lock")
_known: set[str] = set()
_pattern: re.Pattern[str] | None = None

# Key-shaped tokens that platforms echo even when we never registered them (a key from the env of
# another process, a key in a URL): OpenAI-style "sk-...", DashScope "sk-...", Bearer/Basic headers,
# and `key=`/`api_key=`/`token=` query parameters.
_GENERIC = re.compile(
    r"(?i)(bearer\s+|basic\s+)[A-Za-z0-9._~+/=\-]{8,}"
    r"|\bsk-[A-Za-z0-9_\-]{8,}"
    r"|([?&](?:api[_-]?key|key|token|access_token|secret)=)[^&\s\"'#]+"
)

# Header names whose value is a credential (compared lower-case). Any name containing one of the
# words below counts too, so `X-DashScope-Api-Key` or `X-Auth-Token` are held as secrets.
_SECRET_HEADER_WORDS = ("authorization", "api-key", "apikey", "api_key", "token", "secret", "password",
                        "cookie", "signature", "x-key", "auth")


def is_secret_header(name: str) -> bool:
    """True if a header called `name` carries a credential (Authorization, x-api-key, *-token ...)."""
    lowered = name.lower()
    return lowered.endswith("-key") or any(word in lowered for word in _SECRET_HEADER_WORDS)


def _forms(value: str) -> set[str]:
    """The ways a key shows up in text: as is, URL-encoded (both flavours), JSON-escaped."""
    out = {value, quote(value, safe=""), quote_plus(value), json.dumps(value)[1:-1]}
    return {v for v in out if len(v) >= 4}


def register_secret(value: str) -> None:
    """Remember a key so that `scrub` masks it (and its URL-encoded forms) wherever it shows up."""
    global _pattern
    if not value or len(value) < 4:
        return
    with _lock:
        forms = _forms(value) - _known
        if not forms:
            return
        _known.update(forms)
        _pattern = re.compile("|".join(re.escape(v) for v in sorted(_known, key=len, reverse=True)))


def scrub(text: str) -> str:
    """Return `text` with every registered key and anything key-shaped replaced by `***`."""
    if not text:
        return text
    if not isinstance(text, str):
        text = str(text)
    pattern = _pattern
    if pattern is not None:
        text = pattern.sub(MASK, text)
    return _GENERIC.sub(lambda m: (m.group(1) or m.group(2) or "") + MASK, text)
