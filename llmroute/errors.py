"""Everything llmroute raises, in one tree that holds openai-python's names and shapes.

```
LLMRouteError                          base of every llmroute error (also named OpenAIError, as openai-python's)
├── ConfigError                        the config file or dict is wrong; names the file and key path
├── BudgetExceededError                a budget cap would be passed; names the budget, limit and spend
├── RequestGuardError                  a per-feature guard refused the call before sending
├── SharedStateUnavailableError        Redis did not answer and [state] on_unavailable = "refuse"
├── ClientClosedError                  a call on a client after its close()
├── EventLoopError                     an AsyncStream read on another loop than the one it was opened on
├── StreamNotFinishedError             `stream.response` read before the stream ended (also a RuntimeError)
└── APIError                           openai's base: `.message .body .code .param .type .request`
    ├── AllDeploymentsFailedError      every candidate failed for mixed reasons; `.attempts`, `.causes`
    │   └── QueueTimeoutError          every deployment stayed full (max_concurrency) for queue_timeout_s
    └── ProviderError                  a platform answered with an error, or could not be reached
        ├── APIStatusError             an HTTP error status: `.status_code .response .request_id`
        │   ├── BadRequestError        400: the request itself is wrong
        │   │   ├── ContextLengthError       the prompt plus max_tokens exceeds the context window
        │   │   ├── ContentFilterError       the platform's moderation refused the input or output
        │   │   ├── ConflictError            409
        │   │   ├── UnprocessableEntityError 422
        │   │   └── InvalidRequestError      a wrong argument found before sending: status_code None, `.param`
        │   ├── AuthenticationError    401: bad or missing key (a configuration fault)
        │   ├── PermissionDeniedError  403: key valid but not allowed (region, real-name check)
        │   ├── BillingError           402, Arrearage, insufficient quota: out of credit
        │   ├── NotFoundError          404: unknown model or endpoint
        │   │   ├── RedirectError      3xx: the endpoint moved; base_url must name the final URL
        │   │   └── RoutingError       `model=` names no tier or deployment: status_code None, param "model"
        │   ├── RateLimitError         429: over the platform's rate for this account
        │   └── InternalServerError    5xx
        │       ├── OverloadedError    503/529 (and TGI's queue-full 429): the platform is shedding load
        │       └── ServerError        other 5xx, in-band errors without a status
        │           └── ResponseTooLargeError  a body, SSE line or decompressed body passed its cap
        ├── APIConnectionError         refused, reset or unreachable before a response
        │   └── APITimeoutError        connect, time-to-first-token or total timeout; `.timeout` says which
        └── StreamInterruptedError     a stream broke after it started; `.partial_text` holds what arrived
```

openai-python's names are all here with its parent relations (`APIError` -> `APIStatusError` ->
`BadRequestError` ...; `APIConnectionError` -> `APITimeoutError`), so `except openai-name` clauses
catch what they catch there. Three deliberate differences, kept because llmroute code relies on
them: `ConflictError` and `UnprocessableEntityError` are also `BadRequestError`s (llmroute always
called 409/422 bad requests); `ContextLengthError`, `ContentFilterError` and the local
`InvalidRequestError` are `BadRequestError`s; `RoutingError` is a `NotFoundError` (openai's answer to
an unknown model is a 404).

Every `ProviderError` carries `provider` (the name in the config), `deployment` (`"provider:model"`),
`status` (also as `status_code`, openai-python's name), `request_id`, `retryable`, `retry_after`
(seconds), `provider_message` (the platform's own text), and openai's `body` (the platform's error
object as decoded JSON, or its text), `code`, `param`, `type`, `response` (an `ErrorResponse`:
`status_code`, `headers`, `request_id`, `text`, `json()`; None when no response came) and `request`
(a `RequestInfo`: `method`, `url`, once the error ended an attempt).

A held error: when every deployment of a call is held for one reason (a breaker opened by 429s, a
key refused, a model not found), nothing is sent and the call raises the class that holds them, with
the original status, request id and message, `held = True` and `attempts` (the skips); its
`retry_after` is the time left on the hold. Mixed reasons raise `AllDeploymentsFailedError`, whose
`causes` lists the error behind each deployment. `held` is False on every error that was sent.

No message, repr or attribute here ever holds an API key: the text of every error, its body and the
headers it keeps pass through `secrets.scrub` first (credential headers are dropped).

`APITimeoutError` and `APIConnectionError` (openai-python's names) were called `TimeoutError` and
`ConnectionError`, which shadowed Python's builtins after `from llmroute import *`. The old names
still resolve, on `llmroute` and on this module, to the new classes with a `DeprecationWarning`; they
are not in `__all__`. A ledger's `error_type` records the class name: the new names from this version
on; `current_error_name` reads an older ledger's old names as the new ones.
"""

