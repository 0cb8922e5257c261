"""Checks that a built HTTP request can be sent, before anything is sent. Sans-I/O.

Errors raised by our own request building or by the caller's input (a header value with a line
break, a body that is not JSON) are the caller's: `InvalidRequestError`, raised before any I/O, so
they never touch a breaker, a retry budget or a limit (they used to surface as APIConnectionError from
deep inside the HTTP client and trip the deployment for everyone).
"""

from __future__ import annotations

import json
import re

from llmroute import errors as E
from llmroute._runtime.secrets import SecretStr
from llmroute._http.request import HttpRequest
from llmroute._runtime.redaction import is_secret_header

__all__ = ["encode_body", "check_headers"]

_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # RFC 9110 field-name
_BAD_VALUE = re.compile(r"[\r\n\x00]")


# (name, value) pairs that passed, never a credential's (`is_secret_header`): a deployment sends the
# same few headers on every call, checked once. Bounded.
_PASSED: set[tuple[str, str]] = set()
_PASSED_MAX = 1024


def check_headers(request: HttpRequest) -> None:
    """Every header name a token, every value latin-1 text without CR, LF or NUL."""
    for name, value in request.headers.items():
        if type(value) is str and (name, value) in _PASSED:
            continue
        _check_header(name, value)
        if (type(value) is str and type(name) is str and len(_PASSED) < _PASSED_MAX
                and not is_secret_header(name)):
            _PASSED.add((name, value))


def _check_header(name: object, value: object) -> None:
    if not isinstance(name, str) or not _TOKEN.match(name):
        raise E.InvalidRequestError(f"invalid header name {name!r}", field="extra_headers")
    if isinstance(value, SecretStr):
        return  # a configured key: checked when the config loaded
    if not isinstance(value, str):
        raise E.InvalidRequestError(f"header {name!r}: the value must be a string, not {type(value).__name__}",
                                    field="extra_headers")
    if _BAD_VALUE.search(value):
        raise E.InvalidRequestError(f"header {name!r}: the value holds a line break or NUL", field="extra_headers")
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        raise E.InvalidRequestError(f"header {name!r}: the value is not latin-1 text (HTTP headers cannot "
                                    f"carry it)", field="extra_headers") from None


def encode_body(request: HttpRequest) -> bytes:
    """The request body as JSON bytes; a value JSON cannot carry (NaN, an object, a cycle) is the caller's."""
    try:
        return json.dumps(request.json, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")
    except (TypeError, ValueError, RecursionError) as exc:
        raise E.InvalidRequestError(f"the request body cannot be sent as JSON: {exc}", field="body") from None
