"""What a cache entry holds, which answers may become one, and how a hit is replayed. Sans-I/O.

An entry is one complete answer as JSON: the assembled `ChatCompletion` (usage included), and for a
streamed call the chunks exactly as the platform sent them (content, reasoning, tool-call deltas,
finish reasons, the usage chunk), plus who answered and what the answer cost. A plain call that hits
a streamed entry gets the assembled completion; a streamed call that hits a plain entry gets chunks
built from the completion (a role+content chunk per choice, its tool calls, its finish reason, then
a usage chunk).

Only complete answers are stored: a call that ended in an error never reaches the store; an answer
whose finish reason is missing or `content_filter`, or that carries a refusal, is not stored; a
call whose route has an interrupted attempt is not stored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Dict, List

from llmroute.types import ChatCompletion, ChatCompletionChunk

__all__ = ["Entry", "storable", "encode", "decode", "chunks_from_completion", "STORABLE_FINISH_REASONS"]

FORMAT_VERSION = 1
STORABLE_FINISH_REASONS = frozenset({"stop", "length", "tool_calls", "function_call"})


@dataclass
class Entry:
    completion: Dict[str, Any]
    chunks: List[Dict[str, Any]] | None
    deployment: str | None
    provider: str | None
    provider_kind: str | None
    model: str | None
    tier: str | None
    cost: Decimal | None  # what the answering attempt cost: what a hit saves
    currency: str | None
    created_at: float
    expires_at: float
    query: str = ""

    def completion_model(self) -> ChatCompletion:
        return ChatCompletion.model_validate(self.completion)

    def chunk_models(self) -> List[ChatCompletionChunk]:
        if self.chunks is not None:
            return [ChatCompletionChunk.model_validate(c) for c in self.chunks]
        return chunks_from_completion(self.completion_model())


def storable(completion: ChatCompletion, route: Any) -> str | None:
    """None when the answer may be stored, else why not."""
    if route is not None and any(a.status == "interrupted" for a in route.attempts):
        return "an attempt was interrupted"
    if not completion.choices:
        return "no choices"
    for choice in completion.choices:
        if choice.finish_reason not in STORABLE_FINISH_REASONS:
            return f"finish_reason {choice.finish_reason!r}"
        if choice.message.refusal:
            return "refusal"
    return None


def encode(entry: Entry) -> bytes:
    doc = {
        "v": FORMAT_VERSION, "completion": entry.completion, "chunks": entry.chunks,
        "deployment": entry.deployment, "provider": entry.provider, "provider_kind": entry.provider_kind,
        "model": entry.model, "tier": entry.tier,
        "cost": None if entry.cost is None else str(entry.cost), "currency": entry.currency,
        "created_at": entry.created_at, "expires_at": entry.expires_at, "query": entry.query,
    }
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()


def decode(data: bytes) -> Entry:
    """Raises ValueError (or KeyError/TypeError) for bytes that are not an entry of this format."""
    doc = json.loads(data)
    if not isinstance(doc, dict) or doc.get("v") != FORMAT_VERSION:
        raise ValueError("not a cache entry of this version")
    return Entry(
        completion=doc["completion"], chunks=doc["chunks"], deployment=doc["deployment"], provider=doc["provider"],
        provider_kind=doc.get("provider_kind"), model=doc["model"], tier=doc["tier"],
        cost=None if doc["cost"] is None else Decimal(doc["cost"]), currency=doc["currency"],
        created_at=float(doc["created_at"]), expires_at=float(doc["expires_at"]), query=doc.get("query", ""),
    )


def dump_chunk(chunk: ChatCompletionChunk) -> Dict[str, Any]:
    return chunk.model_dump(mode="json", exclude_unset=True)


def dump_completion(completion: ChatCompletion) -> Dict[str, Any]:
    return completion.model_dump(mode="json")


def chunks_from_completion(completion: ChatCompletion) -> List[ChatCompletionChunk]:
    """A plain answer as the chunks a stream of it would carry."""
    head = {"id": completion.id, "object": "chat.completion.chunk", "created": completion.created,
            "model": completion.model, "system_fingerprint": completion.system_fingerprint}
    out: List[ChatCompletionChunk] = []
    for choice in completion.choices:
        m = choice.message
        delta: Dict[str, Any] = {"role": m.role}
        if m.reasoning_content:
            delta["reasoning_content"] = m.reasoning_content
        if m.content is not None:
            delta["content"] = m.content
        if m.tool_calls:
            delta["tool_calls"] = [
                {"index": i, "id": t.id, "type": t.type,
                 "function": {"name": t.function.name, "arguments": t.function.arguments}}
                for i, t in enumerate(m.tool_calls)
            ]
        out.append(ChatCompletionChunk.model_validate({**head, "choices": [{"index": choice.index, "delta": delta}]}))
        out.append(ChatCompletionChunk.model_validate(
            {**head, "choices": [{"index": choice.index, "delta": {}, "finish_reason": choice.finish_reason}]}))
    out.append(ChatCompletionChunk.model_validate({**head, "choices": [], "usage": completion.usage.model_dump()}))
    return out
