"""Result and error files -> one outcome per `custom_id`. Sans-I/O.

Both files are JSONL keyed by `custom_id`. A result line is OpenAI's
`{"custom_id", "response": {"status_code", "body": <completion>}, "error": null}`, or (Fireworks,
shape unconfirmed) a completion beside `custom_id`. An error line carries `error` or a non-2xx
`response`. Usage is read wherever the platform puts it (`tokens.normalize_usage`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Mapping

from llmroute.accounting.tokens import normalize_usage
from llmroute.types import ChatCompletion
from llmroute.batch.platforms import lines_of

__all__ = ["LineOutcome", "read_outcomes", "completion_from_body"]


@dataclass
class LineOutcome:
    custom_id: str
    body: Dict[str, Any] | None = None  # the completion, when the request succeeded
    error: Dict[str, Any] | None = None  # {"code", "message", "status"} when it failed


def _error_of(line: Mapping[str, Any]) -> Dict[str, Any] | None:
    error = line.get("error")
    response = line.get("response") if isinstance(line.get("response"), Mapping) else None
    if error:
        if isinstance(error, Mapping):
            return {"code": error.get("code"), "message": str(error.get("message") or error)[:500],
                    "status": response.get("status_code") if response else None}
        return {"code": None, "message": str(error)[:500], "status": None}
    if response is not None:
        status = response.get("status_code")
        if isinstance(status, int) and status >= 300:
            body = response.get("body") or {}
            inner = body.get("error") if isinstance(body, Mapping) else None
            if isinstance(inner, Mapping):
                return {"code": inner.get("code") or inner.get("type"), "message": str(inner.get("message"))[:500],
                        "status": status}
            return {"code": None, "message": str(body)[:500], "status": status}
    return None


def _is_answer(body: Any) -> bool:
    # a chat completion has choices; an embeddings response has data
    return isinstance(body, Mapping) and ("choices" in body or isinstance(body.get("data"), list))


def _body_of(line: Mapping[str, Any]) -> Dict[str, Any] | None:
    response = line.get("response")
    if isinstance(response, Mapping):
        body = response.get("body", response)
        if _is_answer(body):
            return dict(body)
    if "choices" in line:
        return {k: v for k, v in line.items() if k != "custom_id"}
    return None


def read_outcomes(output: bytes, errors: bytes) -> Dict[str, LineOutcome]:
    """Every custom_id found in either file. A line in both counts as the success."""
    outcomes: Dict[str, LineOutcome] = {}
    for line in lines_of(errors):
        custom_id = line.get("custom_id")
        if isinstance(custom_id, str):
            outcomes[custom_id] = LineOutcome(custom_id, error=_error_of(line) or {"code": None,
                                                                                  "message": str(line)[:500]})
    for line in lines_of(output):
        custom_id = line.get("custom_id")
        if not isinstance(custom_id, str):
            continue
        error = _error_of(line)
        body = None if error else _body_of(line)
        if body is not None:
            outcomes[custom_id] = LineOutcome(custom_id, body=body)
        elif custom_id not in outcomes:
            outcomes[custom_id] = LineOutcome(custom_id, error=error or {"code": None,
                                                                        "message": "result line without a completion"})
    return outcomes


def completion_from_body(body: Mapping[str, Any]) -> ChatCompletion:
    """A platform's completion JSON -> `ChatCompletion` with OpenAI-shaped usage."""
    data = dict(body)
    raw_usage = data.pop("usage", None) or {}
    completion = ChatCompletion.model_validate(data)
    completion.usage = normalize_usage(raw_usage, extra=data)
    return completion
