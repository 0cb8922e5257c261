"""OpenAI-shaped response models, and what llmroute adds to them: `Route` and its `Attempt`s.

The Chat Completions shapes follow OpenAI's (`ChatCompletion`, `ChatCompletionChunk`, `Usage`), so a
user's code that reads OpenAI responses reads ours. What llmroute adds lives in fields of its own
(`route`, `cost`) that `model_dump()` leaves out, so a dumped response is plain OpenAI JSON.
This module does no I/O.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

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

    def to_dict(self, *, mode: Literal["json", "python"] = "python", exclude_unset: bool = True,
                exclude_none: bool = False) -> Dict[str, Any]:
        """The response as a dict, as openai-python's `to_dict()`: the fields the server sent (and
        those llmroute set), server extras included; llmroute's own `route` and `cost` left out."""
        return self.model_dump(mode=mode, by_alias=True, exclude_unset=exclude_unset, exclude_none=exclude_none)

    def to_json(self, *, indent: int | None = 2, exclude_unset: bool = True, exclude_none: bool = False) -> str:
        """The response as JSON text, as openai-python's `to_json()` (2-space indent by default)."""
        return self.model_dump_json(indent=indent, by_alias=True, exclude_unset=exclude_unset,
                                    exclude_none=exclude_none)


def _none_as_zero(value: Any) -> Any:
    return 0 if value is None else value


def _none_as_empty(value: Any) -> Any:
    return {} if value is None else value


class PromptTokensDetails(_OpenAIModel):
    cached_tokens: int = 0
    audio_tokens: int | None = None
    cache_write_tokens: int | None = None
    image_tokens: int | None = None
    text_tokens: int | None = None

    _cached = field_validator("cached_tokens", mode="before")(_none_as_zero)


class CompletionTokensDetails(_OpenAIModel):
    reasoning_tokens: int = 0
    accepted_prediction_tokens: int | None = None
    audio_tokens: int | None = None
    rejected_prediction_tokens: int | None = None
    text_tokens: int | None = None

    _reasoning = field_validator("reasoning_tokens", mode="before")(_none_as_zero)


