"""Everything llmroute raises, in one tree.

```
LLMRouteError                      base of every llmroute error
├── ConfigError                    the config file or dict is wrong; names the file and key path
├── InvalidRequestError            the arguments to create() are wrong; names the argument
├── RoutingError                   a model name that names no tier, deployment or routing mode
├── BudgetExceededError            a budget cap would be passed; names the budget, limit and spend
├── RequestGuardError              a per-feature guard refused the call before sending
├── SharedStateUnavailableError    Redis did not answer and [state] on_unavailable = "refuse"
├── AllDeploymentsFailedError      every candidate deployment failed; `.attempts` lists each one
├── ClientClosedError              a call on a client after its close()
├── EventLoopError                 an AsyncClient used from a second event loop
├── StreamNotFinishedError         `stream.response` read before the stream ended (also a RuntimeError)
└── ProviderError                  a platform answered with an error, or could not be reached
    ├── AuthenticationError        401: bad or missing key (a configuration fault)
    ├── PermissionDeniedError      403: key valid but not allowed (region, real-name check)
    ├── BillingError               402, Arrearage, insufficient quota: out of credit
    ├── NotFoundError              404: unknown model or endpoint
    │   └── RedirectError          3xx: the endpoint moved; base_url must name the final URL
    ├── BadRequestError            400/422: the request itself is wrong
    │   ├── ContextLengthError     the prompt plus max_tokens exceeds the context window
    │   └── ContentFilterError     the platform's moderation refused the input or output
    ├── RateLimitError             429: over the platform's rate for this account
    ├── OverloadedError            503/529: the platform is shedding load
    ├── ServerError                other 5xx
    │   └── ResponseTooLargeError  a body, SSE line or decompressed body passed its cap
    ├── APITimeoutError            connect, time-to-first-token or total timeout; `.timeout` says which
    ├── APIConnectionError         refused, reset or unreachable before a response
    └── StreamInterruptedError     a stream broke after it started; `.partial_text` holds what arrived
```

Every `ProviderError` carries `provider` (the name in the config), `deployment`
(`"provider:model"`), `status` (also as `status_code`, openai-python's name), `request_id`, `retryable`, `retry_after` (seconds) and
`provider_message` (the platform's own text). No message, repr or attribute here ever holds an
API key: the text of every error passes through `secrets.scrub` first.

`APITimeoutError` and `APIConnectionError` (openai-python's names) were called `TimeoutError` and
`ConnectionError`, which shadowed Python's builtins after `from llmroute import *`. The old names
still resolve, on `llmroute` and on this module, to the new classes with a `DeprecationWarning`; they
are not in `__all__`. A ledger's `error_type` records the class name: the new names from this version
on; `current_error_name` reads an older ledger's old names as the new ones.
"""

from __future__ import annotations

import builtins
import warnings
from typing import Any, Optional, Sequence

from llmroute._runtime.redaction import scrub

__all__ = [
    "LLMRouteError",
    "ConfigError",
    "InvalidRequestError",
    "RoutingError",
    "BudgetExceededError",
    "RequestGuardError",
    "SharedStateUnavailableError",
    "AllDeploymentsFailedError",
    "ProviderError",
    "AuthenticationError",
    "PermissionDeniedError",
    "BillingError",
    "NotFoundError",
    "BadRequestError",
    "ContextLengthError",
    "ContentFilterError",
    "RateLimitError",
    "OverloadedError",
    "ServerError",
    "APITimeoutError",
    "APIConnectionError",
    "StreamInterruptedError",
    "ClientClosedError",
    "EventLoopError",
    "RedirectError",
    "ResponseTooLargeError",
    "StreamNotFinishedError",
    "current_error_name",
]


class LLMRouteError(Exception):
    """Base of every error llmroute raises."""

    def __init__(self, message: str) -> None:
        self.message = scrub(message)
        super().__init__(self.message)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


