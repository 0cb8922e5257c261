"""Checks on `create()`'s arguments, before anything is sent. Sans-I/O: plain functions.

`check_create_args` is the one entry point (called from `call.prepare_call`). Everything wrong is an
`InvalidRequestError` whose `field` names the argument (down to `messages[2].content[0].text`); an
argument `create()` does not know is a `TypeError`, as in the OpenAI SDK (platform-specific
parameters go in `extra_body`).

What is checked, and what is passed through as given:

- Checked for type and range: `model` (no whitespace, control characters, backslashes or `.`/`..`
  path segments; at most `MAX_MODEL_CHARS`), `messages` (roles, content as a string, a list of parts
  of a known shape, or None; `name`, `tool_call_id`, `tool_calls`), `stream`, `temperature`,
  `top_p`, `frequency_penalty`, `presence_penalty` (finite numbers in OpenAI's ranges), `n`,
  `max_tokens`, `max_completion_tokens`, `seed`, `top_logprobs`, `logprobs`, `logit_bias`, `stop`,
  `parallel_tool_calls`, `store`, `tool_choice`, `tools`, `functions`, `function_call`,
  `response_format`, `stream_options`, `user`, `reasoning_effort`, `service_tier`, `verbosity`,
  `modalities`, `prompt_cache_key`, `safety_identifier`, and ours: `feature`, `metadata`, `pool`,
  `timeout`, `extra_body`, `extra_headers`, `extra_query`.
- `tools`: a list of dicts, and a `"type": "function"` tool names its function (`function.name`);
  `stream_options`: `include_usage` and `include_obfuscation` are True or False.
- Passed through after a shape check only (a JSON object, see below): `audio`, `prediction`,
  `web_search_options`, the inside of `tools[*].function.parameters`, other tool types,
  `response_format.json_schema`, and `extra_body`'s values. The platform judges their meaning.
- Everything sent must be JSON: str keys, finite numbers, nested at most `MAX_DEPTH` levels.
- Ours are capped because they are stored in every ledger row: `feature` at `MAX_FEATURE_CHARS`,
  `metadata` at `MAX_METADATA_ITEMS` pairs with keys up to `MAX_METADATA_KEY_CHARS` and values up
  to `MAX_METADATA_VALUE_CHARS` (OpenAI's own metadata limits).
- `extra_headers`: names are HTTP tokens, values latin-1 without CR, LF or NUL.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any, Dict, List

from llmroute import errors as E

__all__ = [
    "CREATE_PARAMS", "LLMROUTE_ARGS", "CheckedArgs", "check_create_args", "check_feature", "check_headers",
    "check_metadata", "check_timeout", "MAX_DEPTH", "MAX_FEATURE_CHARS",
    "MAX_METADATA_ITEMS", "MAX_METADATA_KEY_CHARS", "MAX_METADATA_VALUE_CHARS", "MAX_MODEL_CHARS",
]

MAX_DEPTH = 64
MAX_MODEL_CHARS = 256
MAX_FEATURE_CHARS = 128
MAX_METADATA_ITEMS = 16
MAX_METADATA_KEY_CHARS = 64
MAX_METADATA_VALUE_CHARS = 512
MAX_TIMEOUT_S = 86_400.0

# OpenAI Chat Completions parameters `create()` takes and sends on (besides model and messages).
OPENAI_PARAMS = frozenset({
    "audio", "frequency_penalty", "function_call", "functions", "logit_bias", "logprobs", "max_completion_tokens",
    "max_tokens", "modalities", "n", "parallel_tool_calls", "prediction", "presence_penalty", "prompt_cache_key",
    "reasoning_effort", "response_format", "safety_identifier", "seed", "service_tier", "stop", "store",
    "stream_options", "temperature", "tool_choice", "tools", "top_logprobs", "top_p", "user", "verbosity",
    "web_search_options",
})
# Ours: read by llmroute, never sent as body fields.
LLMROUTE_ARGS = frozenset({"feature", "metadata", "pool", "timeout", "extra_body", "extra_headers", "extra_query"})
CREATE_PARAMS = OPENAI_PARAMS | LLMROUTE_ARGS | {"model", "messages", "stream"}

_ROLES = frozenset({"system", "user", "assistant", "tool", "developer", "function"})
_TOKEN_RE = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP header name (RFC 9110 token)
_BAD_HEADER_CHARS = re.compile(r"[\r\n\x00]")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


@dataclass
class CheckedArgs:
    """`create()`'s arguments after the checks: what to send and what llmroute keeps."""

    model: str
    messages: List[Dict[str, Any]]
    stream: bool
    params: Dict[str, Any]
    feature: str | None
    metadata: Dict[str, str]
    pool: str
    timeout_s: float | None
    extra_body: Dict[str, Any]
    extra_headers: Dict[str, str]
    extra_query: Dict[str, str]