from __future__ import annotations

import builtins
import json
import warnings
from typing import Any, Mapping, Sequence

from llmroute._runtime.redaction import is_secret_header, scrub

__all__ = [
    "LLMRouteError",
    "OpenAIError",
    "ConfigError",
    "InvalidRequestError",
    "RoutingError",
    "BudgetExceededError",
    "RequestGuardError",
    "SharedStateUnavailableError",
    "AllDeploymentsFailedError",
    "APIError",
    "APIStatusError",
    "QueueTimeoutError",
    "ProviderError",
    "AuthenticationError",
    "PermissionDeniedError",
    "BillingError",
    "NotFoundError",
    "ConflictError",
    "UnprocessableEntityError",
    "BadRequestError",
    "ContextLengthError",
    "ContentFilterError",
    "RateLimitError",
    "InternalServerError",
    "OverloadedError",
    "ServerError",
    "APITimeoutError",
    "APIConnectionError",
    "StreamInterruptedError",
    "ReplayDivergedError",
    "ClientClosedError",
    "EventLoopError",
    "RedirectError",
    "ResponseTooLargeError",
    "StreamNotFinishedError",
    "ErrorResponse",
    "RequestInfo",
    "current_error_name",
]


class LLMRouteError(Exception):
    """Base of every error llmroute raises."""

    def __init__(self, message: str) -> None:
        self.message = scrub(message)
        super().__init__(self.message)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


# openai-python's base of every error it raises (`except openai.OpenAIError`): llmroute's is LLMRouteError,
# whose children hold openai's (`APIError`, `LengthFinishReasonError`, ...), as OpenAIError's do.
OpenAIError = LLMRouteError


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


def _scrubbed(value: Any, depth: int = 0) -> Any:
    """A decoded error body with every string scrubbed (a platform may echo the key it refused)."""
    if isinstance(value, str):
        return scrub(value)
    if depth > 20:
        return None
    if isinstance(value, Mapping):
        return {str(k): _scrubbed(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_scrubbed(v, depth + 1) for v in value]
    return value


class ErrorResponse:
    """The HTTP response behind an `APIStatusError` (openai-python's `e.response`, without the
    connection): `status_code` (also `status`), `headers` (lower-case names; credential headers
    dropped), `request_id`, `text` (the body, scrubbed) and `json()`."""

    def __init__(self, status_code: int, headers: Mapping[str, str] | None, request_id: str | None,
                 text: str = "") -> None:
        self.status_code = status_code
        self.headers: dict[str, str] = {str(k).lower(): scrub(str(v)) for k, v in (headers or {}).items()
                                        if not is_secret_header(str(k))}
        self.request_id = request_id
        self.text = scrub(text)

    @property
    def status(self) -> int:
        return self.status_code

    def json(self) -> Any:
        return json.loads(self.text)

    def __repr__(self) -> str:
        return f"<ErrorResponse [{self.status_code}]>"


class RequestInfo:
    """The request an error answered (openai-python's `e.request`): `method` and `url` (credentials in
    the URL masked); no headers, no body."""

    def __init__(self, method: str, url: str) -> None:
        self.method = method
        self.url = scrub(url)

    def __repr__(self) -> str:
        return f"<RequestInfo({self.method!r}, {self.url!r})>"


class APIError(LLMRouteError):
    """openai-python's `APIError`: every error about a call that reached, or was meant for, a platform.
    `body` is the platform's error object (decoded JSON, or text; None without one); `code`, `param`
    and `type` are read from it; `request` is a `RequestInfo` once known."""

    body: Any = None
    code: str | None = None
    param: str | None = None
    type: str | None = None
    request: RequestInfo | None = None
    held: bool = False  # raised for a hold (nothing sent): see the module docstring


class ProviderError(APIError):
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
        param: str | None = None,
        type: str | None = None,  # noqa: A002 - openai-python's attribute name
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        response_text: str = "",
        usage: Any = None,
    ) -> None:
        self.provider = provider
        self.deployment = deployment
        self.status = status
        self.request_id = request_id
        self.retryable = self.default_retryable if retryable is None else retryable
        self.retry_after = retry_after
        self.provider_message = scrub(provider_message) if provider_message else provider_message
        self.code = code
        self.param = param
        self.type = type
        self.body = _scrubbed(body)
        self._response = (ErrorResponse(status, headers, request_id, response_text)
                          if status is not None and (headers is not None or response_text) else None)
        # What the platform billed, when the error says (usage in an error body), or what arrived
        # before a read cap cut the answer (`usage_estimated` then says whether it was counted here).
        self.usage = usage
        self.usage_estimated = False
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

    @property
    def response(self) -> ErrorResponse | None:
        """The HTTP response that carried the error (None when no response came, or for an error found
        before sending)."""
        response = self.__dict__.get("_response")
        if response is None and self.status is not None:
            response = self._response = ErrorResponse(self.status, {}, self.request_id)
        return response

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
        if self.held:
            text += " [held: nothing was sent; the deployment is held by this error]"
        return text


