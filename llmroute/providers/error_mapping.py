"""Platform error bodies and statuses -> llmroute's typed errors. Sans-I/O.

Every envelope in docs/platforms.md §11.7 is read: OpenAI `{"error":{message,type,param,code}}` (string or
int code), flat `{"object":"error",...}` (SGLang, old vLLM), TGI `{"error": str, "error_type": str}`,
SiliconFlow `{"code": int, "message", "data"}`, DashScope native `{"code": str, "message",
"request_id"}`. Classification goes by status first and then by the platform's documented codes and
messages (never a guess from the message alone when a status says otherwise), per §11.6 and §11.8.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any, Mapping, Type

from llmroute import errors as E

__all__ = ["ErrorBody", "parse_error_body", "error_from_response", "error_from_payload", "retry_after_from_headers"]


@dataclass(frozen=True)
class ErrorBody:
    message: str
    type: str | None = None
    code: str | None = None
    param: str | None = None
    request_id: str | None = None


def _s(value: Any) -> str | None:
    if value is None:
        return None
    return str(value)


def parse_error_body(body: Any) -> ErrorBody | None:
    """Read any known error envelope from a decoded JSON value; None when it is not an error body."""
    if not isinstance(body, Mapping):
        return None
    err = body.get("error")
    if isinstance(err, Mapping):  # OpenAI shape, also Together, Fireworks, DashScope compat, vLLM, llama.cpp, Ollama
        return ErrorBody(
            message=_s(err.get("message")) or _s(err.get("msg")) or "",
            type=_s(err.get("type")),
            code=_s(err.get("code")),
            param=_s(err.get("param")),
            request_id=_s(body.get("request_id")) or _s(body.get("id")),
        )
    if isinstance(err, str):  # TGI, Ollama native
        return ErrorBody(message=err, type=_s(body.get("error_type")))
    if body.get("object") == "error":  # SGLang, old vLLM
        return ErrorBody(
            message=_s(body.get("message")) or "", type=_s(body.get("type")), code=_s(body.get("code")),
            param=_s(body.get("param")),
        )
    if "code" in body and ("message" in body or "msg" in body):  # SiliconFlow (int code), DashScope native (str)
        return ErrorBody(
            message=_s(body.get("message")) or _s(body.get("msg")) or "",
            code=_s(body.get("code")),
            request_id=_s(body.get("request_id")),
        )
    return None


_CONTEXT_RE = re.compile(
    r"context[ _-]?length|context window|maximum context|context size|exceeds the available context"
    r"|prompt is too long|input length|range of input length|too many tokens|must be less than the context"
    r"|max_total_tokens|`inputs` must have less than|inputs` tokens \+ `max_new_tokens"
    # SiliconFlow (shape unconfirmed, docs/platforms.md §3): "... must be less than max_seq_len (N)".
    r"|max_seq_len",
    re.IGNORECASE,
)
_CONTENT_FILTER_RE = re.compile(
    r"data_inspection_failed|datainspectionfailed|inappropriate content|content[ _-]?filter|content management policy"
    r"|safety system|moderation",
    re.IGNORECASE,
)
_BILLING_RE = re.compile(
    r"arrearage|insufficient[ _]quota|insufficient balance|balance is insufficient|credit|payment|billing|余额|欠费|exceeded your current quota",
    re.IGNORECASE,
)
_AUTH_CODES = {"invalid_api_key", "invalidapikey", "authentication_error", "unauthorized", "401"}
_RATE_LIMIT_CODES = re.compile(r"throttling|rate_limit|dynamic_request_limited|dynamic_token_limited", re.IGNORECASE)
_RATE_LIMIT_TEXT_RE = re.compile(r"rate.?limit|too many requests", re.IGNORECASE)
_OVERLOAD_RE = re.compile(r"overload|capacity|busy|high load|try again later|queue is full", re.IGNORECASE)


def retry_after_from_headers(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds to wait, from `Retry-After`, `retry-after-ms` or the platform's rate-limit reset headers."""
    get = headers.get
    value = get("retry-after-ms")
    if value:
        try:
            return max(0.0, float(value) / 1000.0)
        except ValueError:
            pass
    value = get("retry-after")
    if value:
        try:
            return max(0.0, float(value))
        except ValueError:
            from email.utils import parsedate_to_datetime  # rare (an HTTP date): kept out of `import llmroute`

            try:
                when = parsedate_to_datetime(value).timestamp()
                return max(0.0, when - (time.time() if now is None else now))
            except (TypeError, ValueError, IndexError):
                pass
    # Together documents x-ratelimit-reset as "the suggested retry interval" in seconds (docs/platforms.md §1).
    value = get("x-ratelimit-reset")
    if value:
        seconds = _duration_s(value)
        if seconds is not None:
            return seconds
    # OpenAI-style reset durations ("12ms", "1s", "6m0s"): wait for the later of the two.
    parsed = [_duration_s(get(h) or "") for h in ("x-ratelimit-reset-requests", "x-ratelimit-reset-tokens")]
    resets = [r for r in parsed if r is not None]
    return max(resets) if resets else None


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


