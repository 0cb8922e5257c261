"""OpenAI-shaped response models, and what llmroute adds to them: `Route` and its `Attempt`s.

The Chat Completions shapes follow OpenAI's (`ChatCompletion`, `ChatCompletionChunk`, `Usage`), so a
user's code that reads OpenAI responses reads ours. What llmroute adds lives in fields of its own
(`route`, `cost`) that `model_dump()` leaves out, so a dumped response is plain OpenAI JSON.
This module does no I/O.
"""

from __future__ import annotations

from typing import Any, Callable, List, Literal, Optional, Protocol

from pydantic import BaseModel, ConfigDict, Field

from llmroute.accounting.cost_value import Cost

__all__ = [
    "PromptTokensDetails",
    "CompletionTokensDetails",
    "Usage",
    "FunctionCall",
    "ToolCall",
    "ChatCompletionMessage",
    "TopLogprob",
    "ChatCompletionTokenLogprob",
    "ChoiceLogprobs",
    "Choice",
    "ChatCompletion",
    "ChoiceDelta",
    "ToolCallDelta",
    "ChunkChoice",
    "ChatCompletionChunk",
    "Attempt",
    "Route",
]


class _OpenAIModel(BaseModel):
    # Platforms add fields of their own (Together `warnings`, llama.cpp `timings`); keep them readable.
    # Only keys go in pydantic-core's process-wide string cache: values (every chunk's unique `id`)
    # would fill it, 16,384 strings held for good, at no measured gain in validation time.
    model_config = ConfigDict(extra="allow", defer_build=True, cache_strings="keys")


class PromptTokensDetails(_OpenAIModel):
    cached_tokens: int = 0


class CompletionTokensDetails(_OpenAIModel):
    reasoning_tokens: int = 0