def _bad(field: str, message: str) -> E.InvalidRequestError:
    return E.InvalidRequestError(message, field=field)


def check_json(value: Any, field: str, *, depth: int = 0) -> None:
    """`value` is JSON (str keys, finite numbers) nested at most `MAX_DEPTH` levels. Iterative; the
    path of a fault is worked out only when there is one."""
    if not _is_json(value, MAX_DEPTH - depth):
        _name_json_fault(value, field, depth)


def _is_json(value: Any, levels: int) -> bool:
    stack = [(value, levels)]
    while stack:
        item, left = stack.pop()
        kind = type(item)
        if kind is str or kind is int or kind is bool or item is None:
            continue
        if kind is float:
            if not math.isfinite(item):
                return False
            continue
        if left <= 0:
            return False
        if kind is dict:
            for key, inner in item.items():
                if type(key) is not str:
                    return False
                if type(inner) is not str:
                    stack.append((inner, left - 1))
        elif kind is list or kind is tuple:
            stack.extend((inner, left - 1) for inner in item)
        else:
            return False  # subclasses and other types: the slow walk decides
    return True


def _name_json_fault(value: Any, field: str, depth: int) -> None:
    stack = [(value, field, depth)]
    while stack:
        item, where, level = stack.pop()
        if item is None or isinstance(item, (str, bool, int)):
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                raise _bad(where, f"{item!r} is not a finite number (JSON has no NaN or infinity)")
            continue
        if level >= MAX_DEPTH:
            raise _bad(where, f"nested more than {MAX_DEPTH} levels deep")
        if isinstance(item, Mapping):
            for key, inner in item.items():
                if not isinstance(key, str):
                    raise _bad(where, f"keys must be strings, got {type(key).__name__} {key!r:.40}")
                stack.append((inner, f"{where}.{key}", level + 1))
        elif isinstance(item, (list, tuple)):
            for i, inner in enumerate(item):
                stack.append((inner, f"{where}[{i}]", level + 1))
        else:
            raise _bad(where, f"{type(item).__name__} is not JSON-serialisable (use str, number, bool, None, list, dict)")


