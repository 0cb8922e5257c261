"""Alibaba Bailian / DashScope: the OpenAI-compatible mode and the native DashScope protocol.

Compatible mode (docs/platforms.md §4a) is the OpenAI wire format with `max_completion_tokens`, usage on
a final `choices: []` chunk when `include_usage` is asked for, and content-filter errors that may
arrive mid-stream as a `data:` event; the base adapter handles all of that.

The native protocol (§4b) is different: the body is `{"model", "input": {"messages"}, "parameters"}`,
streaming needs the `X-DashScope-SSE: enable` header, events carry `id:`/`event:` lines and a
`:HTTP_STATUS/200` comment, there is no `[DONE]`, every event carries cumulative usage, and text is
cumulative unless `incremental_output` is true. It comes out as the same `ChatCompletion`. Sans-I/O.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any, Dict, Mapping

from llmroute.providers.base import CallInput, OpenAICompatAdapter, StreamDecoder, normalize_finish_reason
from llmroute.providers.logprobs import logprobs_from_wire
from llmroute._http.sse import SSEEvent
from llmroute.accounting.tokens import normalize_usage
from llmroute.types import ChatCompletion, ChatCompletionChunk, Usage
from llmroute import errors as E

__all__ = ["BailianCompatAdapter", "BailianNativeAdapter"]

# OpenAI parameters the native protocol takes under `parameters` (dashscope/aigc/generation.py).
_NATIVE_PARAMS = frozenset(
    {
        "temperature", "top_p", "top_k", "seed", "stop", "tools", "tool_choice", "parallel_tool_calls", "n",
        "presence_penalty", "repetition_penalty", "logprobs", "top_logprobs", "response_format", "enable_search",
        "search_options", "enable_thinking", "thinking_budget", "incremental_output", "result_format",
        "frequency_penalty",
    }
)


_FIELD_REFUSED_RE = re.compile(
    r"not (?:be )?supported|unsupported|unknown (?:field|param)|unrecognized|unexpected (?:field|keyword|param)|"
    r"not allowed|not permitted|extra (?:fields|inputs) (?:are )?not permitted|invalid (?:field|param\w*) name",
    re.IGNORECASE,
)


def _event_status(comments: tuple[str, ...]) -> int | None:
    for comment in comments:
        if comment.startswith("HTTP_STATUS/") and comment[12:15].isdigit():
            return int(comment[12:15])
    return None


# "This model only support stream mode, please enable the stream parameter to access the model.",
# "parameter.enable_thinking must be set to false for non-streaming calls"
_STREAM_ONLY_RE = re.compile(r"only supports? stream|enable the stream parameter|for non-streaming calls",
                             re.IGNORECASE)


class BailianCompatAdapter(OpenAICompatAdapter):
    """§4a: OpenAI mode. We send `max_completion_tokens` (the kind's registry entry), since compatible
    mode reportedly deprecates `max_tokens` from 2026-05-30; an endpoint that refuses the new name
    with a 400 gets the request again with `max_tokens`, and keeps getting `max_tokens` after that."""

    # (base URL, model) pairs that refused max_completion_tokens as a field: process-wide knowledge,
    # per model, since one endpoint serves models of different generations.
    _legacy_cap: set[tuple[str, str]] = set()

    def body(self, call: CallInput, stream: bool) -> Dict[str, Any]:
        body = super().body(call, stream)
        if (self.provider.base_url, self.deployment.model) in self._legacy_cap and "max_completion_tokens" in body:
            body["max_tokens"] = body.pop("max_completion_tokens")
        return body

    def request_after_error(self, error: Any, request: Any) -> Any:
        said = f"{error.provider_message or ''} {error.code or ''}"
        if (isinstance(error, E.BadRequestError) and not request.json.get("stream")
                and _STREAM_ONLY_RE.search(said)):
            # Models served only as streams (QwQ, Qwen3 with thinking on, docs/platforms.md §11.10): a
            # plain call is sent again as a stream and its body assembled (parse_completion).
            body = dict(request.json, stream=True, stream_options={"include_usage": True})
            headers = dict(request.headers, Accept="text/event-stream")
            return type(request)(request.method, request.url, headers, body, request.stream)
        # Only a refusal of the field itself ("max_completion_tokens is not supported"): a value
        # out of range ("Range of max_completion_tokens should be [1, 8192]") is the caller's, and
        # resending it as max_tokens would change what is capped for every later call.
        if (isinstance(error, E.BadRequestError) and not isinstance(error, (E.ContextLengthError, E.ContentFilterError))
                and "max_completion_tokens" in said and _FIELD_REFUSED_RE.search(said)
                and "max_completion_tokens" in request.json):
            self._legacy_cap.add((self.provider.base_url, self.deployment.model))
            body = dict(request.json)
            body["max_tokens"] = body.pop("max_completion_tokens")
            return type(request)(request.method, request.url, request.headers, body, request.stream)
        return None


class _NativeDecoder(StreamDecoder):
    """A `StreamDecoder` that turns the native API's cumulative text back into deltas."""

    def __init__(self, adapter: OpenAICompatAdapter, *, cumulative: bool) -> None:
        super().__init__(adapter)
        self.cumulative = cumulative
        self.previous_text: Dict[int, str] = {}  # choice index -> the text sent so far
        self.previous_reasoning: Dict[int, str] = {}


class BailianNativeAdapter(OpenAICompatAdapter):
    chat_path = "/services/aigc/text-generation/generation"

    def headers(self, stream: bool) -> Dict[str, str]:
        headers = super().headers(stream)
        if stream:
            headers["X-DashScope-SSE"] = "enable"
            headers["X-Accel-Buffering"] = "no"
        return headers

    def body(self, call: CallInput, stream: bool) -> Dict[str, Any]:
        params = dict(call.params)
        cap = params.pop("max_completion_tokens", None) or params.pop("max_tokens", None)
        params.pop("stream", None)
        params.pop("stream_options", None)
        parameters: Dict[str, Any] = {"result_format": "message"}
        if stream:
            parameters["incremental_output"] = True
        if cap is not None:
            parameters["max_tokens"] = cap
        for name, value in params.items():
            if name not in _NATIVE_PARAMS:
                raise E.BadRequestError(
                    f"parameter {name!r} has no equivalent in the DashScope native protocol "
                    "(use protocol = \"compatible\", or pass it in extra_body)",
                    provider=self.provider.name,
                    deployment=self.deployment.id,
                )
            parameters[name] = value
        extra = {**self.deployment.extra_body, **call.extra_body}
        parameters.update(extra.pop("parameters", {}) if isinstance(extra.get("parameters"), dict) else {})
        parameters.update(extra)
        return {"model": self.deployment.model, "input": {"messages": call.messages}, "parameters": parameters}

    def stream_decoder(self, call: CallInput) -> StreamDecoder:
        # Cumulative text unless incremental_output is on: we ask for it, but a user may turn it off.
        body_params = self.body(call, True)["parameters"]
        return _NativeDecoder(self, cumulative=not body_params.get("incremental_output", False))

    def completion_from_dict(self, data: Dict[str, Any]) -> tuple[ChatCompletion, bool]:
        if "output" not in data and "code" in data:
            raise self.error_from_event(data)
        output = data.get("output") or {}
        choices = []
        for i, choice in enumerate(_native_choices(output)):
            message = dict(choice.get("message") or {})
            self.normalize_message(message)
            choices.append(
                {
                    "index": choice.get("index", i),
                    "message": message,
                    "finish_reason": normalize_finish_reason(
                        choice.get("finish_reason"), provider=self.provider.name, deployment=self.deployment.id
                    ),
                    "logprobs": logprobs_from_wire(choice.get("logprobs")),
                }
            )
        raw_usage = data.get("usage")
        reported = isinstance(raw_usage, dict)
        completion = ChatCompletion.model_validate(
            {
                "id": data.get("request_id") or "",
                "created": int(time.time()),
                "model": self.deployment.model,
                "choices": choices,
                "usage": normalize_usage(raw_usage) if isinstance(raw_usage, dict) else Usage(),
            }
        )
        return completion, reported

    def decode_event(self, event: SSEEvent, decoder: StreamDecoder) -> ChatCompletionChunk | None:
        if not event.data:
            return None
        try:
            payload = json.loads(event.data)
        except ValueError:
            raise self._bad_body(f"malformed SSE data: {event.data[:80]!r}") from None
        if event.event == "error" or (isinstance(payload, Mapping) and "output" not in payload and "code" in payload):
            # The event names its HTTP status in a comment line, ":HTTP_STATUS/400" (§4b): it decides
            # whether the error is the caller's, fatal or worth a retry.
            raise self.error_from_event(payload, status=_event_status(event.comments))
        output = payload.get("output") or {}
        choices = []
        for i, choice in enumerate(_native_choices(output)):
            index = choice.get("index", i)
            message = choice.get("message") or {}
            text = message.get("content") or ""
            reasoning = message.get("reasoning_content") or ""
            if isinstance(decoder, _NativeDecoder) and decoder.cumulative:
                text = _new_part(decoder.previous_text, index, text)
                reasoning = _new_part(decoder.previous_reasoning, index, reasoning)
            delta: Dict[str, Any] = {}
            if message.get("role"):
                delta["role"] = message["role"]
            if text:
                delta["content"] = text
            if reasoning:
                delta["reasoning_content"] = reasoning
            if message.get("tool_calls"):
                delta["tool_calls"] = [
                    {"index": call.get("index", j), **{k: v for k, v in call.items() if k != "index"}}
                    for j, call in enumerate(message["tool_calls"])
                ]
            finish = normalize_finish_reason(
                choice.get("finish_reason"), provider=self.provider.name, deployment=self.deployment.id
            )
            if finish is not None:
                decoder.finished = True
            choices.append({"index": index, "delta": delta, "finish_reason": finish})
        usage = None
        if isinstance(payload.get("usage"), dict):
            usage = normalize_usage(payload["usage"])
            decoder.usage = usage
        return ChatCompletionChunk.model_validate(
            {
                "id": payload.get("request_id") or event.id or "",
                "created": int(time.time()),
                "model": self.deployment.model,
                "choices": choices,
                "usage": usage,
            }
        )


def _native_choices(output: Mapping[str, Any]) -> list[dict[str, Any]]:
    if output.get("choices"):
        return [c for c in output["choices"] if isinstance(c, dict)]
    if "text" in output:  # result_format = "text"
        return [{"message": {"role": "assistant", "content": output.get("text")}, "finish_reason": output.get("finish_reason")}]
    return []


def _new_part(previous: Dict[int, str], index: int, text: str) -> str:
    before = previous.get(index, "")
    previous[index] = text if text.startswith(before) else before + text
    return text[len(before) :] if text.startswith(before) else text
