"""Cache keys and namespaces. Sans-I/O.

The key is a SHA-256 over everything that changes the answer: the resolved target (a tier's name
and its deployments, or one deployment, with each deployment's configured `extra_body`), the
messages, every OpenAI parameter the call sends (tools, tool_choice, response_format, temperature,
top_p, seed, n, stop, max_tokens, reasoning_effort, logprobs, ...), and `extra_body`. Only
`stream` and `stream_options` are left out: a streamed and a plain call get the same answer.

The namespace scopes keys: `feature=<feature>` plus `<key>=<value>` for each configured metadata
key (`tenant` by default), so one tenant never reads another's answers.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

__all__ = ["KeyParts", "key_parts", "namespace_for", "target_id", "NOT_IN_KEY", "UnkeyableError", "numbers_of"]

NOT_IN_KEY = frozenset({"stream", "stream_options"})


class UnkeyableError(ValueError):
    """A request holds a value that cannot be written as JSON, so it has no stable key."""


def _plain(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(exclude_none=True)
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    raise UnkeyableError(f"cannot key a {type(value).__name__}")


def _canonical(value: Any) -> bytes:
    try:
        return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=_plain,
                          allow_nan=True).encode()
    except (TypeError, ValueError) as exc:
        raise UnkeyableError(str(exc)) from None


def _digest(value: Any) -> str:
    return hashlib.sha256(_canonical(value)).hexdigest()


def target_id(tier: str | None, deployments: Iterable[Any]) -> list[Any]:
    """The resolved target, as keyed: the tier (or None) and its deployments with their `extra_body`."""
    deps = sorted([d.id, dict(d.extra_body)] for d in deployments)
    return [tier, deps]


@dataclass(frozen=True)
class KeyParts:
    """`exact`: the whole request. `group`: the request minus the last user message (semantic lookups
    compare the embedding of `query` among entries of one group)."""

    exact: str
    group: str
    query: str


def _last_user(messages: Sequence[Mapping[str, Any]]) -> int:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            return i
    return -1


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, Mapping) and p.get("type") == "text")
    return ""


def key_parts(target: list[Any], messages: Sequence[Mapping[str, Any]], params: Mapping[str, Any],
              extra_body: Mapping[str, Any]) -> KeyParts:
    """Keys of one request. Raises `UnkeyableError` when a value has no JSON form."""
    sent = {k: v for k, v in params.items() if k not in NOT_IN_KEY}
    exact = _digest({"target": target, "messages": messages, "params": sent, "extra_body": extra_body})
    i = _last_user(messages)
    query = _text(messages[i].get("content")) if i >= 0 else ""
    # A user turn with images or audio has no text-only paraphrase: it keeps its parts in the group.
    rest = [m for j, m in enumerate(messages) if j != i or not isinstance(m.get("content"), (str, list))
            or (isinstance(m.get("content"), list) and any(
                not (isinstance(p, Mapping) and p.get("type") == "text") for p in m["content"]))]
    group = _digest({"target": target, "messages": rest, "params": sent, "extra_body": extra_body,
                     "semantic": True})
    return KeyParts(exact, group, query)


_NUMBER_OR_CODE = re.compile(r"[A-Za-z]*[0-9][A-Za-z0-9._-]*")


def numbers_of(text: str) -> frozenset[str]:
    """The numbers and product codes in a question ("X200", "100", "v2.1"), case-folded."""
    return frozenset(m.group(0).rstrip("._-").lower() for m in _NUMBER_OR_CODE.finditer(text))


def namespace_for(feature: str | None, metadata: Mapping[str, str], keys: Sequence[str]) -> str:
    """`feature=<f>` then `;<key>=<value>` per configured metadata key (empty when absent)."""
    parts = [f"feature={feature or ''}"]
    parts += [f"{k}={metadata.get(k, '')}" for k in keys]
    return ";".join(parts)