def _number(value: Any, field: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad(field, f"must be a number, got {type(value).__name__}")
    if not math.isfinite(value) or not low <= value <= high:
        raise _bad(field, f"must be a finite number from {low:g} to {high:g}, got {value!r}")
    return value


def _integer(value: Any, field: str, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(field, f"must be an integer, got {type(value).__name__}")
    if value < low or (high is not None and value > high):
        span = f"from {low} to {high}" if high is not None else f"at least {low}"
        raise _bad(field, f"must be an integer {span}, got {value}")
    return value


def _text(value: Any, field: str, *, limit: int = 10_000, control_ok: bool = False) -> str:
    if not isinstance(value, str):
        raise _bad(field, f"must be a string, got {type(value).__name__}")
    if len(value) > limit:
        raise _bad(field, f"is {len(value)} characters; at most {limit}")
    if not control_ok and _CONTROL_RE.search(value):
        raise _bad(field, "must not contain control characters (CR, LF, NUL...)")
    return value


def _mapping(value: Any, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _bad(field, f"must be a dict, got {type(value).__name__}")
    check_json(value, field)
    return value


def _bool(value: Any, field: str) -> bool:
    if not isinstance(value, bool):
        raise _bad(field, f"must be True or False, got {type(value).__name__}")
    return value


_CHECKED_MODELS: "set[str]" = set()  # names that passed check_model: a client uses a few, checked once each
_MAX_CHECKED_MODELS = 4096


def check_model(model: Any) -> str:
    if type(model) is str and model in _CHECKED_MODELS:
        return model
    if not isinstance(model, str) or not model:
        raise _bad("model", "is required: a tier name, 'auto', or 'provider:model-id'")
    if len(model) > MAX_MODEL_CHARS:
        raise _bad("model", f"is {len(model)} characters; at most {MAX_MODEL_CHARS}")
    if any(ch.isspace() for ch in model) or _CONTROL_RE.search(model):
        raise _bad("model", f"must not contain spaces or control characters: {model[:80]!r}")
    if "\\" in model or any(seg in (".", "..") for seg in re.split(r"[/:]", model)):
        raise _bad("model", f"must not contain backslashes or '.'/'..' path segments: {model[:80]!r}")
    if type(model) is str and len(_CHECKED_MODELS) < _MAX_CHECKED_MODELS:
        _CHECKED_MODELS.add(model)
    return model


def _part(part: Any, field: str) -> Dict[str, Any]:
    if hasattr(part, "model_dump"):
        part = part.model_dump(exclude_none=True)
    if not isinstance(part, Mapping):
        raise _bad(field, f"must be a content part dict, got {type(part).__name__}")
    kind = part.get("type")
    if not isinstance(kind, str) or not kind:
        raise _bad(f"{field}.type", "must be a string such as 'text' or 'image_url'")
    if kind in ("text", "refusal"):
        _text(part.get(kind), f"{field}.{kind}", limit=1 << 30, control_ok=True)
    elif kind == "image_url":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, Mapping) else image
        if not isinstance(url, str) or not url:
            raise _bad(f"{field}.image_url", "must be {'url': '<http(s) or data: URL>'}")
    elif kind == "input_audio":
        audio = part.get("input_audio")
        if not isinstance(audio, Mapping) or not isinstance(audio.get("data"), str):
            raise _bad(f"{field}.input_audio", "must be {'data': '<base64>', 'format': 'wav' or 'mp3'}")
    elif kind == "file" and not isinstance(part.get("file"), Mapping):
        raise _bad(f"{field}.file", "must be a dict ({'file_id': ...} or {'file_data': ..., 'filename': ...})")
    return dict(part)


def check_messages(messages: Any) -> List[Dict[str, Any]]:
    if isinstance(messages, (str, bytes)) or not isinstance(messages, (list, tuple)) or not messages:
        raise _bad("messages", "must be a non-empty list of messages")
    out = []
    for i, message in enumerate(messages):
        if (type(message) is dict and len(message) == 2 and type(message.get("content")) is str
                and type(message.get("role")) is str and message["role"] in _ROLES):
            out.append(message.copy())  # the common message, {"role": ..., "content": "text"}: valid JSON as it is
            continue
        where = f"messages[{i}]"
        if hasattr(message, "model_dump"):
            message = message.model_dump(exclude_none=True)
        if not isinstance(message, Mapping):
            raise _bad(where, f"must be a dict, got {type(message).__name__}")
        role = message.get("role")
        if role not in _ROLES:
            raise _bad(f"{where}.role", f"unknown role {role!r:.40}; expected one of {', '.join(sorted(_ROLES))}")
        message = dict(message)
        content = message.get("content")
        if isinstance(content, (list, tuple)):
            message["content"] = [_part(p, f"{where}.content[{j}]") for j, p in enumerate(content)]
        elif content is not None and not isinstance(content, str):
            raise _bad(f"{where}.content", "must be a string, a list of parts, or None")
        for name in ("name", "tool_call_id"):
            if message.get(name) is not None:
                _text(message[name], f"{where}.{name}", limit=256)
        calls = message.get("tool_calls")
        if calls is not None and not isinstance(calls, (list, tuple)):
            raise _bad(f"{where}.tool_calls", "must be a list of tool calls")
        check_json(message, where, depth=1)
        out.append(message)
    return out


def _stop(value: Any) -> Any:
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(s, str) for s in value):
        return list(value)
    raise _bad("stop", "must be a string or a list of strings")


def _list_of_dicts(value: Any, field: str) -> List[Any]:
    if not isinstance(value, (list, tuple)):
        raise _bad(field, f"must be a list, got {type(value).__name__}")
    for i, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise _bad(f"{field}[{i}]", f"must be a dict, got {type(item).__name__}")
    check_json(value, field)
    return list(value)


def _tools(value: Any) -> List[Any]:
    """A list of tool dicts; a function tool names its function (OpenAI's `{"type": "function",
    "function": {"name": ...}}`). Other tool types are the platform's to judge."""
    tools = _list_of_dicts(value, "tools")
    for i, tool in enumerate(tools):
        if tool.get("type") == "function":
            function = tool.get("function")
            if not isinstance(function, Mapping):
                raise _bad(f"tools[{i}].function", "must be a dict with the function's name (and parameters)")
            if not isinstance(function.get("name"), str) or not function["name"]:
                raise _bad(f"tools[{i}].function.name", "must be the function's name (a non-empty string)")
    return tools


def _stream_options(value: Any) -> Mapping[str, Any]:
    options = _mapping(value, "stream_options")
    for name in ("include_usage", "include_obfuscation"):
        if name in options and not isinstance(options[name], bool):
            raise _bad(f"stream_options.{name}", f"must be True or False, got {type(options[name]).__name__}")
    return options


def _str_or_dict(value: Any, field: str) -> Any:
    if isinstance(value, str):
        return _text(value, field, limit=256)
    return _mapping(value, field)


_CHECKS: Dict[str, Any] = {
    "temperature": lambda v: _number(v, "temperature", 0.0, 2.0),
    "top_p": lambda v: _number(v, "top_p", 0.0, 1.0),
    "frequency_penalty": lambda v: _number(v, "frequency_penalty", -2.0, 2.0),
    "presence_penalty": lambda v: _number(v, "presence_penalty", -2.0, 2.0),
    "n": lambda v: _integer(v, "n", 1, 128),
    "max_tokens": lambda v: _integer(v, "max_tokens", 1),
    "max_completion_tokens": lambda v: _integer(v, "max_completion_tokens", 1),
    "seed": lambda v: _integer(v, "seed", -(2**63), 2**64 - 1),
    "top_logprobs": lambda v: _integer(v, "top_logprobs", 0, 20),
    "logprobs": lambda v: _bool(v, "logprobs"),
    "parallel_tool_calls": lambda v: _bool(v, "parallel_tool_calls"),
    "store": lambda v: _bool(v, "store"),
    "stop": _stop,
    "tools": _tools,
    "functions": lambda v: _list_of_dicts(v, "functions"),
    "tool_choice": lambda v: _str_or_dict(v, "tool_choice"),
    "function_call": lambda v: _str_or_dict(v, "function_call"),
    "response_format": lambda v: _mapping(v, "response_format"),
    "stream_options": _stream_options,
    "audio": lambda v: _mapping(v, "audio"),
    "prediction": lambda v: _mapping(v, "prediction"),
    "web_search_options": lambda v: _mapping(v, "web_search_options"),
    "user": lambda v: _text(v, "user", limit=512),
    "reasoning_effort": lambda v: _text(v, "reasoning_effort", limit=64),
    "service_tier": lambda v: _text(v, "service_tier", limit=64),
    "verbosity": lambda v: _text(v, "verbosity", limit=64),
    "prompt_cache_key": lambda v: _text(v, "prompt_cache_key", limit=1024),
    "safety_identifier": lambda v: _text(v, "safety_identifier", limit=512),
    "modalities": lambda v: [_text(m, "modalities", limit=64) for m in _list_of(v, "modalities")],
}


def _list_of(value: Any, field: str) -> List[Any]:
    if not isinstance(value, (list, tuple)):
        raise _bad(field, f"must be a list, got {type(value).__name__}")
    return list(value)


def _logit_bias(value: Any) -> Dict[str, float]:
    if not isinstance(value, Mapping):
        raise _bad("logit_bias", "must be a dict of token id to a number from -100 to 100")
    out = {}
    for key, bias in value.items():
        if isinstance(key, bool) or not isinstance(key, (str, int)) or not str(key).isdigit():
            raise _bad("logit_bias", f"keys must be token ids, got {key!r:.40}")
        out[str(key)] = _number(bias, f"logit_bias.{key}", -100.0, 100.0)
    return out


def check_feature(feature: Any) -> str:
    return _text(feature, "feature", limit=MAX_FEATURE_CHARS)


def check_metadata(metadata: Any) -> Dict[str, str]:
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise _bad("metadata", "must be a dict of str to str")
    if len(metadata) > MAX_METADATA_ITEMS:
        raise _bad("metadata", f"has {len(metadata)} pairs; at most {MAX_METADATA_ITEMS}")
    for key, value in metadata.items():
        if not isinstance(key, str):
            raise _bad("metadata", f"keys must be strings; key {key!r} is a {type(key).__name__}")
        if not isinstance(value, str):
            raise _bad(f"metadata.{key}", f"must be a string, not {type(value).__name__} ({value!r}); "
                       f"metadata is a dict of str to str: write {str(value)!r}"[:300])
        _text(key, "metadata", limit=MAX_METADATA_KEY_CHARS)
        _text(value, f"metadata.{key}", limit=MAX_METADATA_VALUE_CHARS)
    return dict(metadata)


def check_headers(headers: Any) -> Dict[str, str]:
    if headers is None:
        return {}
    if not isinstance(headers, Mapping):
        raise _bad("extra_headers", "must be a dict of header name to string value")
    for name, value in headers.items():
        if not isinstance(name, str) or not _TOKEN_RE.match(name):
            raise _bad("extra_headers", f"{name!r:.60} is not a valid HTTP header name")
        if not isinstance(value, str):
            raise _bad("extra_headers", f"header {name!r}: the value must be a string, got {type(value).__name__}")
        if _BAD_HEADER_CHARS.search(value):
            raise _bad("extra_headers", f"header {name!r}: the value must not contain CR, LF or NUL")
        try:
            value.encode("latin-1")
        except UnicodeEncodeError:
            raise _bad("extra_headers", f"header {name!r}: the value must be latin-1 text (encode other text "
                                        f"first)") from None
    return dict(headers)


def check_query(query: Any) -> Dict[str, str]:
    if query is None:
        return {}
    if not isinstance(query, Mapping):
        raise _bad("extra_query", "must be a dict of name to str, int, float or bool")
    out = {}
    for name, value in query.items():
        if not isinstance(name, str) or not name:
            raise _bad("extra_query", f"names must be non-empty strings, got {name!r:.40}")
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, float) and not math.isfinite(value):
            raise _bad(f"extra_query.{name}", f"must be finite, got {value!r}")
        elif not isinstance(value, (str, int, float)):
            raise _bad(f"extra_query.{name}", f"must be str, int, float or bool, got {type(value).__name__}")
        out[name] = str(value)
    return out