class Usage(_OpenAIModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    prompt_tokens_details: PromptTokensDetails = Field(default_factory=PromptTokensDetails)
    completion_tokens_details: CompletionTokensDetails = Field(default_factory=CompletionTokensDetails)

    # openai-python's dumps (and some platforms) send `null` details: read as zero counts.
    _details = field_validator("prompt_tokens_details", "completion_tokens_details", mode="before")(_none_as_empty)

    @property
    def cached_tokens(self) -> int:
        return self.prompt_tokens_details.cached_tokens

    @property
    def reasoning_tokens(self) -> int:
        return self.completion_tokens_details.reasoning_tokens


class FunctionCall(_OpenAIModel):
    name: str | None = None
    arguments: str = ""


class ToolCall(_OpenAIModel):
    id: str | None = None
    type: str = "function"
    function: FunctionCall = Field(default_factory=FunctionCall)


class ChatCompletionMessage(_OpenAIModel):
    role: str = "assistant"
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: List[ToolCall] | None = None
    refusal: str | None = None
    # Declared by openai-python's type; None when the platform did not send them.
    annotations: List[Dict[str, Any]] | None = None
    audio: Dict[str, Any] | None = None
    function_call: FunctionCall | None = None


class TopLogprob(_OpenAIModel):
    """One of the most likely tokens at a position, and its log probability."""

    token: str = ""
    logprob: float = 0.0
    bytes: List[int] | None = None


class ChatCompletionTokenLogprob(_OpenAIModel):
    """One output token, its log probability, and the most likely alternatives at its position."""

    token: str = ""
    logprob: float = 0.0
    bytes: List[int] | None = None
    top_logprobs: List[TopLogprob] = Field(default_factory=list)


class ChoiceLogprobs(_OpenAIModel):
    """A choice's log probabilities: per token of the content, and of a refusal. On a streamed
    chunk, the tokens of that chunk; on a completion, all of them."""

    content: List[ChatCompletionTokenLogprob] | None = None
    refusal: List[ChatCompletionTokenLogprob] | None = None


class Choice(_OpenAIModel):
    index: int = 0
    message: ChatCompletionMessage = Field(default_factory=ChatCompletionMessage)
    finish_reason: str | None = None
    logprobs: ChoiceLogprobs | None = None


class ToolCallDelta(_OpenAIModel):
    index: int = 0
    id: str | None = None
    type: str | None = None
    function: FunctionCall | None = None


class ChoiceDelta(_OpenAIModel):
    role: str | None = None
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: List[ToolCallDelta] | None = None
    refusal: str | None = None
    function_call: FunctionCall | None = None  # declared by openai-python's type; None unless sent
    audio: Dict[str, Any] | None = None


class ChunkChoice(_OpenAIModel):
    index: int = 0
    delta: ChoiceDelta = Field(default_factory=ChoiceDelta)
    finish_reason: str | None = None
    logprobs: ChoiceLogprobs | None = None


_R = TypeVar("_R", bound="_CallRecord")


class _CallRecord(BaseModel):
    """The base of `Attempt` and `Route`: public pydantic models that the call core (`_call/call.py`,
    `resilience/failover.py`) makes and fills field by field as a call goes, ~20 writes per call.

    Their values come from llmroute's own code, never from the wire or the user, so the core makes
    them with `_filled` (no validation: what `model_construct` gives, without its per-field walk) and
    a write to a field stores it and marks it set, as pydantic's own assignment does for a model
    without `validate_assignment`, without pydantic's dispatch. Anything else (an unknown name, a
    private attribute) goes to pydantic's `__setattr__`. `model_dump()` and the fields are as before."""

    model_config = ConfigDict(arbitrary_types_allowed=True, defer_build=True)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self.__pydantic_fields__:
            self.__dict__[name] = value
            self.__pydantic_fields_set__.add(name)
        else:
            super().__setattr__(name, value)

    def _set(self, **values: Any) -> None:
        """Write several fields at once (the core's own values): each stored and marked set, as
        that many assignments."""
        self.__dict__.update(values)
        self.__pydantic_fields_set__.update(values)

    @classmethod
    def _filled(cls: type[_R], **values: Any) -> _R:
        """An instance from trusted values (every required field given), unvalidated; the fields not
        given take their defaults and are not marked set (as `model_construct`). The fields keep
        their declared order (`model_dump`'s order)."""
        defaults = _DEFAULTS.get(cls)
        if defaults is None:
            defaults = _DEFAULTS[cls] = _defaults_of(cls)
        template, factories = defaults
        state = template.copy()  # in declared order; `update` keeps a key's place
        for name, factory in factories:
            state[name] = factory()
        state.update(values)
        record = cls.__new__(cls)
        object.__setattr__(record, "__dict__", state)
        object.__setattr__(record, "__pydantic_fields_set__", set(values))
        object.__setattr__(record, "__pydantic_extra__", None)
        object.__setattr__(record, "__pydantic_private__", None)
        return record


# class -> (every field in declared order with its default (None when required), (name, default
# factory) pairs): `_CallRecord._filled`.
_DEFAULTS: Dict[type, tuple[Dict[str, Any], tuple[tuple[str, Callable[[], Any]], ...]]] = {}


def _defaults_of(cls: type[BaseModel]) -> tuple[Dict[str, Any], tuple[tuple[str, Callable[[], Any]], ...]]:
    template = {name: None if info.is_required() else info.default for name, info in cls.__pydantic_fields__.items()}
    factories = tuple((name, info.default_factory) for name, info in cls.__pydantic_fields__.items()
                      if info.default_factory is not None)
    return template, factories  # type: ignore[return-value]  # no validated-data factories on these models


class Attempt(_CallRecord):
    """One try at one deployment: what was sent where, how it ended, how long it took."""

    deployment: str
    provider: str
    model: str
    tier: str | None = None
    number: int = 1
    status: Literal["ok", "error", "skipped", "cancelled", "interrupted", "abandoned"] = "ok"
    error: BaseException | None = Field(default=None, exclude=True)
    error_type: str | None = None
    error_message: str | None = None
    http_status: int | None = None
    request_id: str | None = None
    started_at: float = 0.0
    duration_s: float = 0.0
    ttft_s: float | None = None
    connect_s: float | None = None  # time opening a new connection; None when one was reused
    usage: Usage | None = None
    usage_estimated: bool = False
    billed: bool = False
    cost: Cost | None = None
    note: str | None = None
    # The HTTP headers of the platform's answer (an attempt that was answered): `with_raw_response`.
    response_headers: Any = Field(default=None, exclude=True, repr=False)
    # How this attempt took up an answer cut after content: "continued" (the cut text as a prefill),
    # "replayed" (a stream started again, delivered past the text the caller saw), "restarted" (a
    # plain call answered again). None: it started the answer.
    recovery: str | None = None
    # The failover plan's part (it makes this record, `resilience.failover`), not dumped: what it
    # decided when the attempt ended (a retry after a wait, moving on, ...), and for a skip because a
    # breaker holds the deployment, the error that opened it.
    decision: str | None = Field(default=None, exclude=True, repr=False)
    held_by: BaseException | None = Field(default=None, exclude=True, repr=False)

    @property
    def id(self) -> str:
        return self.deployment


class Route(_CallRecord):
    """What llmroute did for a call: which tier and deployment served it, and every attempt on the way."""

    provider: str | None = None
    deployment: str | None = None
    model: str | None = None
    tier: str | None = None
    reason: str | None = None
    score: float | None = None
    pool: str = "interactive"
    feature: str | None = None
    attempts: List[Attempt] = Field(default_factory=list)
    usage_estimated: bool = False
    request_id: str | None = None
    warnings: List[str] = Field(default_factory=list)  # e.g. malformed stream events that were skipped
    # An answer cut after content started, and how it was finished (the last path that took it up):
    # "continued" (on a deployment that continues a prefill), "replayed" (a stream started again and
    # delivered past the text the caller had seen, docs/failover.md) or "restarted" (a plain call
    # answered again from scratch). Each attempt's own part is `Attempt.recovery`.
    recovery: str | None = None
    resumed_at: List[int] = Field(default_factory=list)  # character offsets where continued/replayed text begins

    cache: str | None = None  # "hit" | "semantic-hit" | "miss" | "bypass"; None: no cache in play
    cache_similarity: float | None = None  # a semantic lookup's best cosine similarity
    # A tier balanced by load: why its first deployment was chosen (each one's expected delay).
    balance: str | None = None
    queued_s: float = 0.0  # time the call waited in the client-side queue for a free deployment


class ChatCompletion(_OpenAIModel):
    id: str = ""
    object: str = "chat.completion"
    created: int = 0
    model: str = ""
    choices: List[Choice] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    system_fingerprint: str | None = None
    service_tier: str | None = None  # declared by openai-python's type; None unless the platform sent it
    metadata: Dict[str, Any] | None = None  # as openai-python declares (the platform's, not llmroute's `metadata=`)
    moderation: Dict[str, Any] | None = None
    route: Route | None = Field(default=None, exclude=True)
    cost: Cost | None = Field(default=None, exclude=True)


class ChatCompletionChunk(_OpenAIModel):
    id: str = ""
    object: str = "chat.completion.chunk"
    created: int = 0
    model: str = ""
    choices: List[ChunkChoice] = Field(default_factory=list)
    usage: Usage | None = None
    system_fingerprint: str | None = None
    service_tier: str | None = None  # declared by openai-python's type; None unless the platform sent it
    moderation: Dict[str, Any] | None = None
    obfuscation: str | None = None
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
