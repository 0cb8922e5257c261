"""`client.chat.completions`: `create()` (llmroute/completions.py) and the rest of openai-python's
surface around it: `parse()`, `stream()`, `with_raw_response`, `with_streaming_response`.

Every method here goes through `create()`; this module adds no call path of its own and never
sends anything itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llmroute.completions import AsyncCompletions, Completions
from llmroute.openai_surface.not_given import drop_not_given

if TYPE_CHECKING:  # loaded on first use at run time: `import llmroute` stays light
    from llmroute.openai_surface.raw_responses import (AsyncRawResponses, AsyncStreamingResponses, RawResponses,
                                                       StreamingResponses)
    from llmroute.openai_surface.structured import (AsyncChatCompletionStreamManager, ChatCompletionStreamManager,
                                                    ParsedChatCompletion)

__all__ = ["ChatCompletions", "AsyncChatCompletions"]


class ChatCompletions(Completions):
    """`Client.chat.completions`."""

    def parse(self, **kwargs: Any) -> "ParsedChatCompletion":
        """`create()` with `response_format=<pydantic model class>`: returns a `ParsedChatCompletion`
        whose `choices[0].message.parsed` is an instance of the model (llmroute/openai_surface/structured.py)."""
        from llmroute.openai_surface.structured import parse  # loaded on first use: `import llmroute` stays light

        return parse(self, drop_not_given(kwargs))

    def stream(self, **kwargs: Any) -> "ChatCompletionStreamManager":
        """`with client.chat.completions.stream(...) as stream: for event in stream: ...` (openai-python's
        events), then `stream.get_final_completion()`."""
        from llmroute.openai_surface.structured import ChatCompletionStreamManager  # loaded on first use

        return ChatCompletionStreamManager(self, drop_not_given(kwargs))

    @property
    def with_raw_response(self) -> "RawResponses":
        """`.create(...)` returning an `APIResponse` (status, headers, request id; `.parse()`)."""
        from llmroute.openai_surface.raw_responses import RawResponses  # loaded on first use

        return RawResponses(self)

    @property
    def with_streaming_response(self) -> "StreamingResponses":
        """`with ....create(...) as response:` (status, headers, request id; `.parse()`, `.iter_lines()`)."""
        from llmroute.openai_surface.raw_responses import StreamingResponses  # loaded on first use

        return StreamingResponses(self)


class AsyncChatCompletions(AsyncCompletions):
    """`AsyncClient.chat.completions`."""

    async def parse(self, **kwargs: Any) -> "ParsedChatCompletion":
        """As `ChatCompletions.parse`, awaited."""
        from llmroute.openai_surface.structured import aparse  # loaded on first use

        return await aparse(self, drop_not_given(kwargs))

    def stream(self, **kwargs: Any) -> "AsyncChatCompletionStreamManager":
        """`async with client.chat.completions.stream(...) as stream: async for event in stream: ...`."""
        from llmroute.openai_surface.structured import AsyncChatCompletionStreamManager  # loaded on first use

        return AsyncChatCompletionStreamManager(self, drop_not_given(kwargs))

    @property
    def with_raw_response(self) -> "AsyncRawResponses":
        """`await ....create(...)` returning an `APIResponse`."""
        from llmroute.openai_surface.raw_responses import AsyncRawResponses  # loaded on first use

        return AsyncRawResponses(self)

    @property
    def with_streaming_response(self) -> "AsyncStreamingResponses":
        """`async with ....create(...) as response:`; `await response.parse()`."""
        from llmroute.openai_surface.raw_responses import AsyncStreamingResponses  # loaded on first use

        return AsyncStreamingResponses(self)
