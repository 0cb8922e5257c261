"""The OpenAI-compatible adapter: request building, response parsing and stream decoding. Sans-I/O.

An adapter turns one call into an `HttpRequest`, and turns what comes back (a status, headers, body
bytes or SSE bytes) into OpenAI-shaped `ChatCompletion` / `ChatCompletionChunk` objects or a typed
error. Platform modules subclass it and override only what differs (docs/platforms.md §11). Nothing here
opens a socket or reads a clock: the shells in `client.py` and `transport.py` do.
"""

from __future__ import annotations

import json
import time
from urllib.parse import urlencode
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, Iterable, Iterator, List, Mapping, Sequence

from pydantic_core import from_json

from llmroute import errors as E
from llmroute._runtime.secrets import SecretHeader, SecretStr
from llmroute._http.request import HttpRequest
from llmroute._http.sse import SSEDecoder, SSEEvent
from llmroute.accounting.tokens import normalize_usage
from llmroute.types import ChatCompletion, ChatCompletionChunk, ChoiceLogprobs, Usage
from llmroute.providers.error_mapping import error_from_payload, error_from_response, is_error_payload
from llmroute.providers.logprobs import logprobs_from_wire
from llmroute.providers.think import ThinkSplitter, split_think

if TYPE_CHECKING:
    from llmroute.config import Deployment

__all__ = ["HttpRequest", "CallInput", "OpenAICompatAdapter", "StreamDecoder", "StreamAssembler", "FINISH_REASONS"]

# Non-OpenAI finish reasons -> OpenAI's (docs/platforms.md §11.5). "abort" (SGLang) is raised as an error.
FINISH_REASONS = {
    "eos": "stop",
    "eos_token": "stop",
    "stop_sequence": "stop",
    "end_turn": "stop",
    "max_tokens": "length",
    "model_length": "length",
    "tool_call": "tool_calls",
    "function_call": "function_call",
    "null": None,
    "": None,
}

# Parameters that are ours, never sent to a platform.
LLMROUTE_PARAMS = frozenset({"feature", "metadata", "pool", "timeout", "extra_body", "extra_headers", "extra_query"})


@dataclass
class CallInput:
    """What the caller asked for, validated: messages and the OpenAI parameters to send."""

    messages: List[Dict[str, Any]]
    params: Dict[str, Any] = field(default_factory=dict)
    extra_body: Dict[str, Any] = field(default_factory=dict)
    extra_headers: Dict[str, str] = field(default_factory=dict)
    extra_query: Dict[str, str] = field(default_factory=dict)  # URL query parameters


def bearer(api_key: SecretStr) -> SecretHeader:
    """`Authorization: Bearer <key>`, held as a secret until the transport writes it."""
    return SecretHeader(api_key, "Bearer ")


def normalize_finish_reason(value: Any, *, provider: str, deployment: str) -> str | None:
    if value is None:
        return None
    value = str(value)
    if value == "abort":
        raise E.ServerError(
            "the server aborted the request (finish_reason 'abort')", provider=provider, deployment=deployment
        )
    return FINISH_REASONS.get(value, value)


def _move_reasoning(part: Dict[str, Any]) -> None:
    """Reasoning under any of its names (`reasoning`: Together, vLLM, Ollama) -> `reasoning_content`."""
    reasoning = part.pop("reasoning", None)
    if isinstance(reasoning, dict):
        reasoning = reasoning.get("content") or reasoning.get("text")
    if reasoning and not part.get("reasoning_content"):
        part["reasoning_content"] = reasoning