def _duration_s(value: str) -> float | None:
    value = value.strip()
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    total = 0.0
    pos = 0
    for match in _DURATION_PART.finditer(value):
        if match.start() != pos:
            return None
        number, unit = float(match.group(1)), match.group(2)
        total += number * {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}[unit]
        pos = match.end()
    return total if pos == len(value) and pos else None


def _classify(status: int | None, body: ErrorBody, kind: str) -> Type[E.ProviderError]:
    if status is None and body.code is not None and body.code.isdigit() and 400 <= int(body.code) <= 599:
        # An in-band error whose code is an HTTP status (SGLang and older vLLM: "code": 429).
        status = int(body.code)
    text = f"{body.message} {body.type or ''} {body.code or ''}"
    code = (body.code or "").lower()
    etype = (body.type or "").lower()
    if _CONTENT_FILTER_RE.search(f"{code} {etype}") or (status in (400, None) and _CONTENT_FILTER_RE.search(text)):
        return E.ContentFilterError
    if status == 401 or code in _AUTH_CODES or etype in _AUTH_CODES:
        return E.AuthenticationError
    if kind == "bailian" and status == 429:
        # DashScope's 429s are all per-minute limits, "insufficient_quota" / "Allocated quota
        # exceeded" included (the token quota, back within about a minute: docs/platforms.md §4).
        # Overdue payment is Arrearage, a 400, handled below.
        return E.RateLimitError
    if status == 402 or code in ("arrearage", "insufficient_quota") or (
        status in (400, 403, 429) and _BILLING_RE.search(code + " " + etype + " " + body.message)
        and "rate" not in body.message.lower()
    ):
        # DashScope Arrearage is a 400, OpenAI's insufficient_quota a 429: both are billing, not a blip.
        if status == 429 and code != "insufficient_quota" and "quota" not in body.message.lower():
            return E.RateLimitError
        return E.BillingError
    if status == 412:  # Fireworks: account suspended or LoRA failed to load
        return E.PermissionDeniedError
    if status in (400, 403, 413, 422, None) and _CONTEXT_RE.search(text):
        # Together uses 403 for "input token count + max_tokens must be less than the context length".
        return E.ContextLengthError
    if status == 403:
        return E.PermissionDeniedError
    if status == 404:
        return E.NotFoundError
    if status == 409:
        return E.ConflictError
    if status == 408:
        return E.APITimeoutError
    if status == 429:
        # TGI's 429 means its queue is full: load shedding rather than a per-account rate.
        if kind == "tgi" or etype == "overloaded":
            return E.OverloadedError
        return E.RateLimitError
    if status in (503, 529):
        return E.OverloadedError
    if status is not None and status >= 500:
        return E.ServerError
    if status == 424:  # TGI GenerationError
        return E.ServerError
    if status is not None and 400 <= status < 500:
        if code in ("modelnotfound", "model_not_found", "not_found", "20012") or "does not exist" in body.message.lower():
            return E.NotFoundError
        if _RATE_LIMIT_CODES.search(code):
            return E.RateLimitError
        return E.UnprocessableEntityError if status == 422 else E.BadRequestError
    # No status (an error event inside a 200 stream): classify by its codes, then its words
    # (SiliconFlow's in-stream 50603 says only "Request was rejected due to rate limiting").
    if _RATE_LIMIT_CODES.search(code + " " + etype) or _RATE_LIMIT_TEXT_RE.search(body.message):
        return E.RateLimitError
    if _OVERLOAD_RE.search(text):
        return E.OverloadedError
    return E.ServerError


def _describe(cls: Type[E.ProviderError], body: ErrorBody, status: int | None) -> str:
    what = {
        E.AuthenticationError: "authentication failed (check the key, and that it belongs to this region)",
        E.PermissionDeniedError: "permission denied",
        E.BillingError: "billing: the account is out of credit or overdue",
        E.NotFoundError: "model or endpoint not found",
        E.ContextLengthError: "context length exceeded",
        E.ContentFilterError: "refused by the platform's content filter",
        E.BadRequestError: "bad request",
        E.ConflictError: "conflict",
        E.UnprocessableEntityError: "unprocessable request",
        E.RateLimitError: "rate limited",
        E.OverloadedError: "platform overloaded",
        E.ServerError: "server error",
        E.APITimeoutError: "platform timed out",
    }.get(cls, "error")
    detail = body.message.strip()
    if body.code and body.code not in detail and body.code != str(status):
        detail = f"[{body.code}] {detail}" if detail else f"[{body.code}]"
    return f"{what}: {detail}" if detail else what