def check_timeout(timeout: Any) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise _bad("timeout", f"must be a number of seconds, got {type(timeout).__name__}")
    if not math.isfinite(timeout) or not 0 < timeout <= MAX_TIMEOUT_S:
        raise _bad("timeout", f"must be a finite number of seconds above 0, at most {MAX_TIMEOUT_S:g}; got {timeout!r}")
    return float(timeout)


def check_create_args(args: Mapping[str, Any], *, pools: Any) -> CheckedArgs:
    """Check every argument of `create()`. `pools`: the configured pool names."""
    unknown = sorted(args.keys() - CREATE_PARAMS) if not CREATE_PARAMS.issuperset(args) else None
    if unknown:
        raise TypeError(f"create() got an unexpected keyword argument {unknown[0]!r} "
                        f"(platform-specific parameters go in extra_body={{...}})")
    model = check_model(args.get("model"))
    messages = check_messages(args.get("messages"))
    stream = args.get("stream", False)
    if stream is None:
        stream = False
    _bool(stream, "stream")
    feature = args.get("feature")
    if feature is not None:
        check_feature(feature)
    pool = args.get("pool") or "interactive"
    if not isinstance(pool, str) or pool not in pools:
        raise _bad("pool", f"unknown pool {pool!r:.60} (known: {', '.join(sorted(pools))})")
    extra_body = args.get("extra_body")
    params: Dict[str, Any] = {}
    for name, value in args.items():
        if name not in OPENAI_PARAMS or value is None:
            continue
        check = _CHECKS.get(name)
        params[name] = _logit_bias(value) if name == "logit_bias" else check(value) if check else value
    return CheckedArgs(
        model=model,
        messages=messages,
        stream=stream,
        params=params,
        feature=feature,
        # (the checks of an argument not given return its empty value: not called for it)
        metadata=check_metadata(args["metadata"]) if args.get("metadata") is not None else {},
        pool=pool,
        timeout_s=check_timeout(args["timeout"]) if args.get("timeout") is not None else None,
        extra_body=dict(_mapping(extra_body, "extra_body")) if extra_body is not None else {},
        extra_headers=check_headers(args["extra_headers"]) if args.get("extra_headers") is not None else {},
        extra_query=check_query(args["extra_query"]) if args.get("extra_query") is not None else {},
    )