class OpenAICompatAdapter:
    """The OpenAI Chat Completions wire format, as most platforms speak it."""

    chat_path = "/chat/completions"
    # Fields some servers reject or ignore (Ollama: docs/platforms.md §9); subclasses fill these.
    unsupported_params: frozenset[str] = frozenset()

    def __init__(self, deployment: "Deployment") -> None:
        self.deployment = deployment
        self.provider = deployment.provider
        self.kind = self.provider.kind
        # Chunks can be validated straight from their JSON (`_chunk_from_json`) unless a subclass
        # normalises them its own way.
        self._chunks_from_json = type(self).normalize_chunk is OpenAICompatAdapter.normalize_chunk

    # -- requests ---------------------------------------------------------------------------
    def headers(self, stream: bool) -> Dict[str, Any]:
        """The request's headers. Keys stay secrets (masked in every repr and frame) until the
        transport writes them (`secrets.wire_headers`)."""
        headers: Dict[str, Any] = {"Content-Type": "application/json",
                                   "Accept": "text/event-stream" if stream else "application/json"}
        if self.provider.api_key:
            headers["Authorization"] = bearer(self.provider.api_key)
        headers.update(self.provider.headers)
        return headers

    def url(self, stream: bool) -> str:
        return self.provider.base_url + self.chat_path

    def body(self, call: CallInput, stream: bool) -> Dict[str, Any]:
        params = dict(call.params)
        self.check_params(params)
        # One output cap, under the name the platform documents (docs/platforms.md §11.14).
        cap = params.pop("max_completion_tokens", None)
        if cap is None:
            cap = params.pop("max_tokens", None)
        else:
            params.pop("max_tokens", None)
        body: Dict[str, Any] = {"model": self.deployment.model, "messages": call.messages}
        body.update(params)
        if cap is not None:
            body[self.provider.max_tokens_field] = cap
        if stream:
            body["stream"] = True
            if self.provider.include_usage:
                options = dict(body.get("stream_options") or {})
                options["include_usage"] = True  # for the ledger even when the caller said False (`for_caller`)
                body["stream_options"] = options
        else:
            body.pop("stream", None)
            body.pop("stream_options", None)
        body.update(self.deployment.extra_body)
        body.update(call.extra_body)
        return body

    def check_params(self, params: Dict[str, Any]) -> None:
        for name in self.unsupported_params & params.keys():
            raise E.BadRequestError(
                f"parameter {name!r} is not supported by {self.kind}",
                provider=self.provider.name,
                deployment=self.deployment.id,
            )

    def build_request(self, call: CallInput, *, stream: bool) -> HttpRequest:
        headers = self.headers(stream)
        headers.update(call.extra_headers)
        url = self.url(stream)
        if call.extra_query:
            url += ("&" if "?" in url else "?") + urlencode(call.extra_query)
        return HttpRequest("POST", url, headers, self.body(call, stream), stream)

    def request_after_error(self, error: E.ProviderError, request: HttpRequest) -> HttpRequest | None:
        """A corrected request to send once more when the platform refused a field we chose (not the
        caller's), or None. The base adapter never corrects anything."""
        return None

    # -- errors ------------------------------------------------------------------------------
    def error_from_response(self, status: int, headers: Mapping[str, str], content: bytes) -> E.ProviderError:
        return error_from_response(
            status, headers, content, provider=self.provider.name, deployment=self.deployment.id, kind=self.kind
        )

    def error_from_event(self, payload: Any, headers: Mapping[str, str] | None = None,
                         status: int | None = None) -> E.ProviderError:
        return error_from_payload(
            payload, status=status, headers=headers or {}, provider=self.provider.name,
            deployment=self.deployment.id, kind=self.kind,
        )

    def _bad_body(self, what: str) -> E.ServerError:
        return E.ServerError(
            f"unreadable response from the platform: {what}", provider=self.provider.name, deployment=self.deployment.id
        )

    def html_answer(self, content_type: str) -> E.ServerError:
        """The error for a 2xx HTML page where a chat answer was due."""
        return self._bad_body(f"an HTML page ({content_type}), not an event stream or JSON: is the provider's "
                              f"base_url its API's (it usually ends in /v1)?")

    def whole_answer_as_stream(self, content: bytes) -> bytes:
        """A stream answered with one JSON body (the server ignored `stream`): the SSE events that
        answer stands for (`completion_as_sse`), for the stream decoder. Raises the body's typed error
        (`json_body`), or an unreadable-response error for a JSON object without `choices`."""
        payload = self.json_body({}, content)
        if not isinstance(payload.get("choices"), list):
            raise self._bad_body("a stream was answered with a JSON object that is not a chat completion")
        return completion_as_sse(payload)

    # -- non-streamed responses --------------------------------------------------------------
    def parse_completion(self, headers: Mapping[str, str], content: bytes) -> tuple[ChatCompletion, bool]:
        """A 2xx body -> (ChatCompletion, usage_reported). Raises a typed error for an error body."""
        try:
            if content[:5] == b"data:" or content.lstrip()[:5] == b"data:":
                completion, reported = self.completion_from_stream_body(content)
            else:
                completion, reported = self.completion_from_dict(self.json_body(headers, content))
        except RecursionError:
            raise self._bad_body("JSON nested too deeply to read") from None
        if not completion.choices:  # nothing to give the caller: an error, not a billed success
            raise self._bad_body("the completion has no choices")
        return completion, reported

    def json_body(self, headers: Mapping[str, str], content: bytes) -> Dict[str, Any]:
        """A 2xx body as a JSON object. Raises a typed error for an error body or one that is not JSON.

        Parsed by pydantic-core (~2.5x faster than `json.loads` on a completion); a body it refuses
        (not UTF-8, a lone surrogate, nested past its limit) is read by `json.loads` instead, whose
        answer and errors are the ones this method has always had."""
        try:
            data = from_json(content)
        except ValueError:
            data = self._json_loads(content)
        if not isinstance(data, dict):
            raise self._bad_body("not a JSON object")
        if is_error_payload(data):
            raise self.error_from_event(data, headers)
        return data

    def _json_loads(self, content: bytes) -> Any:
        try:
            return json.loads(content)
        except ValueError:
            raise self._bad_body("not JSON") from None
        except RecursionError:
            raise self._bad_body("JSON nested too deeply to read") from None

    def completion_from_stream_body(self, content: bytes) -> tuple[ChatCompletion, bool]:
        """A whole SSE body -> the completion it adds up to: for a plain call the platform only
        serves as a stream (the adapter resent it with `stream: true`). Errors in it raise."""
        decoder = self.stream_decoder(CallInput(messages=[], params={}, extra_body={}, extra_headers={}))
        assembler = StreamAssembler()
        for chunk in decoder.feed(content) + decoder.close():
            assembler.add(chunk)
        if not decoder.complete:
            raise self._bad_body("the stream ended before its end marker")
        reported = decoder.usage is not None
        return assembler.completion(decoder.usage or Usage(), self.deployment.model), reported

    def completion_from_dict(self, data: Dict[str, Any]) -> tuple[ChatCompletion, bool]:
        raw_usage = data.get("usage")
        choices = []
        for choice in data.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            choice = dict(choice)
            message = dict(choice.get("message") or {})
            self.normalize_message(message)
            choice["message"] = message
            choice["finish_reason"] = normalize_finish_reason(
                choice.get("finish_reason"), provider=self.provider.name, deployment=self.deployment.id
            )
            if choice.get("logprobs") is not None:
                choice["logprobs"] = logprobs_from_wire(choice["logprobs"])
            choices.append(choice)
        out = dict(data)
        out["choices"] = choices
        out.setdefault("object", "chat.completion")
        if "created" not in out:
            out["created"] = int(time.time())
        out["model"] = data.get("model") or self.deployment.model
        reported = isinstance(raw_usage, dict)
        out["usage"] = normalize_usage(raw_usage, extra=data) if isinstance(raw_usage, dict) else Usage()
        # The validator itself, as for chunks: `model_validate`'s Python wrapper adds nothing here.
        return ChatCompletion.__pydantic_validator__.validate_python(out), reported

    def normalize_message(self, message: Dict[str, Any]) -> None:
        # Reasoning under any of its names becomes `reasoning_content` (docs/platforms.md §11.4).
        _move_reasoning(message)
        content = message.get("content")
        if isinstance(content, str) and self.provider.split_think_tags and "<think>" in content:
            thought, answer = split_think(content)
            if thought is not None:
                message["reasoning_content"] = (message.get("reasoning_content") or "") + thought
                message["content"] = answer

    # -- streams -----------------------------------------------------------------------------
    def stream_decoder(self, call: CallInput) -> "StreamDecoder":
        return StreamDecoder(self)

    def normalize_chunk(self, data: Dict[str, Any], decoder: "StreamDecoder") -> ChatCompletionChunk | None:
        if is_error_payload(data):
            raise self.error_from_event(data)
        raw_usage = data.get("usage")
        choices = []
        for choice in data.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            choice = dict(choice)
            delta = dict(choice.get("delta") or {})
            _move_reasoning(delta)
            content = delta.get("content")
            if self.provider.split_think_tags and isinstance(content, str) and content:
                splitter = decoder.think_splitters.get(choice.get("index", 0))
                if splitter is None:
                    splitter = decoder.think_splitters[choice.get("index", 0)] = ThinkSplitter()
                thought, answer = splitter.feed(content)
                if thought:
                    delta["reasoning_content"] = (delta.get("reasoning_content") or "") + thought
                delta["content"] = answer
            choice["delta"] = delta
            if choice.get("logprobs") is not None:
                choice["logprobs"] = logprobs_from_wire(choice["logprobs"], content if isinstance(content, str) else None)
            choice["finish_reason"] = normalize_finish_reason(
                choice.get("finish_reason"), provider=self.provider.name, deployment=self.deployment.id
            )
            if choice["finish_reason"] is not None:
                decoder.finished = True
                splitter = decoder.think_splitters.get(choice.get("index", 0))
                if splitter is not None:
                    thought, answer = splitter.flush()
                    if thought:
                        delta["reasoning_content"] = (delta.get("reasoning_content") or "") + thought
                    if answer:
                        delta["content"] = (delta.get("content") or "") + answer
            choices.append(choice)
        out = dict(data)
        out["choices"] = choices
        out["model"] = data.get("model") or self.deployment.model
        if isinstance(raw_usage, dict):
            # Usage may come on a choices:[] chunk, on the finish chunk, or cumulatively on every
            # chunk: the last one seen wins, never a sum (docs/platforms.md §11.2).
            usage = normalize_usage(raw_usage, extra=data)
            decoder.usage = usage
            out["usage"] = usage
        else:
            out["usage"] = None
        # The validator itself: `model_validate`'s Python wrapper costs a third as much again, per chunk.
        chunk: ChatCompletionChunk = ChatCompletionChunk.__pydantic_validator__.validate_python(out)
        return chunk

    def decode_event(self, event: SSEEvent, decoder: "StreamDecoder") -> ChatCompletionChunk | None:
        data = event.data
        if not data:
            return None
        if data == "[DONE]":
            decoder.done = True
            return None
        if self._chunks_from_json and event.event is None:
            chunk = self._chunk_from_json(data, decoder)
            if chunk is not None:
                return chunk
        return self._decode_payload(event, decoder)

    def _decode_payload(self, event: SSEEvent, decoder: "StreamDecoder") -> ChatCompletionChunk | None:
        """`decode_event`'s general path: the event's data parsed to a dict and normalised (errors,
        usage chunks, reasoning under another name, anything `_chunk_from_json` does not take)."""
        data = event.data
        try:
            payload = json.loads(data)
        except (ValueError, RecursionError):
            # One bad event does not spoil a good answer: skipped, counted, the stream goes on.
            decoder.skipped.append(f"malformed SSE data skipped: {data[:80]!r}")
            return None
        if not isinstance(payload, dict):
            decoder.skipped.append(f"SSE data that is not a JSON object skipped: {data[:80]!r}")
            return None
        if event.event == "error":
            raise self.error_from_event(payload)
        return self.normalize_chunk(payload, decoder)


    def _chunk_from_json(self, data: str, decoder: "StreamDecoder") -> ChatCompletionChunk | None:
        """The common chunk (choices, no usage, no reasoning under another name) validated straight
        from its JSON, then normalised as `normalize_chunk` does (finish reasons, `<think>` tags): the
        chunk it builds, without parsing to dicts, copying and validating them again. None: anything
        else, for the general path to decode."""
        if '"reasoning"' in data:
            return None
        try:
            chunk: ChatCompletionChunk = ChatCompletionChunk.__pydantic_validator__.validate_json(data)
        except ValueError:  # not JSON, or a value of another shape: the general path decides
            return None
        return self._normalize_validated(chunk, decoder, data)

    def _normalize_validated(self, chunk: ChatCompletionChunk, decoder: "StreamDecoder",
                             data: str) -> ChatCompletionChunk | None:
        """`_chunk_from_json` after validation: the chunk normalised, or None for the general path."""
        choices = chunk.choices
        if chunk.usage is not None:
            # A usage count (on a `choices: []` chunk, the finish chunk, or on every chunk): read from the
            # platform's own names (`normalize_usage`); the chunk itself stays as validated.
            payload = json.loads(data)
            raw_usage = payload.get("usage") if type(payload) is dict else None
            if not isinstance(raw_usage, dict) or is_error_payload(payload):
                return None
            usage = normalize_usage(raw_usage, extra=payload)
            decoder.usage = usage
            chunk.usage = usage
        elif not choices:
            return None  # error payloads
        for choice in choices:
            extra = choice.delta.__pydantic_extra__
            if extra and "reasoning" in extra:
                return None
            logprobs = choice.logprobs
            if logprobs is not None and logprobs.__pydantic_extra__:
                return None  # logprobs in another shape (providers/logprobs.py rewrites them)
        split = self.provider.split_think_tags
        for choice in choices:  # the same steps, in the same order, as normalize_chunk's
            delta = choice.delta
            content = delta.content
            if split and content:
                splitter = decoder.think_splitters.get(choice.index)
                if splitter is None:
                    splitter = decoder.think_splitters[choice.index] = ThinkSplitter()
                if not splitter.answering:  # past the reasoning, the content is the answer as sent
                    thought, answer = splitter.feed(content)
                    if thought:
                        delta.reasoning_content = (delta.reasoning_content or "") + thought
                    if answer != content:
                        delta.content = answer
            reason = choice.finish_reason
            if reason is not None:
                normalized = normalize_finish_reason(reason, provider=self.provider.name, deployment=self.deployment.id)
                if normalized != reason:
                    choice.finish_reason = normalized
            if choice.finish_reason is not None:  # "" is no finish reason
                decoder.finished = True
                splitter = decoder.think_splitters.get(choice.index)
                if splitter is not None:
                    thought, answer = splitter.flush()
                    if thought:
                        delta.reasoning_content = (delta.reasoning_content or "") + thought
                    if answer:
                        delta.content = (delta.content or "") + answer
            choice.__pydantic_fields_set__.update(_CHOICE_ALWAYS_SET)
        if not chunk.model:
            chunk.model = self.deployment.model
        chunk.__pydantic_fields_set__.update(_CHUNK_ALWAYS_SET)
        return chunk