def _request_id(headers: Mapping[str, str]) -> str | None:
    for name in ("x-request-id", "x-siliconcloud-trace-id", "x-dashscope-request-id", "request-id", "x-together-traceid"):
        value = headers.get(name)
        if value:
            return value
    return None


def is_error_payload(data: Mapping[str, Any]) -> bool:
    """Whether a 2xx body or a stream event is an error, in any envelope a platform sends in-band:
    `{"error": {...}}` (OpenAI style), the flat `{"object": "error", "message", "code"}` (SGLang,
    older vLLM), or SiliconFlow's `{"code": 50505, "message": "...", "data": null}`. A completion or
    chunk always carries `choices` (a usage chunk an empty list), so none of these is mistaken."""
    if "choices" in data and data["choices"]:
        return False
    if "error" in data:
        return True
    if "choices" in data:
        return False
    return data.get("object") == "error" or ("message" in data and "code" in data)


def billed_usage(payload: Any) -> Any:
    """The usage an error body reports (some platforms bill a request that failed part-way, and say
    so beside the error): the platform's figure, recorded as such. None when it reports none."""
    raw = payload.get("usage") if isinstance(payload, Mapping) else None
    if not isinstance(raw, Mapping):
        return None
    from llmroute.accounting.tokens import normalize_usage  # loaded with the adapters already

    usage = normalize_usage(raw)
    return usage if usage.prompt_tokens or usage.completion_tokens else None


_KEPT_TEXT = 64 * 1024  # of an error body, for `e.response.text` (the rest is dropped)


def error_from_payload(
    payload: Any,
    *,
    status: int | None,
    headers: Mapping[str, str],
    provider: str,
    deployment: str | None,
    kind: str,
    raw_text: str = "",
) -> E.ProviderError:
    body = parse_error_body(payload)
    # openai-python's `e.body`: the error object inside the envelope, else the whole body (or its text).
    openai_body = payload.get("error", payload) if isinstance(payload, Mapping) else (payload or raw_text.strip() or None)
    if body is None:
        text = raw_text.strip()[:300] or (f"HTTP {status}" if status else "unknown error")
        body = ErrorBody(message=text)
    cls = _classify(status, body, kind)
    retry_after = retry_after_from_headers(headers) if headers else None
    kwargs: dict[str, Any] = dict(
        provider=provider,
        deployment=deployment,
        status=status,
        request_id=body.request_id or _request_id(headers),
        retry_after=retry_after,
        provider_message=body.message or None,
        code=body.code,
        param=body.param,
        type=body.type,
        body=openai_body,
        headers=headers if status is not None else None,
        response_text=raw_text[:_KEPT_TEXT] if status is not None else "",
        usage=billed_usage(payload),
    )
    message = _describe(cls, body, status)
    if cls is E.APITimeoutError:
        return E.APITimeoutError(message, timeout="platform", seconds=None, **kwargs)
    return cls(message, **kwargs)


def error_from_response(
    status: int, headers: Mapping[str, str], content: bytes, *, provider: str, deployment: str | None, kind: str
) -> E.ProviderError:
    """Map a non-2xx HTTP response to a typed error, reading whatever envelope the platform uses."""
    if 300 <= status < 400:
        # httpx follows no redirects for us (a POST carrying a key must not be resent elsewhere).
        location = headers.get("location")
        return E.RedirectError(
            f"redirected ({status}) to {location or 'nowhere'}: redirects are not followed; set the "
            f"provider's base_url to the final address", location=location, provider=provider,
            deployment=deployment, status=status, request_id=_request_id(headers), retryable=False,
        )
    text = content.decode("utf-8", errors="replace")
    try:
        payload = json.loads(text) if text.strip() else None
    except (ValueError, RecursionError):
        payload = _sse_error_payload(text)
    return error_from_payload(
        payload, status=status, headers=headers, provider=provider, deployment=deployment, kind=kind, raw_text=text
    )


def _sse_error_payload(text: str) -> Any:
    """The JSON of an error sent as an SSE frame with a non-2xx status (DashScope's native protocol
    does this for streamed calls: `id:1`, `event:error`, `:HTTP_STATUS/401`, `data:{...}`)."""
    for line in reversed(text.split("\n")):  # SSE ends lines at \n, \r\n or \r; JSON stays on its line
        if line.startswith("data:"):
            try:
                return json.loads(line[5:])
            except ValueError:
                return None
    return None
