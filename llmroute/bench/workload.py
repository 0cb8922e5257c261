"""What the bench sends: prompts from a JSONL file, or a built-in synthetic set of a given length.

A JSONL line is one object: `{"prompt": "..."}` or `{"messages": [{"role": ..., "content": ...}]}`,
with an optional positive integer `"max_tokens"`. Every fault raises `ConfigError` naming the
file and the line. Token counts use the offline cl100k tokenizer, loaded on first use.

This module reads the prompts file when asked to and nothing else: no network, no clock.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from llmroute.errors import ConfigError
from llmroute._runtime.jsonl import read_jsonl
from llmroute.accounting.tokens import encoding as _encoding  # the one lazily loaded cl100k encoding of the package

__all__ = ["Prompt", "load_prompts", "synthetic_prompts"]

_ROLES = {"system", "user", "assistant", "developer", "tool"}
_KEYS = {"prompt", "messages", "max_tokens"}

# Common words that are one cl100k token each with a leading space; the synthetic set is built
# from them so that an input length in tokens can be hit exactly.
_WORDS = (
    "time year people way day man thing woman life child world school state family student group "
    "country problem hand part place case week company system program question work government "
    "number night point home water room mother area money story fact month lot right study book "
    "eye job word business issue side kind head house service friend father power hour game line "
    "end member law car city community name president team minute idea kid body information back "
    "parent face others level office door health person art war history party result change morning "
    "reason research girl guy moment air teacher force education"
).split()


@dataclass(frozen=True)
class Prompt:
    """One request's input. `max_tokens` overrides the run's `--max-tokens` when set."""

    messages: tuple[dict[str, str], ...]
    max_tokens: int | None = None
    source: str = ""  # "file.jsonl:12" or "synthetic:3", for error messages and records

    def as_messages(self) -> list[dict[str, str]]:
        return [dict(m) for m in self.messages]


def load_prompts(path: str | Path) -> list[Prompt]:
    """Read a prompts JSONL file (`jsonl.read_jsonl`). Blank lines are skipped; an empty file is an error."""
    prompts = [_parse_object(obj, path=str(path), number=number) for number, obj in read_jsonl(path)]
    if not prompts:
        raise ConfigError("prompts file holds no prompts", path=str(path))
    return prompts


def _parse_object(obj: Mapping[str, Any], *, path: str, number: int) -> Prompt:
    where = f"line {number}"

    def fail(message: str, key: str = "") -> ConfigError:
        return ConfigError(message, path=path, key=f"{where}{'.' + key if key else ''}")

    unknown = sorted(set(obj) - _KEYS)
    if unknown:
        raise fail(f"unknown key(s) {', '.join(map(repr, unknown))}; allowed: prompt, messages, max_tokens")
    if ("prompt" in obj) == ("messages" in obj):
        raise fail('needs exactly one of "prompt" or "messages"')
    if "prompt" in obj:
        if not isinstance(obj["prompt"], str) or not obj["prompt"]:
            raise fail("must be a non-empty string", "prompt")
        messages: tuple[dict[str, str], ...] = ({"role": "user", "content": obj["prompt"]},)
    else:
        raw = obj["messages"]
        if not isinstance(raw, list) or not raw:
            raise fail("must be a non-empty list of {role, content} objects", "messages")
        checked = []
        for i, msg in enumerate(raw):
            if not isinstance(msg, dict):
                raise fail("must be an object with role and content", f"messages[{i}]")
            if msg.get("role") not in _ROLES:
                raise fail(f"role must be one of {', '.join(sorted(_ROLES))}", f"messages[{i}].role")
            if not isinstance(msg.get("content"), str):
                raise fail("content must be a string", f"messages[{i}].content")
            checked.append({"role": msg["role"], "content": msg["content"]})
        messages = tuple(checked)
    max_tokens = obj.get("max_tokens")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens <= 0):
        raise fail("must be a positive integer", "max_tokens")
    return Prompt(messages=messages, max_tokens=max_tokens, source=f"{path}:{number}")


def synthetic_prompts(count: int, *, input_tokens: int, output_tokens: int, seed: int = 0) -> list[Prompt]:
    """`count` distinct prompts of exactly `input_tokens` cl100k tokens, each asking for a long answer.

    Each prompt opens with its own number so that no two share a prefix (a shared prefix would let
    a server's prefix cache hide the prefill cost). `max_tokens` is `output_tokens`; a server that
    stops at end-of-sequence may return fewer, which the records show.
    """
    if count <= 0:
        raise ConfigError("must be positive", key="--synthetic count")
    if input_tokens < 16:
        raise ConfigError("must be at least 16 tokens", key="--input-tokens")
    if output_tokens <= 0:
        raise ConfigError("must be positive", key="--output-tokens")
    rng = random.Random(seed)
    encoding = _encoding()
    prompts = []
    for i in range(count):
        head = f"Request {i}. Write a long story that uses these words, and do not stop early:"
        budget = input_tokens - len(encoding.encode(head))
        words = " ".join(rng.choice(_WORDS) for _ in range(max(budget, 1) + 8))
        tokens = encoding.encode(head + " " + words)[:input_tokens]
        text = encoding.decode(tokens)
        prompts.append(Prompt(messages=({"role": "user", "content": text},), max_tokens=output_tokens,
                              source=f"synthetic:{i}"))
    return prompts