_TEXT_ALONE = frozenset({"content"})  # the fields of a delta that is text alone (`StreamDecoder.decode`)

# Fields normalize_chunk always sets (so `model_dump(exclude_unset=True)` is the same on both paths).
_CHOICE_ALWAYS_SET = ("delta", "finish_reason")
_CHUNK_ALWAYS_SET = ("choices", "model", "usage")


class StreamDecoder:
    """Bytes of one streamed response -> chunks; remembers the last usage and whether the stream ended."""

    def __init__(self, adapter: OpenAICompatAdapter) -> None:
        self.adapter = adapter
        self.sse = SSEDecoder()
        self.usage: Usage | None = None
        self.done = False  # the platform's end marker ([DONE]) was seen
        self.finished = False  # a finish_reason was seen
        self.think_splitters: Dict[int, ThinkSplitter] = {}
        self.skipped: List[str] = []  # malformed events skipped, one line each
        # An error event that came in the same read as chunks before it: those chunks are handed
        # out first (they are part of what the caller saw and was billed for), the error next time.
        self.pending_error: E.ProviderError | None = None
        # `decode`: the text of the chunk it last returned when that was the common chunk, else None.
        self.text: str | None = None
        # The base adapter's own decoding (a subclass that decodes or normalises its own way goes
        # through `adapter.decode_event` for every event).
        self._common = (adapter._chunks_from_json
                        and type(adapter).decode_event is OpenAICompatAdapter.decode_event)
        self._split = bool(adapter.provider.split_think_tags)

    @property
    def complete(self) -> bool:
        return self.done or self.finished

    def _decode(self, events: Sequence[SSEEvent]) -> List[ChatCompletionChunk]:
        if self.pending_error is not None:
            error, self.pending_error = self.pending_error, None
            raise error
        out: List[ChatCompletionChunk] = []
        for event in events:
            try:
                chunk = self.adapter.decode_event(event, self)
            except E.ProviderError as error:
                if not out:
                    raise
                # Platforms close the stream after an error event, so the next feed() or close()
                # comes at once and raises it; nothing after the error is decoded.
                self.pending_error = error
                return out
            if chunk is not None:
                out.append(chunk)
        return out

    def events(self, data: bytes) -> List[SSEEvent]:
        """The SSE events `data` completes (not decoded yet). Raises the SSE line cap's error."""
        try:
            return self.sse.feed(data)
        except E.ResponseTooLargeError as error:  # the SSE line cap: say whose stream it was
            error.provider, error.deployment = self.adapter.provider.name, self.adapter.deployment.id
            raise

    def decode(self, event: SSEEvent) -> ChatCompletionChunk | None:
        """`adapter.decode_event(event, self)`, with the common chunk taken in one step: one choice,
        index 0, whose delta is text alone (perhaps with the assistant's role; no tool call, reasoning or
        refusal), no finish reason, log
        probabilities or usage, and no `<think>` splitting in play (none asked for, or past the
        reasoning). For that chunk `self.text` is its text, so that `StreamState` counts and
        assembles it without looking again; for any other chunk (decoded as `decode_event` does)
        it is None. The chunk is the one `decode_event` makes, field for field."""
        self.text = None
        data = event[0]
        if not self._common or event[1] is not None or data[:1] != "{" or '"reasoning"' in data:
            return self.adapter.decode_event(event, self)
        try:
            chunk: ChatCompletionChunk = ChatCompletionChunk.__pydantic_validator__.validate_json(data)
        except ValueError:  # not JSON, or a value of another shape: the general path decides
            return self.adapter._decode_payload(event, self)
        choices = chunk.choices
        if chunk.usage is None and len(choices) == 1:
            choice = choices[0]
            delta = choice.delta
            text = delta.content
            if (text is not None and choice.finish_reason is None and choice.index == 0 and choice.logprobs is None
                    and (delta.__pydantic_fields_set__ == _TEXT_ALONE or (  # the JSON had only "content", or:
                        delta.tool_calls is None and delta.reasoning_content is None and delta.refusal is None
                        and not delta.__pydantic_extra__ and (delta.role is None or delta.role == "assistant")))
                    and (not self._split or not text or (
                        (splitter := self.think_splitters.get(0)) is not None and splitter.answering)
                         or (splitter is None and self._answer_opens(text)))):
                choice.__pydantic_fields_set__.update(_CHOICE_ALWAYS_SET)
                if not chunk.model:
                    chunk.model = self.adapter.deployment.model
                chunk.__pydantic_fields_set__.update(_CHUNK_ALWAYS_SET)
                self.text = text
                return chunk
        normalized = self.adapter._normalize_validated(chunk, self, data)
        return normalized if normalized is not None else self.adapter._decode_payload(event, self)

    def _answer_opens(self, text: str) -> bool:
        """Choice 0's first text, with `<think>` splitting asked for: True when it opens the answer
        itself (its first character after whitespace cannot start a tag), its splitter then made and
        fed, as the general path would (it passes the text through unchanged from here on)."""
        stripped = text.lstrip()
        if not stripped or stripped[0] == "<":
            return False  # reasoning, or not known yet: the general path's splitter decides
        splitter = self.think_splitters[0] = ThinkSplitter()
        splitter.feed(text)  # ("", text): the answer starts here
        return True

    def feed(self, data: bytes) -> List[ChatCompletionChunk]:
        return self._decode(self.events(data))

    def close(self) -> List[ChatCompletionChunk]:
        return self._decode(self.sse.close())


