"""Structured outputs as openai-python has them: `chat.completions.parse(response_format=Model)` and
`chat.completions.stream(...)`.

`parse()` sends the pydantic model as a JSON schema (`response_format = {"type": "json_schema", ...}`),
then reads each choice's content into the model: `completion.choices[0].message.parsed`. A choice cut
by the length limit raises `LengthFinishReasonError`, one refused by the platform's filter
`ContentFilterFinishReasonError` (openai-python's names and rule). `stream()` is a context manager
over a streamed call that yields openai-python's events (`chunk`, `content.delta`, `content.done`,
`refusal.delta`, `refusal.done`, `tool_calls.function.arguments.delta`/`.done`, `logprobs.content.delta`/
`.done`, `logprobs.refusal.delta`/`.done`) and ends with
`get_final_completion()`.

Tools are read as openai-python reads them: a tool built by `pydantic_function_tool(Model)` (ours or
openai-python's) has its arguments read into `Model`, any other `strict` function tool into JSON, and a
tool that is not strict gives `parsed_arguments = None` (`stream()`); `parse()` takes only strict
function tools and names the first other one before sending anything.

This module shapes requests and reads answers; the calls go through the client's own `create()`.
It never sends anything itself.
"""

from __future__ import annotations

import inspect
import json
from typing import Any, AsyncIterator, Dict, Iterator, List

from pydantic import BaseModel, Field

from llmroute.errors import InvalidRequestError, LLMRouteError
from llmroute.types import (ChatCompletion, ChatCompletionChunk, ChatCompletionMessage, ChatCompletionTokenLogprob,
                            Choice, FunctionCall, ToolCall)

__all__ = ["ParsedChatCompletion", "ParsedChoice", "ParsedChatCompletionMessage", "LengthFinishReasonError",
           "ContentFilterFinishReasonError", "response_format_param", "parsed_completion", "ChatCompletionStream",
           "AsyncChatCompletionStream", "ChatCompletionStreamManager", "AsyncChatCompletionStreamManager",
           "StreamEvent", "ParsedFunction", "ParsedFunctionToolCall", "PydanticFunctionTool", "pydantic_function_tool"]


class LengthFinishReasonError(LLMRouteError):
    """`parse()`: the answer was cut by the token limit, so it cannot be read into the model."""

    def __init__(self, completion: ChatCompletion) -> None:
        self.completion = completion
        super().__init__(f"could not parse the answer: the length limit was reached ({completion.usage.completion_tokens} "
                         "completion tokens); raise max_tokens")


class ContentFilterFinishReasonError(LLMRouteError):
    """`parse()`: the platform's content filter refused the answer."""

    def __init__(self) -> None:
        super().__init__("could not parse the answer: the platform's content filter refused it")


class ParsedFunction(FunctionCall):
    parsed_arguments: Any = None  # the arguments read into the tool's model, or JSON for a strict tool


class ParsedFunctionToolCall(ToolCall):
    function: ParsedFunction = Field(default_factory=ParsedFunction)


class ParsedChatCompletionMessage(ChatCompletionMessage):
    parsed: Any = None  # the answer read into the response_format model (None without one)
    tool_calls: List[ParsedFunctionToolCall] | None = None  # type: ignore[assignment]  # a finer item type, as openai-python's


class ParsedChoice(Choice):
    message: ParsedChatCompletionMessage = Field(default_factory=ParsedChatCompletionMessage)


class ParsedChatCompletion(ChatCompletion):
    """A `ChatCompletion` whose messages carry `.parsed`."""

    choices: List[ParsedChoice] = Field(default_factory=list)  # type: ignore[assignment]


def _is_model_type(value: Any) -> bool:
    return inspect.isclass(value) and issubclass(value, BaseModel)


def _strict_schema(schema: Dict[str, Any]) -> Dict[str, Any]:
    """A pydantic JSON schema in the strict form OpenAI's structured outputs take: every object closed
    (`additionalProperties: false`) and every property required."""
    if schema.get("type") == "object" and "properties" in schema:
        schema["additionalProperties"] = False
        schema["required"] = list(schema["properties"])
    for key in ("properties", "$defs", "definitions"):
        for sub in (schema.get(key) or {}).values():
            if isinstance(sub, dict):
                _strict_schema(sub)
    for key in ("items", "anyOf", "allOf", "oneOf"):
        value = schema.get(key)
        for sub in value if isinstance(value, list) else [value]:
            if isinstance(sub, dict):
                _strict_schema(sub)
    return schema