class APIStatusError(ProviderError):
    """openai-python's `APIStatusError`: the platform answered with an error status (4xx, 5xx), or an
    error event inside a stream; `status_code`, `response`, `request_id`, `body`."""


class AuthenticationError(APIStatusError):
    """401: the key is missing, wrong, or bound to another region."""


class PermissionDeniedError(APIStatusError):
    """403: the key is valid but may not use this model or region."""


class BillingError(APIStatusError):
    """The account is out of credit or overdue (402, DashScope Arrearage, insufficient quota)."""


class NotFoundError(APIStatusError):
    """404: the model or endpoint does not exist for this account."""


class RedirectError(NotFoundError):
    """3xx: the platform redirected the request. Redirects are not followed (a POST with a key must not
    be resent elsewhere); `location` is where it pointed. Fatal for the deployment, like a 404."""

    def __init__(self, message: str, *, location: str | None = None, **kw: Any) -> None:
        self.location = scrub(location) if location else location
        super().__init__(message, **kw)


class RoutingError(NotFoundError):
    """`model=` names no tier, no configured deployment and no routing mode. Found before anything is
    sent: `status_code` is None, `param` is "model", `code` "model_not_found" (openai's 404 code)."""

    def __init__(self, message: str, **kw: Any) -> None:
        kw.setdefault("code", "model_not_found")
        kw.setdefault("param", "model")
        super().__init__(message, **kw)


class BadRequestError(APIStatusError):
    """The request is wrong (400, 409, 413, 422); retrying it unchanged cannot help."""


class ConflictError(BadRequestError):
    """409 (openai-python's name)."""


class UnprocessableEntityError(BadRequestError):
    """422 (openai-python's name)."""


class InvalidRequestError(BadRequestError):
    """The arguments to `create()` are wrong (no messages, a bad role, metadata not str->str), found
    before anything is sent: `status_code` is None; `param` (also `field`) names the argument."""

    def __init__(self, message: str, *, field: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}", param=field, code="invalid_request", type="invalid_request_error")


class ContextLengthError(BadRequestError):
    """The prompt (plus max_tokens) does not fit the deployment's context window."""


class ContentFilterError(BadRequestError):
    """The platform's moderation refused the input or the output."""


class RateLimitError(APIStatusError):
    """429: over this account's rate; `retry_after` says when to try again when the platform says."""

    default_retryable = True


class InternalServerError(APIStatusError):
    """5xx (openai-python's name): the platform failed."""

    default_retryable = True