def completion_as_sse(payload: Mapping[str, Any]) -> bytes:
    """A whole chat completion as the SSE events of the stream it stands for: per choice one chunk
    whose delta is the whole message (its tool calls numbered, as stream deltas are), with the
    choice's finish reason and log probabilities; then a usage chunk (when the completion has usage);
    then `[DONE]`. The completion's other top-level fields are on every chunk."""
    top = {key: value for key, value in payload.items() if key not in ("choices", "usage", "object")}
    events: List[Dict[str, Any]] = []
    for choice in payload.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        message = choice.get("message")
        delta = dict(message) if isinstance(message, dict) else {}
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            delta["tool_calls"] = [{**call, "index": call.get("index", i)} if isinstance(call, dict) else call
                                   for i, call in enumerate(calls)]
        part: Dict[str, Any] = {"index": choice.get("index", 0), "delta": delta,
                                "finish_reason": choice.get("finish_reason")}
        if choice.get("logprobs") is not None:
            part["logprobs"] = choice["logprobs"]
        events.append({**top, "object": "chat.completion.chunk", "choices": [part]})
    if payload.get("usage") is not None:
        events.append({**top, "object": "chat.completion.chunk", "choices": [], "usage": payload["usage"]})
    return b"".join(b"data: " + json.dumps(event, ensure_ascii=False).encode() + b"\n\n" for event in events) \
        + b"data: [DONE]\n\n"