def response_format_param(response_format: Any) -> Any:
    """`response_format=` for the wire: a pydantic model class becomes a strict JSON schema; a dict
    (or None) is sent as given."""
    if not _is_model_type(response_format):
        return response_format
    schema = _strict_schema(response_format.model_json_schema())
    return {"type": "json_schema",
            "json_schema": {"name": response_format.__name__, "schema": schema, "strict": True}}


class PydanticFunctionTool(Dict[str, Any]):
    """A tool's `function` definition that remembers the pydantic model its arguments are read into
    (sent as the plain dict it is)."""

    def __init__(self, definition: Dict[str, Any], model: type[BaseModel]) -> None:
        super().__init__(definition)
        self.model = model


def pydantic_function_tool(model: type[BaseModel], *, name: str | None = None,
                           description: str | None = None) -> Dict[str, Any]:
    """A strict function tool whose parameters are `model`'s JSON schema (openai-python's helper)."""
    if not _is_model_type(model):
        raise InvalidRequestError(f"takes a pydantic model class, not {type(model).__name__}", field="model")
    function = PydanticFunctionTool({"name": name or model.__name__, "strict": True,
                                     "parameters": _strict_schema(model.model_json_schema())}, model)
    description = model.__doc__ if description is None else description
    if description is not None:
        function["description"] = description
    return {"type": "function", "function": function}


def _tool_named(tools: Any, name: str | None) -> Any:
    for tool in tools or ():
        if isinstance(tool, dict) and tool.get("type") == "function":
            function = tool.get("function")
            if isinstance(function, dict) and function.get("name") == name:
                return function
    return None


def parsed_arguments(tools: Any, name: str | None, arguments: str) -> Any:
    """A tool call's arguments read as its tool says: into the tool's pydantic model, into JSON for a
    strict tool, None for a tool not given or not strict."""
    function = _tool_named(tools, name)
    if function is None:
        return None
    model = getattr(function, "model", None)
    if model is not None and _is_model_type(model):
        return model.model_validate_json(arguments)
    return json.loads(arguments) if function.get("strict") is True else None


def _check_tools(tools: Any) -> None:
    """`parse()` reads every tool call: each tool must be a strict function tool (openai-python's rule)."""
    for i, tool in enumerate(tools or ()):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else type(tool).__name__
            raise InvalidRequestError(f"tools[{i}] is a {kind!r} tool; parse() reads only function tools",
                                      field="tools")
        function = tool.get("function") or {}
        if not isinstance(function, dict) or function.get("strict") is not True:
            name = function.get("name") if isinstance(function, dict) else None
            raise InvalidRequestError(f"tools[{i}] ({name!r}) is not strict; parse() reads only strict function "
                                      "tools (set \"strict\": true, or build it with pydantic_function_tool)",
                                      field="tools")


def parsed_completion(completion: ChatCompletion, response_format: Any, tools: Any = None) -> ParsedChatCompletion:
    """`completion` with each choice's content read into `response_format` (a pydantic model class) and
    each tool call's arguments read as its tool in `tools` says."""
    for choice in completion.choices:
        if choice.finish_reason == "length":
            raise LengthFinishReasonError(completion)
        if choice.finish_reason == "content_filter":
            raise ContentFilterFinishReasonError()
    out = ParsedChatCompletion.model_validate(completion.model_dump())
    out.route, out.cost = completion.route, completion.cost
    for choice in out.choices:
        message = choice.message
        if _is_model_type(response_format) and message.content and not message.refusal:
            message.parsed = response_format.model_validate_json(message.content)
        for call in message.tool_calls or ():
            call.function.parsed_arguments = parsed_arguments(tools, call.function.name, call.function.arguments)
    return out


def _parse_args(kwargs: Dict[str, Any]) -> tuple[Dict[str, Any], Any]:
    if kwargs.get("stream"):
        raise TypeError("parse() does not stream: use chat.completions.stream(...)")
    response_format = kwargs.get("response_format")
    _check_tools(kwargs.get("tools"))
    kwargs = dict(kwargs)
    if response_format is not None:
        kwargs["response_format"] = response_format_param(response_format)
    return kwargs, response_format