class OverloadedError(InternalServerError):
    """503 and the like: the platform is shedding load."""

    default_retryable = True


class ServerError(InternalServerError):
    """Any other 5xx."""

    default_retryable = True


class ResponseTooLargeError(ServerError):
    """A response passed a read cap (`limit` names it: "response_bytes", "decoded_bytes" or
    "sse_line_bytes"; of the answer, "answer_chars", "answer_tokens", "choices", "tool_calls" or
    "tool_argument_chars"; `max_bytes` holds its value, in the cap's unit). The attempt ended; before
    content another deployment may answer, after content the answer ends here (billed for what
    arrived: `usage`)."""

    def __init__(self, message: str, *, limit: str, max_bytes: int, **kw: Any) -> None:
        self.limit = limit
        self.max_bytes = max_bytes
        super().__init__(message, **kw)


class APIConnectionError(ProviderError):
    """The platform could not be reached: refused, reset, DNS, TLS."""

    default_retryable = True


class APITimeoutError(APIConnectionError):
    """A timeout fired. `timeout` is "connect", "ttft" or "total" ("read" for the batch APIs' file
    transfers: no bytes within `seconds`); `seconds` its limit."""

    default_retryable = True

    def __init__(self, message: str, *, timeout: str, seconds: float | None, **kw: Any) -> None:
        self.timeout = timeout
        self.seconds = seconds
        super().__init__(message, **kw)


class StreamInterruptedError(ProviderError):
    """A stream broke after content had started to arrive. Nothing is replayed silently."""

    default_retryable = True

    def __init__(self, message: str, *, partial_text: str = "", attempts: Sequence[Any] = (), **kw: Any) -> None:
        self.partial_text = partial_text
        self.attempts = list(attempts)
        super().__init__(message, **kw)


class ReplayDivergedError(ProviderError):
    """A stream restarted after a cut did not repeat the text the caller had already seen (the
    replay is dropped unseen; docs/failover.md, "Replaying a cut stream"). `offset` is the first
    character that differed, `expected` and `got` a few characters from there."""

    default_retryable = False

    def __init__(self, message: str, *, offset: int = 0, expected: str = "", got: str = "", **kw: Any) -> None:
        self.offset = offset
        self.expected = expected
        self.got = got
        super().__init__(message, **kw)


class AllDeploymentsFailedError(APIError):
    """Every candidate deployment failed (for more than one reason). `.attempts` lists each attempt
    (deployment, error, duration); `.causes` the error behind each deployment (sent or held);
    `status_code` is the last status a platform answered (None when none did)."""

    def __init__(self, message: str, *, attempts: Sequence[Any], tier: str | None = None,
                 causes: Sequence[BaseException] = ()) -> None:
        self.attempts = list(attempts)
        self.tier = tier
        self.causes = list(causes)
        super().__init__(message)

    @property
    def last_error(self) -> BaseException | None:
        for attempt in reversed(self.attempts):
            error: BaseException | None = getattr(attempt, "error", None)
            if error is not None:
                return error
        return None

    @property
    def status_code(self) -> int | None:
        for error in reversed([*self.causes, *(getattr(a, "error", None) for a in self.attempts)]):
            status = getattr(error, "status", None)
            if status is not None:
                return int(status)
        return None


class QueueTimeoutError(AllDeploymentsFailedError):
    """Every deployment of a tier balanced by load was full (its client-side `max_concurrency`
    reached) for the whole `queue_timeout_s` the call waited in the client-side queue; `.queued_s`."""

    def __init__(self, message: str, *, attempts: Sequence[Any], tier: str | None = None,
                 queued_s: float = 0.0) -> None:
        self.queued_s = queued_s
        super().__init__(message, attempts=attempts, tier=tier)


class ClientClosedError(LLMRouteError):
    """A call on a `Client` or `AsyncClient` after its `close()`."""


class EventLoopError(LLMRouteError):
    """An event loop that cannot be served: an `AsyncStream` read on a loop other than the one it was
    opened on (its connection lives there). An `AsyncClient` itself serves any loop: it keeps one
    connection pool per loop, made on first use there."""

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