def usage_chunks_wanted(params: Mapping[str, Any]) -> bool:
    """Did the caller ask for the usage-only chunk (`stream_options={"include_usage": True}`)?
    llmroute asks every platform for usage anyway (for the ledger and `stream.response`); the
    caller sees the chunk only when it asked, as with openai-python."""
    options = params.get("stream_options")
    return isinstance(options, Mapping) and bool(options.get("include_usage"))


def for_caller(chunks: List[ChatCompletionChunk], usage_wanted: bool) -> List[ChatCompletionChunk]:
    """The chunks a caller sees: a usage-only chunk (`choices == []` with usage) only when asked for."""
    if usage_wanted:
        return chunks
    return [c for c in chunks if c.choices or c.usage is None]


def chunk_has_content(chunk: ChatCompletionChunk) -> bool:
    for choice in chunk.choices:
        d = choice.delta
        if d.content or d.reasoning_content or d.tool_calls or d.refusal:
            return True
    return False


class TextParts:
    """The pieces of one growing text, joined as they come: pieces of a few characters (a token a
    chunk) are folded into blocks every `FOLD` pieces, so a long answer costs about its own size in
    memory (a list of 4-character strings costs about 15 bytes a character). Iterating yields the
    text in order, so `"".join(parts)` is the whole text; `append` and `extend` as a list's."""

    FOLD = 256
    __slots__ = ("_blocks", "_pieces")

    def __init__(self) -> None:
        self._blocks: List[str] = []
        self._pieces: List[str] = []

    def append(self, piece: str) -> None:
        self._pieces.append(piece)
        if len(self._pieces) >= self.FOLD:
            self._blocks.append("".join(self._pieces))
            self._pieces = []

    def extend(self, pieces: Iterable[str]) -> None:
        for piece in pieces:
            self.append(piece)

    def __iter__(self) -> Iterator[str]:
        yield from self._blocks
        yield from self._pieces

    def __bool__(self) -> bool:
        return bool(self._blocks or self._pieces)


