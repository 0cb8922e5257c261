"""The requests of a batch job: read, checked, and cut into platform files. Sans-I/O.

`read_requests` accepts OpenAI batch lines (`{"custom_id", "body": {...}}`, with or without
`method`/`url`) or flat ones (`{"custom_id", "messages", ...params}`; `{"custom_id", "input", ...}` for
embeddings), from a list or a JSONL file,
and checks them before anything is sent (`InvalidRequestError` naming the line and field).
`split_parts` groups them one model per file and cuts at the platform's line and byte limits.
Reading a JSONL path is the only I/O here.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Sequence, Union

from llmroute import errors as E
from llmroute.batch.platforms import Limits
from llmroute._runtime.jsonl import split_lines

__all__ = ["BatchRequest", "read_requests", "PartPlan", "split_parts", "endpoint_of", "CHAT", "EMBEDDINGS",
           "MAX_CUSTOM_ID"]

CHAT, EMBEDDINGS = "/v1/chat/completions", "/v1/embeddings"


def endpoint_of(body: Mapping[str, Any]) -> str:
    """The endpoint a request body is for: embeddings when it has `input` and no `messages`."""
    return EMBEDDINGS if "input" in body and "messages" not in body else CHAT

MAX_CUSTOM_ID = 64  # Together's documented maximum; the strictest of the four
_OURS = frozenset({"custom_id", "feature", "metadata"})


@dataclass(frozen=True)
class BatchRequest:
    custom_id: str
    body: Dict[str, Any]  # the chat request without `model`
    model: str | None = None  # a per-request tier / deployment, else the job's


def _line_requests(source: Union[str, os.PathLike[str], Iterable[Mapping[str, Any]]]) -> List[Any]:
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as exc:
            raise E.InvalidRequestError(f"cannot read {path}: {exc.strerror or exc}", field="requests") from None
        items = []
        for n, raw in enumerate(split_lines(text), 1):
            if not raw.strip():
                continue
            try:
                items.append(json.loads(raw))
            except ValueError as exc:
                raise E.InvalidRequestError(f"{path} line {n}: not JSON ({exc})", field="requests") from None
        return items
    if isinstance(source, Mapping):
        raise E.InvalidRequestError("pass a list of requests or a JSONL path, not one dict", field="requests")
    return list(source)


def read_requests(source: Union[str, os.PathLike[str], Iterable[Mapping[str, Any]]]) -> List[BatchRequest]:
    """Checked requests, in order. Raises `InvalidRequestError` naming `requests[i]` and the field."""
    items = _line_requests(source)
    if not items:
        raise E.InvalidRequestError("no requests", field="requests")
    seen: set[str] = set()
    out: List[BatchRequest] = []
    for i, item in enumerate(items):
        where = f"requests[{i}]"
        if not isinstance(item, Mapping):
            raise E.InvalidRequestError(f"must be an object, not {type(item).__name__}", field=where)
        custom_id = item.get("custom_id")
        if not isinstance(custom_id, str) or not custom_id:
            raise E.InvalidRequestError("custom_id must be a non-empty string", field=f"{where}.custom_id")
        if len(custom_id) > MAX_CUSTOM_ID:
            raise E.InvalidRequestError(f"custom_id is longer than {MAX_CUSTOM_ID} characters",
                                        field=f"{where}.custom_id")
        if custom_id in seen:
            raise E.InvalidRequestError(f"custom_id {custom_id!r} appears twice", field=f"{where}.custom_id")
        seen.add(custom_id)
        if "body" in item:
            body = item["body"]
            if not isinstance(body, Mapping):
                raise E.InvalidRequestError("body must be an object", field=f"{where}.body")
            url = item.get("url")
            if url is not None and not str(url).endswith(("/chat/completions", "/embeddings")):
                raise E.InvalidRequestError(f"only chat completions and embeddings are batched, not {url!r}",
                                            field=f"{where}.url")
            body = dict(body)
            if url is not None and str(url).endswith("/embeddings") and "input" not in body:
                raise E.InvalidRequestError("an embeddings request needs input", field=f"{where}.body.input")
        else:
            body = {k: v for k, v in item.items() if k not in _OURS}
        model = body.pop("model", None)
        if body.get("stream"):
            body.pop("stream")  # a batch line has no stream to read; the result file holds the whole answer
            body.pop("stream_options", None)
        if endpoint_of(body) == EMBEDDINGS:
            text = body["input"]
            if not (isinstance(text, str) and text) and not (isinstance(text, list) and text):
                raise E.InvalidRequestError("input must be a non-empty string or list", field=f"{where}.input")
            out.append(BatchRequest(custom_id, body, str(model) if model else None))
            continue
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise E.InvalidRequestError("messages must be a non-empty list", field=f"{where}.messages")
        for j, message in enumerate(messages):
            if not isinstance(message, Mapping) or "role" not in message:
                raise E.InvalidRequestError("each message needs a role", field=f"{where}.messages[{j}]")
        out.append(BatchRequest(custom_id, body, str(model) if model else None))
    return out


@dataclass
class PartPlan:
    """One platform file: one deployment, its lines (custom_ids in order), the JSONL bytes."""

    deployment_id: str
    custom_ids: List[str]
    content: bytes


def split_parts(deployment_id: str, lines: Sequence[tuple[str, Dict[str, Any]]], limits: Limits) -> List[PartPlan]:
    """`lines` (custom_id, JSON line) for one deployment -> files within the platform's limits."""
    parts: List[PartPlan] = []
    ids: List[str] = []
    chunks: List[bytes] = []
    size = 0
    for custom_id, line in lines:
        data = json.dumps(line, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
        if limits.max_line_bytes is not None and len(data) > limits.max_line_bytes:
            raise E.InvalidRequestError(
                f"request {custom_id!r} is {len(data)} bytes, over the platform's {limits.max_line_bytes}-byte line limit",
                field="requests")
        if len(data) > limits.max_bytes:
            raise E.InvalidRequestError(
                f"request {custom_id!r} is {len(data)} bytes, over the platform's {limits.max_bytes}-byte file limit",
                field="requests")
        full_lines = limits.max_lines is not None and len(ids) >= limits.max_lines
        if ids and (full_lines or size + len(data) > limits.max_bytes):
            parts.append(PartPlan(deployment_id, ids, b"".join(chunks)))
            ids, chunks, size = [], [], 0
        ids.append(custom_id)
        chunks.append(data)
        size += len(data)
    if ids:
        parts.append(PartPlan(deployment_id, ids, b"".join(chunks)))
    return parts