class Usage(_OpenAIModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    prompt_tokens_details: PromptTokensDetails = Field(default_factory=PromptTokensDetails)
    completion_tokens_details: CompletionTokensDetails = Field(default_factory=CompletionTokensDetails)

    @property
    def cached_tokens(self) -> int:
        return self.prompt_tokens_details.cached_tokens

    @property
    def reasoning_tokens(self) -> int:
        return self.completion_tokens_details.reasoning_tokens


class FunctionCall(_OpenAIModel):
    name: Optional[str] = None
    arguments: str = ""


class ToolCall(_OpenAIModel):
    id: Optional[str] = None
    type: str = "function"
    function: FunctionCall = Field(default_factory=FunctionCall)


class ChatCompletionMessage(_OpenAIModel):
    role: str = "assistant"
    content: Optional[str] = None
    reasoning_content: Optional[str] = None
    tool_calls: Optional[List[ToolCall]] = None
    refusal: Optional[str] = None


class TopLogprob(_OpenAIModel):
    """One of the most likely tokens at a position, and its log probability."""

    token: str = ""
    logprob: float = 0.0
    bytes: Optional[List[int]] = None


class ChatCompletionTokenLogprob(_OpenAIModel):
    """One output token, its log probability, and the most likely alternatives at its position."""

    token: str = ""
    logprob: float = 0.0
    bytes: Optional[List[int]] = None
    top_logprobs: List[TopLogprob] = Field(default_factory=list)


class ChoiceLogprobs(_OpenAIModel):
    """A choice's log probabilities: per token of the content, and of a refusal. On a streamed
    chunk, the tokens of that chunk; on a completion, all of them."""

    content: Optional[List[ChatCompletionTokenLogprob]] = None
    refusal: Optional[List[ChatCompletionTokenLogprob]] = None


class Choice(_OpenAIModel):
    index: int = 0
    message: ChatCompletionMessage = Field(default_factory=ChatCompletionMessage)
    finish_reason: Optional[str] = None
    logprobs: Optional[ChoiceLogprobs] = None


class ToolCallDelta(_OpenAIModel):
    index: int = 0
    id: Optional[str] = None
    type: Optional[str] = None
    function: Optional[FunctionCall] = None


class ChoiceDelta(_OpenAIModel):
    role: Optional[str] = None
    content: Optional[str] = None
    reasoning_content: Optional[str] = None
    tool_calls: Optional[List[ToolCallDelta]] = None
    refusal: Optional[str] = None


class ChunkChoice(_OpenAIModel):
    index: int = 0
    delta: ChoiceDelta = Field(default_factory=ChoiceDelta)
    finish_reason: Optional[str] = None
    logprobs: Optional[ChoiceLogprobs] = None


class Attempt(BaseModel):
    """One try at one deployment: what was sent where, how it ended, how long it took."""

    model_config = ConfigDict(arbitrary_types_allowed=True, defer_build=True)

    deployment: str
    provider: str
    model: str
    tier: Optional[str] = None
    number: int = 1
    status: Literal["ok", "error", "skipped", "cancelled", "interrupted", "abandoned"] = "ok"
    error: Optional[BaseException] = Field(default=None, exclude=True)
    error_type: Optional[str] = None
    error_message: Optional[str] = None
    http_status: Optional[int] = None
    request_id: Optional[str] = None
    started_at: float = 0.0
    duration_s: float = 0.0
    ttft_s: Optional[float] = None
    connect_s: Optional[float] = None  # time opening a new connection; None when one was reused
    usage: Optional[Usage] = None
    usage_estimated: bool = False
    billed: bool = False
    cost: Optional[Cost] = None
    note: Optional[str] = None

    @property
    def id(self) -> str:
        return self.deployment


class Route(BaseModel):
    """What llmroute did for a call: which tier and deployment served it, and every attempt on the way."""

    model_config = ConfigDict(arbitrary_types_allowed=True, defer_build=True)

    provider: Optional[str] = None
    deployment: Optional[str] = None
    model: Optional[str] = None
    tier: Optional[str] = None
    reason: Optional[str] = None
    score: Optional[float] = None
    pool: str = "interactive"
    feature: Optional[str] = None
    attempts: List[Attempt] = Field(default_factory=list)
    usage_estimated: bool = False
    request_id: Optional[str] = None
    warnings: List[str] = Field(default_factory=list)  # e.g. malformed stream events that were skipped
    # An answer cut after content started and finished elsewhere: "resumed" (continued on a
    # deployment that can continue a prefill) or "restarted" (a plain call answered again from scratch).
    recovery: Optional[str] = None
    resumed_at: List[int] = Field(default_factory=list)  # character offsets where continuations begin

    cache: Optional[str] = None  # "hit" | "semantic-hit" | "miss" | "bypass"; None: no cache in play
    cache_similarity: Optional[float] = None  # a semantic lookup's best cosine similarity


class ChatCompletion(_OpenAIModel):
    id: str = ""
    object: str = "chat.completion"
    created: int = 0
    model: str = ""
    choices: List[Choice] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    system_fingerprint: Optional[str] = None
    route: Optional[Route] = Field(default=None, exclude=True)
    cost: Optional[Cost] = Field(default=None, exclude=True)


class ChatCompletionChunk(_OpenAIModel):
    id: str = ""
    object: str = "chat.completion.chunk"
    created: int = 0
    model: str = ""
    choices: List[ChunkChoice] = Field(default_factory=list)
    usage: Optional[Usage] = None
    system_fingerprint: Optional[str] = None
    # True on the first content chunk of a continuation: what follows continues a cut answer.
    resumed: bool = Field(default=False, exclude=True)


class CompletionsAccess(Protocol):
    @property
    def create(self) -> Callable[..., Any]: ...  # `chat.completions.create` (awaitable on an AsyncClient)


class ChatAccess(Protocol):
    """`client.chat` as the modules below the client use it (routing.shadow, batch): `chat.completions.create`.
    A type for annotations, not a public name."""

    @property
    def completions(self) -> CompletionsAccess: ...