class StreamAssembler:
    """Chunks -> the ChatCompletion they add up to (content, reasoning, tool calls, finish reasons,
    log probabilities)."""

    def __init__(self) -> None:
        self.id = ""
        self.model = ""
        self.created = 0
        self.system_fingerprint: str | None = None
        self._choices: Dict[int, Dict[str, Any]] = {}
        # Top-level fields of the platform's own (llama.cpp `timings`): kept on the assembled answer.
        self.extras: Dict[str, Any] = {}

    def _top(self, chunk: ChatCompletionChunk) -> None:
        """The chunk's top-level fields: the first id, model and creation time; extras; the last fingerprint."""
        if not self.id:
            self.id = chunk.id
        if not self.model:
            self.model = chunk.model
        if not self.created:
            self.created = chunk.created
        extra = chunk.__pydantic_extra__  # `model_extra` without its property call (once per chunk)
        if extra:
            self.extras.update(extra)
        if chunk.system_fingerprint:
            self.system_fingerprint = chunk.system_fingerprint

    def add(self, chunk: ChatCompletionChunk) -> None:
        self._top(chunk)
        for choice in chunk.choices:
            slot = self._choices.get(choice.index)
            if slot is None:
                slot = self._slot(choice.index)
            d = choice.delta
            if d.role:
                slot["role"] = d.role
            if d.content is not None:  # "" too: an answer's content stays as sent ("" is not None)
                slot["content"].append(d.content)
            if d.reasoning_content:
                slot["reasoning"].append(d.reasoning_content)
            if d.refusal:
                slot["refusal"].append(d.refusal)
            for call in d.tool_calls or ():
                tool = slot["tools"].setdefault(call.index, {"id": None, "type": "function", "name": None, "args": TextParts()})
                if call.id:
                    tool["id"] = call.id
                if call.type:
                    tool["type"] = call.type
                if call.function is not None:
                    if call.function.name:
                        tool["name"] = call.function.name
                    if call.function.arguments:
                        tool["args"].append(call.function.arguments)
            if choice.finish_reason:
                slot["finish"] = choice.finish_reason
            if choice.logprobs is not None:
                self._add_logprobs(slot, choice.logprobs)

    def _slot(self, index: int) -> Dict[str, Any]:
        slot = self._choices[index] = {
            "role": "assistant", "content": TextParts(), "reasoning": TextParts(), "tools": {}, "finish": None,
            "refusal": TextParts(),
            "logprobs": None, "refusal_logprobs": None,
        }
        return slot

    def add_text(self, chunk: ChatCompletionChunk, text: str) -> None:
        """`add` for the common chunk (`StreamDecoder.decode` says which): one choice, index 0, whose
        delta is `text` alone, or with the assistant's role (Ollama names it on every chunk)."""
        self._top(chunk)
        slot = self._choices.get(0)
        if slot is None:
            slot = self._slot(0)
        elif slot["role"] != "assistant":  # another role named earlier: this chunk's, if it names one, as `add`
            role = chunk.choices[0].delta.role
            if role:
                slot["role"] = role
        slot["content"].append(text)

    @staticmethod
    def _add_logprobs(slot: Dict[str, Any], logprobs: ChoiceLogprobs) -> None:
        if slot["logprobs"] is None:
            slot["logprobs"] = []
        if logprobs.content:
            slot["logprobs"].extend(logprobs.content)
        if logprobs.refusal:
            if slot["refusal_logprobs"] is None:
                slot["refusal_logprobs"] = []
            slot["refusal_logprobs"].extend(logprobs.refusal)

    @classmethod
    def joined(cls, parts: Sequence["StreamAssembler"]) -> "StreamAssembler":
        """One answer from the assemblers of the attempts that produced it, in order (a cut answer
        continued elsewhere): texts, tool-call arguments and log probabilities run on; the last
        finish reason wins. The parts are not changed."""
        out = cls()
        for part in parts:
            out.id = out.id or part.id
            out.model = out.model or part.model
            out.created = out.created or part.created
            out.system_fingerprint = part.system_fingerprint or out.system_fingerprint
            out.extras.update(part.extras)
            for index, piece in part._choices.items():
                slot = out._choices.get(index)
                if slot is None:
                    slot = out._choices[index] = {
                        "role": piece["role"], "content": TextParts(), "reasoning": TextParts(), "tools": {},
                        "finish": None, "refusal": TextParts(), "logprobs": None, "refusal_logprobs": None,
                    }
                slot["content"].extend(piece["content"])
                slot["reasoning"].extend(piece["reasoning"])
                slot["refusal"].extend(piece["refusal"])
                for tool_index, tool in piece["tools"].items():
                    mine = slot["tools"].setdefault(tool_index, {"id": None, "type": "function", "name": None, "args": TextParts()})
                    mine["id"] = mine["id"] or tool["id"]
                    mine["type"] = tool["type"] or mine["type"]
                    mine["name"] = mine["name"] or tool["name"]
                    mine["args"].extend(tool["args"])
                if piece["finish"]:
                    slot["finish"] = piece["finish"]
                for key in ("logprobs", "refusal_logprobs"):
                    if piece[key] is not None:
                        slot[key] = [*(slot[key] or ()), *piece[key]]
        return out

    def text(self, index: int = 0) -> str:
        slot = self._choices.get(index)
        return "".join(slot["content"]) if slot else ""

    def reasoning_text(self, index: int = 0) -> str:
        slot = self._choices.get(index)
        return "".join(slot["reasoning"]) if slot else ""

    def all_text(self) -> str:
        return "".join("".join(s["content"]) for s in self._choices.values())

    def continuable(self) -> bool:
        """Can another deployment continue this answer as an assistant prefill? One choice, with
        text, and no tool call (a half-written tool call cannot be continued as text)."""
        if len(self._choices) != 1 or 0 not in self._choices:
            return False
        slot = self._choices[0]
        return bool("".join(slot["content"])) and not slot["tools"] and not slot["refusal"]

    def all_tool_arguments(self) -> str:
        """Every tool call's arguments so far, joined (their tokens are billed as output)."""
        return "".join("".join(t["args"]) for s in self._choices.values() for t in s["tools"].values())

    def all_reasoning(self) -> str:
        return "".join("".join(s["reasoning"]) for s in self._choices.values())

    def completion(self, usage: Usage, fallback_model: str) -> ChatCompletion:
        choices = []
        for index in sorted(self._choices):
            slot = self._choices[index]
            tools = None
            if slot["tools"]:
                tools = [
                    {"id": t["id"], "type": t["type"], "function": {"name": t["name"], "arguments": "".join(t["args"])}}
                    for _, t in sorted(slot["tools"].items())
                ]
            message = {
                "role": slot["role"],
                "content": "".join(slot["content"]) if (slot["content"] or not tools) else None,
                "reasoning_content": "".join(slot["reasoning"]) or None,
                "tool_calls": tools,
                "refusal": "".join(slot["refusal"]) or None,
            }
            logprobs = None
            if slot["logprobs"] is not None:
                logprobs = ChoiceLogprobs(content=slot["logprobs"], refusal=slot["refusal_logprobs"])
            choices.append({"index": index, "message": message, "finish_reason": slot["finish"], "logprobs": logprobs})
        completion: ChatCompletion = ChatCompletion.__pydantic_validator__.validate_python(
            {
                **self.extras,
                "id": self.id,
                "object": "chat.completion",
                "created": self.created or int(time.time()),
                "model": self.model or fallback_model,
                "choices": choices,
                "usage": usage,
                "system_fingerprint": self.system_fingerprint,
            }
        )
        return completion