def parse(completions: Any, kwargs: Dict[str, Any]) -> ParsedChatCompletion:
    kwargs, response_format = _parse_args(kwargs)
    return parsed_completion(completions.create(**kwargs), response_format, kwargs.get("tools"))


async def aparse(completions: Any, kwargs: Dict[str, Any]) -> ParsedChatCompletion:
    kwargs, response_format = _parse_args(kwargs)
    return parsed_completion(await completions.create(**kwargs), response_format, kwargs.get("tools"))


# ------------------------------------------------------------------------------------------------
# stream(): openai-python's event stream over our chunks


class StreamEvent(BaseModel):
    """One event of `chat.completions.stream(...)`: `type` is "chunk", "content.delta", "content.done",
    "refusal.delta", "refusal.done", "tool_calls.function.arguments.delta",
    "tool_calls.function.arguments.done", "logprobs.content.delta", "logprobs.content.done",
    "logprobs.refusal.delta" or "logprobs.refusal.done"; the other fields as openai-python's events of
    that type (on the logprobs events `content`/`refusal` and `snapshot` are lists of token logprobs)."""

    type: str
    chunk: ChatCompletionChunk | None = None
    delta: str | None = None
    snapshot: str | List[ChatCompletionTokenLogprob] | None = None
    content: str | List[ChatCompletionTokenLogprob] | None = None
    refusal: str | List[ChatCompletionTokenLogprob] | None = None
    parsed: Any = None
    # tool-call argument events
    name: str | None = None
    index: int | None = None
    arguments: str | None = None
    arguments_delta: str | None = None
    parsed_arguments: Any = None


def _logprobs_event(kind: str, part: str, tokens: List[ChatCompletionTokenLogprob],
                    snapshot: List[ChatCompletionTokenLogprob] | None) -> StreamEvent:
    if part == "content":
        return StreamEvent(type=kind, content=tokens, snapshot=snapshot)
    return StreamEvent(type=kind, refusal=tokens, snapshot=snapshot)


class _Events:
    """Chunks -> events (sans-I/O): the texts so far, and the done events at the end."""

    def __init__(self, response_format: Any, tools: Any = None) -> None:
        self.response_format = response_format
        self.input_tools = tools
        self.content = ""
        self.refusal = ""
        self.tools: Dict[int, Dict[str, str]] = {}  # index -> {"name", "arguments"} so far
        self.logprobs: Dict[str, List[ChatCompletionTokenLogprob]] = {}  # "content"/"refusal" -> tokens so far

    def feed(self, chunk: ChatCompletionChunk) -> List[StreamEvent]:
        events = [StreamEvent(type="chunk", chunk=chunk)]
        for choice in chunk.choices:
            if choice.index != 0:
                continue
            delta = choice.delta
            if delta.content:
                self.content += delta.content
                events.append(StreamEvent(type="content.delta", delta=delta.content, snapshot=self.content))
            if delta.refusal:
                self.refusal += delta.refusal
                events.append(StreamEvent(type="refusal.delta", delta=delta.refusal, snapshot=self.refusal))
            for call in delta.tool_calls or ():
                tool = self.tools.setdefault(call.index, {"name": "", "arguments": ""})
                if call.function is not None and call.function.name:
                    tool["name"] = call.function.name
                piece = call.function.arguments if call.function is not None else ""
                if piece:
                    tool["arguments"] += piece
                    events.append(StreamEvent(type="tool_calls.function.arguments.delta", name=tool["name"],
                                              index=call.index, arguments=tool["arguments"], arguments_delta=piece))
            for part in ("content", "refusal"):
                tokens = getattr(choice.logprobs, part) if choice.logprobs is not None else None
                if tokens:
                    snapshot = self.logprobs.setdefault(part, [])
                    snapshot.extend(tokens)
                    events.append(_logprobs_event(f"logprobs.{part}.delta", part, tokens, list(snapshot)))
        return events

    def done(self) -> List[StreamEvent]:
        events = []
        if self.content:
            parsed = None
            if _is_model_type(self.response_format):
                try:
                    parsed = self.response_format.model_validate_json(self.content)
                except ValueError:
                    parsed = None  # get_final_completion() raises the reason
            events.append(StreamEvent(type="content.done", content=self.content, parsed=parsed))
        if self.refusal:
            events.append(StreamEvent(type="refusal.done", refusal=self.refusal))
        for index, tool in sorted(self.tools.items()):
            try:
                parsed = parsed_arguments(self.input_tools, tool["name"], tool["arguments"]) if tool["arguments"] else None
            except ValueError:
                parsed = None  # arguments that do not read as the tool says: the text is still there
            events.append(StreamEvent(type="tool_calls.function.arguments.done", name=tool["name"], index=index,
                                      arguments=tool["arguments"], parsed_arguments=parsed))
        for part, tokens in self.logprobs.items():
            events.append(_logprobs_event(f"logprobs.{part}.done", part, tokens, None))
        return events