class ConfigError(LLMRouteError):
    """The configuration is wrong. `path` is the file (or "<dict>"), `key` the key path at fault."""

    def __init__(self, message: str, *, path: str | None = None, key: str | None = None) -> None:
        self.path = path
        self.key = key
        self.detail = message  # the message without the file and key prefix
        where = ""
        if path and key:
            where = f"{path}: {key}: "
        elif path:
            where = f"{path}: "
        elif key:
            where = f"{key}: "
        super().__init__(where + message)


class InvalidRequestError(LLMRouteError):
    """The arguments to `create()` are wrong (no messages, a bad role, metadata not str->str)."""

    def __init__(self, message: str, *, field: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")


class RoutingError(LLMRouteError):
    """`model=` names no tier, no configured deployment and no routing mode."""


class BudgetExceededError(LLMRouteError):
    """A call would pass a budget cap. Carries the budget's name, its limit and what was spent."""

    def __init__(self, message: str, *, budget: str, limit: Any, spent: Any, unit: str) -> None:
        self.budget = budget
        self.limit = limit
        self.spent = spent
        self.unit = unit
        super().__init__(message)


class SharedStateUnavailableError(LLMRouteError):
    """`[state] on_unavailable = "refuse"` and the shared state server (Redis) did not answer in time;
    nothing was sent."""


class RequestGuardError(LLMRouteError):
    """A per-feature guard (input tokens, max_tokens) refused the call before it was sent."""

    def __init__(self, message: str, *, feature: str | None, guard: str, limit: int, value: int) -> None:
        self.feature = feature
        self.guard = guard
        self.limit = limit
        self.value = value
        super().__init__(message)


class ProviderError(LLMRouteError):
    """A platform answered with an error, or could not be reached at all."""

    default_retryable = False

    def __init__(
        self,
        message: str,
        *,
        provider: str | None = None,
        deployment: str | None = None,
        status: int | None = None,
        request_id: str | None = None,
        retryable: bool | None = None,
        retry_after: float | None = None,
        provider_message: str | None = None,
        code: str | None = None,
    ) -> None:
        self.provider = provider
        self.deployment = deployment
        self.status = status
        self.request_id = request_id
        self.retryable = self.default_retryable if retryable is None else retryable
        self.retry_after = retry_after
        self.provider_message = scrub(provider_message) if provider_message else provider_message
        self.code = code
        if not hasattr(self, "attempts"):  # StreamInterruptedError sets its own first
            self.attempts: list[Any] = []  # the route's attempts, when the error ends a call
        super().__init__(message)

    @property
    def status_code(self) -> int | None:
        """The HTTP status, as `status` (openai-python's name for it)."""
        return self.status

    @status_code.setter
    def status_code(self, value: int | None) -> None:
        self.status = value

    def __str__(self) -> str:
        parts = []
        if self.deployment:
            parts.append(self.deployment)
        elif self.provider:
            parts.append(self.provider)
        if self.status is not None:
            parts.append(f"HTTP {self.status}")
        head = " ".join(parts)
        text = f"{head}: {self.message}" if head else self.message
        if self.request_id:
            text += f" (request_id={self.request_id})"
        return text


class AuthenticationError(ProviderError):
    """401: the key is missing, wrong, or bound to another region."""


class PermissionDeniedError(ProviderError):
    """403: the key is valid but may not use this model or region."""


class BillingError(ProviderError):
    """The account is out of credit or overdue (402, DashScope Arrearage, insufficient quota)."""


class NotFoundError(ProviderError):
    """404: the model or endpoint does not exist for this account."""


class RedirectError(NotFoundError):
    """3xx: the platform redirected the request. Redirects are not followed (a POST with a key must not
    be resent elsewhere); `location` is where it pointed. Fatal for the deployment, like a 404."""

    def __init__(self, message: str, *, location: str | None = None, **kw: Any) -> None:
        self.location = scrub(location) if location else location
        super().__init__(message, **kw)


class BadRequestError(ProviderError):
    """The request is wrong (400, 422); retrying it unchanged cannot help."""


class ContextLengthError(BadRequestError):
    """The prompt (plus max_tokens) does not fit the deployment's context window."""


class ContentFilterError(BadRequestError):
    """The platform's moderation refused the input or the output."""


class RateLimitError(ProviderError):
    """429: over this account's rate; `retry_after` says when to try again when the platform says."""

    default_retryable = True


class OverloadedError(ProviderError):
    """503 and the like: the platform is shedding load."""

    default_retryable = True


class ServerError(ProviderError):
    """Any other 5xx."""

    default_retryable = True


class ResponseTooLargeError(ServerError):
    """A response passed a read cap (`limit` names it: "response_bytes", "decoded_bytes" or
    "sse_line_bytes"; `max_bytes` its value). The attempt ended; another deployment may answer."""

    def __init__(self, message: str, *, limit: str, max_bytes: int, **kw: Any) -> None:
        self.limit = limit
        self.max_bytes = max_bytes
        super().__init__(message, **kw)


class APITimeoutError(ProviderError):
    """A timeout fired. `timeout` is "connect", "ttft" or "total" ("read" for the batch APIs' file
    transfers: no bytes within `seconds`); `seconds` its limit."""

    default_retryable = True

    def __init__(self, message: str, *, timeout: str, seconds: float | None, **kw: Any) -> None:
        self.timeout = timeout
        self.seconds = seconds
        super().__init__(message, **kw)


class APIConnectionError(ProviderError):
    """The platform could not be reached: refused, reset, DNS, TLS."""

    default_retryable = True


class StreamInterruptedError(ProviderError):
    """A stream broke after content had started to arrive. Nothing is replayed silently."""

    default_retryable = True

    def __init__(self, message: str, *, partial_text: str = "", attempts: Sequence[Any] = (), **kw: Any) -> None:
        self.partial_text = partial_text
        self.attempts = list(attempts)
        super().__init__(message, **kw)


class AllDeploymentsFailedError(LLMRouteError):
    """Every candidate deployment failed. `.attempts` lists each attempt (deployment, error, duration)."""

    def __init__(self, message: str, *, attempts: Sequence[Any], tier: str | None = None) -> None:
        self.attempts = list(attempts)
        self.tier = tier
        super().__init__(message)

    @property
    def last_error(self) -> BaseException | None:
        for attempt in reversed(self.attempts):
            error: Optional[BaseException] = getattr(attempt, "error", None)
            if error is not None:
                return error
        return None


class ClientClosedError(LLMRouteError):
    """A call on a `Client` or `AsyncClient` after its `close()`."""


class EventLoopError(LLMRouteError):
    """An `AsyncClient` used from an event loop other than the one of its first call (its connection
    pools belong to that loop): create one client per event loop."""
class StreamNotFinishedError(LLMRouteError, RuntimeError):
    """`stream.response` was read before the stream ended (inside the loop, before it, or after an
    early close). Iterate to the end first, or call `get_final_completion()` to read the rest."""


# Keep the builtins reachable for code in this package that needs them.
BuiltinTimeoutError = builtins.TimeoutError
BuiltinConnectionError = builtins.ConnectionError


# Old error class names -> the current ones (the old names shadowed Python's builtins).
RENAMED_ERRORS = {"TimeoutError": "APITimeoutError", "ConnectionError": "APIConnectionError"}


def current_error_name(name: str) -> str:
    """An error class name as a ledger or route recorded it -> its current name (old ledgers hold
    `TimeoutError` and `ConnectionError`)."""
    return RENAMED_ERRORS.get(name, name)


def deprecated_error(name: str) -> type[ProviderError] | None:
    """The class an old name stands for, with a DeprecationWarning; None for any other name."""
    new = RENAMED_ERRORS.get(name)
    if new is None:
        return None
    warnings.warn(f"llmroute.{name} is deprecated (it shadows the builtin {name}); use llmroute.{new}",
                  DeprecationWarning, stacklevel=3)
    cls: type[ProviderError] = globals()[new]
    return cls


def __getattr__(name: str) -> Any:
    cls = deprecated_error(name)
    if cls is None:
        raise AttributeError(f"module 'llmroute.errors' has no attribute {name!r}")
    return cls