def _stream_args(kwargs: Dict[str, Any]) -> tuple[Dict[str, Any], Any]:
    kwargs = dict(kwargs)
    kwargs.pop("stream", None)
    response_format = kwargs.get("response_format")
    if response_format is not None:
        kwargs["response_format"] = response_format_param(response_format)
    kwargs["stream"] = True
    return kwargs, response_format


class ChatCompletionStream:
    """What `with client.chat.completions.stream(...) as stream:` gives: iterate for events, then
    `get_final_completion()` (a `ParsedChatCompletion`); `until_done()` reads to the end."""

    def __init__(self, stream: Any, response_format: Any, tools: Any = None) -> None:
        self._stream = stream
        self._events = _Events(response_format, tools)
        self._response_format = response_format
        self._tools = tools

    def __iter__(self) -> Iterator[StreamEvent]:
        for chunk in self._stream:
            yield from self._events.feed(chunk)
        yield from self._events.done()

    def until_done(self) -> "ChatCompletionStream":
        for _ in self:
            pass
        return self

    def get_final_completion(self) -> ParsedChatCompletion:
        return parsed_completion(self._stream.get_final_completion(), self._response_format, self._tools)

    def close(self) -> None:
        self._stream.close()

    @property
    def response(self) -> ChatCompletion:
        return self._stream.response  # type: ignore[no-any-return]


class ChatCompletionStreamManager:
    def __init__(self, completions: Any, kwargs: Dict[str, Any]) -> None:
        self._completions = completions
        self._kwargs, self._response_format = _stream_args(kwargs)
        self._stream: ChatCompletionStream | None = None

    def __enter__(self) -> ChatCompletionStream:
        self._stream = ChatCompletionStream(self._completions.create(**self._kwargs), self._response_format,
                                            self._kwargs.get("tools"))
        return self._stream

    def __exit__(self, *exc: Any) -> None:
        if self._stream is not None:
            self._stream.close()


class AsyncChatCompletionStream:
    """`async with client.chat.completions.stream(...) as stream:`; `async for event in stream`."""

    def __init__(self, stream: Any, response_format: Any, tools: Any = None) -> None:
        self._stream = stream
        self._events = _Events(response_format, tools)
        self._response_format = response_format
        self._tools = tools

    def __aiter__(self) -> AsyncIterator[StreamEvent]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[StreamEvent]:
        async for chunk in self._stream:
            for event in self._events.feed(chunk):
                yield event
        for event in self._events.done():
            yield event

    async def until_done(self) -> "AsyncChatCompletionStream":
        async for _ in self:
            pass
        return self

    async def get_final_completion(self) -> ParsedChatCompletion:
        return parsed_completion(await self._stream.get_final_completion(), self._response_format, self._tools)

    async def close(self) -> None:
        await self._stream.aclose()

    @property
    def response(self) -> ChatCompletion:
        return self._stream.response  # type: ignore[no-any-return]


class AsyncChatCompletionStreamManager:
    def __init__(self, completions: Any, kwargs: Dict[str, Any]) -> None:
        self._completions = completions
        self._kwargs, self._response_format = _stream_args(kwargs)
        self._stream: AsyncChatCompletionStream | None = None

    async def __aenter__(self) -> AsyncChatCompletionStream:
        self._stream = AsyncChatCompletionStream(await self._completions.create(**self._kwargs),
                                                 self._response_format, self._kwargs.get("tools"))
        return self._stream

    async def __aexit__(self, *exc: Any) -> None:
        if self._stream is not None:
            await self._stream.close()

