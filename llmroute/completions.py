"""`client.chat.completions.create()`: typed keyword parameters and `stream` overloads, as in the OpenAI SDK.

An unknown keyword argument is a `TypeError` (Python's own, from the signature); the values are
checked by `llmroute._call.validate` before anything is sent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Awaitable, Dict, Literal, Mapping, Optional, Protocol, Sequence, Union, overload

from llmroute.types import ChatCompletion

if TYPE_CHECKING:
    from llmroute.streams import AsyncStream, Stream

__all__ = ["Completions", "AsyncCompletions", "Messages"]

Messages = Sequence[Union[Mapping[str, Any], Any]]  # dicts, or pydantic messages (model_dump'ed)


class _SyncCaller(Protocol):
    """What `Completions` needs of its `Client`: the call itself."""

    def _create(self, kwargs: Dict[str, Any]) -> Union[ChatCompletion, "Stream"]: ...


class _AsyncCaller(Protocol):
    """What `AsyncCompletions` needs of its `AsyncClient`: the call itself."""

    def _create(self, kwargs: Dict[str, Any]) -> Awaitable[Union[ChatCompletion, "AsyncStream"]]: ...


def _given(arguments: Dict[str, Any]) -> Dict[str, Any]:
    """`create()`'s locals -> the arguments the caller gave (None means not given)."""
    return {k: v for k, v in arguments.items() if v is not None and k != "self"}


class Completions:
    """`client.chat.completions` of a `Client`: `create()` takes the OpenAI Chat Completions
    arguments llmroute supports and llmroute's own, by keyword; others go in `extra_body`."""

    def __init__(self, client: _SyncCaller) -> None:
        self._client = client

    @overload
    def create(
        self,
        *,
        messages: Messages,
        model: str,
        stream: Literal[False] = False,
        audio: Optional[Mapping[str, Any]] = None,
        frequency_penalty: Optional[float] = None,
        function_call: Union[str, Mapping[str, Any], None] = None,
        functions: Optional[Sequence[Mapping[str, Any]]] = None,
        logit_bias: Optional[Mapping[str, float]] = None,
        logprobs: Optional[bool] = None,
        max_completion_tokens: Optional[int] = None,
        max_tokens: Optional[int] = None,
        modalities: Optional[Sequence[str]] = None,
        n: Optional[int] = None,
        parallel_tool_calls: Optional[bool] = None,
        prediction: Optional[Mapping[str, Any]] = None,
        presence_penalty: Optional[float] = None,
        prompt_cache_key: Optional[str] = None,
        reasoning_effort: Optional[str] = None,
        response_format: Optional[Mapping[str, Any]] = None,
        safety_identifier: Optional[str] = None,
        seed: Optional[int] = None,
        service_tier: Optional[str] = None,
        stop: Union[str, Sequence[str], None] = None,
        store: Optional[bool] = None,
        stream_options: Optional[Mapping[str, Any]] = None,
        temperature: Optional[float] = None,
        tool_choice: Union[str, Mapping[str, Any], None] = None,
        tools: Optional[Sequence[Mapping[str, Any]]] = None,
        top_logprobs: Optional[int] = None,
        top_p: Optional[float] = None,
        user: Optional[str] = None,
        verbosity: Optional[str] = None,
        web_search_options: Optional[Mapping[str, Any]] = None,
        feature: Optional[str] = None,
        metadata: Optional[Mapping[str, str]] = None,
        pool: Optional[str] = None,
        timeout: Optional[float] = None,
        extra_body: Optional[Mapping[str, Any]] = None,
        extra_headers: Optional[Mapping[str, str]] = None,
        extra_query: Optional[Mapping[str, Any]] = None,
        cache: Union[bool, Literal["always"], None] = None,
        cache_ttl_s: Optional[float] = None,
    ) -> ChatCompletion: ...

    @overload
    def create(
        self,
        *,
        messages: Messages,
        model: str,
        stream: Literal[True],
        audio: Optional[Mapping[str, Any]] = None,
        frequency_penalty: Optional[float] = None,
        function_call: Union[str, Mapping[str, Any], None] = None,
        functions: Optional[Sequence[Mapping[str, Any]]] = None,
        logit_bias: Optional[Mapping[str, float]] = None,
        logprobs: Optional[bool] = None,
        max_completion_tokens: Optional[int] = None,
        max_tokens: Optional[int] = None,
        modalities: Optional[Sequence[str]] = None,
        n: Optional[int] = None,
        parallel_tool_calls: Optional[bool] = None,
        prediction: Optional[Mapping[str, Any]] = None,
        presence_penalty: Optional[float] = None,
        prompt_cache_key: Optional[str] = None,
        reasoning_effort: Optional[str] = None,
        response_format: Optional[Mapping[str, Any]] = None,
        safety_identifier: Optional[str] = None,
        seed: Optional[int] = None,
        service_tier: Optional[str] = None,
        stop: Union[str, Sequence[str], None] = None,
        store: Optional[bool] = None,
        stream_options: Optional[Mapping[str, Any]] = None,
        temperature: Optional[float] = None,
        tool_choice: Union[str, Mapping[str, Any], None] = None,
        tools: Optional[Sequence[Mapping[str, Any]]] = None,
        top_logprobs: Optional[int] = None,
        top_p: Optional[float] = None,
        user: Optional[str] = None,
        verbosity: Optional[str] = None,
        web_search_options: Optional[Mapping[str, Any]] = None,
        feature: Optional[str] = None,
        metadata: Optional[Mapping[str, str]] = None,
        pool: Optional[str] = None,
        timeout: Optional[float] = None,
        extra_body: Optional[Mapping[str, Any]] = None,
        extra_headers: Optional[Mapping[str, str]] = None,
        extra_query: Optional[Mapping[str, Any]] = None,
        cache: Union[bool, Literal["always"], None] = None,
        cache_ttl_s: Optional[float] = None,
    ) -> "Stream": ...

    @overload
    def create(
        self,
        *,
        messages: Messages,
        model: str,
        stream: bool,
        audio: Optional[Mapping[str, Any]] = None,
        frequency_penalty: Optional[float] = None,
        function_call: Union[str, Mapping[str, Any], None] = None,
        functions: Optional[Sequence[Mapping[str, Any]]] = None,
        logit_bias: Optional[Mapping[str, float]] = None,
        logprobs: Optional[bool] = None,
        max_completion_tokens: Optional[int] = None,
        max_tokens: Optional[int] = None,
        modalities: Optional[Sequence[str]] = None,
        n: Optional[int] = None,
        parallel_tool_calls: Optional[bool] = None,
        prediction: Optional[Mapping[str, Any]] = None,
        presence_penalty: Optional[float] = None,
        prompt_cache_key: Optional[str] = None,
        reasoning_effort: Optional[str] = None,
        response_format: Optional[Mapping[str, Any]] = None,
        safety_identifier: Optional[str] = None,
        seed: Optional[int] = None,
        service_tier: Optional[str] = None,
        stop: Union[str, Sequence[str], None] = None,
        store: Optional[bool] = None,
        stream_options: Optional[Mapping[str, Any]] = None,
        temperature: Optional[float] = None,
        tool_choice: Union[str, Mapping[str, Any], None] = None,
        tools: Optional[Sequence[Mapping[str, Any]]] = None,
        top_logprobs: Optional[int] = None,
        top_p: Optional[float] = None,
        user: Optional[str] = None,
        verbosity: Optional[str] = None,
        web_search_options: Optional[Mapping[str, Any]] = None,
        feature: Optional[str] = None,
        metadata: Optional[Mapping[str, str]] = None,
        pool: Optional[str] = None,
        timeout: Optional[float] = None,
        extra_body: Optional[Mapping[str, Any]] = None,
        extra_headers: Optional[Mapping[str, str]] = None,
        extra_query: Optional[Mapping[str, Any]] = None,
        cache: Union[bool, Literal["always"], None] = None,
        cache_ttl_s: Optional[float] = None,
    ) -> Union[ChatCompletion, "Stream"]: ...

    def create(
        self,
        *,
        messages: Messages,
        model: str,
        stream: bool = False,
        audio: Optional[Mapping[str, Any]] = None,
        frequency_penalty: Optional[float] = None,
        function_call: Union[str, Mapping[str, Any], None] = None,
        functions: Optional[Sequence[Mapping[str, Any]]] = None,
        logit_bias: Optional[Mapping[str, float]] = None,
        logprobs: Optional[bool] = None,
        max_completion_tokens: Optional[int] = None,
        max_tokens: Optional[int] = None,
        modalities: Optional[Sequence[str]] = None,
        n: Optional[int] = None,
        parallel_tool_calls: Optional[bool] = None,
        prediction: Optional[Mapping[str, Any]] = None,
        presence_penalty: Optional[float] = None,
        prompt_cache_key: Optional[str] = None,
        reasoning_effort: Optional[str] = None,
        response_format: Optional[Mapping[str, Any]] = None,
        safety_identifier: Optional[str] = None,
        seed: Optional[int] = None,
        service_tier: Optional[str] = None,
        stop: Union[str, Sequence[str], None] = None,
        store: Optional[bool] = None,
        stream_options: Optional[Mapping[str, Any]] = None,
        temperature: Optional[float] = None,
        tool_choice: Union[str, Mapping[str, Any], None] = None,
        tools: Optional[Sequence[Mapping[str, Any]]] = None,
        top_logprobs: Optional[int] = None,
        top_p: Optional[float] = None,
        user: Optional[str] = None,
        verbosity: Optional[str] = None,
        web_search_options: Optional[Mapping[str, Any]] = None,
        feature: Optional[str] = None,
        metadata: Optional[Mapping[str, str]] = None,
        pool: Optional[str] = None,
        timeout: Optional[float] = None,
        extra_body: Optional[Mapping[str, Any]] = None,
        extra_headers: Optional[Mapping[str, str]] = None,
        extra_query: Optional[Mapping[str, Any]] = None,
        cache: Union[bool, Literal["always"], None] = None,
        cache_ttl_s: Optional[float] = None,
    ) -> Union[ChatCompletion, "Stream"]:
        """An OpenAI Chat Completions call (see `llmroute._call.validate` for what is checked). llmroute's
        own: `feature` and `metadata` (kept in the ledger), `pool`, `timeout` (seconds for the whole
        call), `extra_body` (more body fields), `extra_headers`, `extra_query` (URL query parameters),
        `cache` (True, False or "always") and `cache_ttl_s` (docs/cache.md)."""
        return self._client._create(_given(locals()))


class AsyncCompletions:
    """`client.chat.completions` of an `AsyncClient`: `create()` takes the OpenAI Chat Completions
    arguments llmroute supports and llmroute's own, by keyword; others go in `extra_body`."""

    def __init__(self, client: _AsyncCaller) -> None:
        self._client = client

    @overload
    async def create(
        self,
        *,
        messages: Messages,
        model: str,
        stream: Literal[False] = False,
        audio: Optional[Mapping[str, Any]] = None,
        frequency_penalty: Optional[float] = None,
        function_call: Union[str, Mapping[str, Any], None] = None,
        functions: Optional[Sequence[Mapping[str, Any]]] = None,
        logit_bias: Optional[Mapping[str, float]] = None,
        logprobs: Optional[bool] = None,
        max_completion_tokens: Optional[int] = None,
        max_tokens: Optional[int] = None,
        modalities: Optional[Sequence[str]] = None,
        n: Optional[int] = None,
        parallel_tool_calls: Optional[bool] = None,
        prediction: Optional[Mapping[str, Any]] = None,
        presence_penalty: Optional[float] = None,
        prompt_cache_key: Optional[str] = None,
        reasoning_effort: Optional[str] = None,
        response_format: Optional[Mapping[str, Any]] = None,
        safety_identifier: Optional[str] = None,
        seed: Optional[int] = None,
        service_tier: Optional[str] = None,
        stop: Union[str, Sequence[str], None] = None,
        store: Optional[bool] = None,
        stream_options: Optional[Mapping[str, Any]] = None,
        temperature: Optional[float] = None,
        tool_choice: Union[str, Mapping[str, Any], None] = None,
        tools: Optional[Sequence[Mapping[str, Any]]] = None,
        top_logprobs: Optional[int] = None,
        top_p: Optional[float] = None,
        user: Optional[str] = None,
        verbosity: Optional[str] = None,
        web_search_options: Optional[Mapping[str, Any]] = None,
        feature: Optional[str] = None,
        metadata: Optional[Mapping[str, str]] = None,
        pool: Optional[str] = None,
        timeout: Optional[float] = None,
        extra_body: Optional[Mapping[str, Any]] = None,
        extra_headers: Optional[Mapping[str, str]] = None,
        extra_query: Optional[Mapping[str, Any]] = None,
        cache: Union[bool, Literal["always"], None] = None,
        cache_ttl_s: Optional[float] = None,
    ) -> ChatCompletion: ...

    @overload
    async def create(
        self,
        *,
        messages: Messages,
        model: str,
        stream: Literal[True],
        audio: Optional[Mapping[str, Any]] = None,
        frequency_penalty: Optional[float] = None,
        function_call: Union[str, Mapping[str, Any], None] = None,
        functions: Optional[Sequence[Mapping[str, Any]]] = None,
        logit_bias: Optional[Mapping[str, float]] = None,
        logprobs: Optional[bool] = None,
        max_completion_tokens: Optional[int] = None,
        max_tokens: Optional[int] = None,
        modalities: Optional[Sequence[str]] = None,
        n: Optional[int] = None,
        parallel_tool_calls: Optional[bool] = None,
        prediction: Optional[Mapping[str, Any]] = None,
        presence_penalty: Optional[float] = None,
        prompt_cache_key: Optional[str] = None,
        reasoning_effort: Optional[str] = None,
        response_format: Optional[Mapping[str, Any]] = None,
        safety_identifier: Optional[str] = None,
        seed: Optional[int] = None,
        service_tier: Optional[str] = None,
        stop: Union[str, Sequence[str], None] = None,
        store: Optional[bool] = None,
        stream_options: Optional[Mapping[str, Any]] = None,
        temperature: Optional[float] = None,
        tool_choice: Union[str, Mapping[str, Any], None] = None,
        tools: Optional[Sequence[Mapping[str, Any]]] = None,
        top_logprobs: Optional[int] = None,
        top_p: Optional[float] = None,
        user: Optional[str] = None,
        verbosity: Optional[str] = None,
        web_search_options: Optional[Mapping[str, Any]] = None,
        feature: Optional[str] = None,
        metadata: Optional[Mapping[str, str]] = None,
        pool: Optional[str] = None,
        timeout: Optional[float] = None,
        extra_body: Optional[Mapping[str, Any]] = None,
        extra_headers: Optional[Mapping[str, str]] = None,
        extra_query: Optional[Mapping[str, Any]] = None,
        cache: Union[bool, Literal["always"], None] = None,
        cache_ttl_s: Optional[float] = None,
    ) -> "AsyncStream": ...

    @overload
    async def create(
        self,
        *,
        messages: Messages,
        model: str,
        stream: bool,
        audio: Optional[Mapping[str, Any]] = None,
        frequency_penalty: Optional[float] = None,
        function_call: Union[str, Mapping[str, Any], None] = None,
        functions: Optional[Sequence[Mapping[str, Any]]] = None,
        logit_bias: Optional[Mapping[str, float]] = None,
        logprobs: Optional[bool] = None,
        max_completion_tokens: Optional[int] = None,
        max_tokens: Optional[int] = None,
        modalities: Optional[Sequence[str]] = None,
        n: Optional[int] = None,
        parallel_tool_calls: Optional[bool] = None,
        prediction: Optional[Mapping[str, Any]] = None,
        presence_penalty: Optional[float] = None,
        prompt_cache_key: Optional[str] = None,
        reasoning_effort: Optional[str] = None,
        response_format: Optional[Mapping[str, Any]] = None,
        safety_identifier: Optional[str] = None,
        seed: Optional[int] = None,
        service_tier: Optional[str] = None,
        stop: Union[str, Sequence[str], None] = None,
        store: Optional[bool] = None,
        stream_options: Optional[Mapping[str, Any]] = None,
        temperature: Optional[float] = None,
        tool_choice: Union[str, Mapping[str, Any], None] = None,
        tools: Optional[Sequence[Mapping[str, Any]]] = None,
        top_logprobs: Optional[int] = None,
        top_p: Optional[float] = None,
        user: Optional[str] = None,
        verbosity: Optional[str] = None,
        web_search_options: Optional[Mapping[str, Any]] = None,
        feature: Optional[str] = None,
        metadata: Optional[Mapping[str, str]] = None,
        pool: Optional[str] = None,
        timeout: Optional[float] = None,
        extra_body: Optional[Mapping[str, Any]] = None,
        extra_headers: Optional[Mapping[str, str]] = None,
        extra_query: Optional[Mapping[str, Any]] = None,
        cache: Union[bool, Literal["always"], None] = None,
        cache_ttl_s: Optional[float] = None,
    ) -> Union[ChatCompletion, "AsyncStream"]: ...

    async def create(
        self,
        *,
        messages: Messages,
        model: str,
        stream: bool = False,
        audio: Optional[Mapping[str, Any]] = None,
        frequency_penalty: Optional[float] = None,
        function_call: Union[str, Mapping[str, Any], None] = None,
        functions: Optional[Sequence[Mapping[str, Any]]] = None,
        logit_bias: Optional[Mapping[str, float]] = None,
        logprobs: Optional[bool] = None,
        max_completion_tokens: Optional[int] = None,
        max_tokens: Optional[int] = None,
        modalities: Optional[Sequence[str]] = None,
        n: Optional[int] = None,
        parallel_tool_calls: Optional[bool] = None,
        prediction: Optional[Mapping[str, Any]] = None,
        presence_penalty: Optional[float] = None,
        prompt_cache_key: Optional[str] = None,
        reasoning_effort: Optional[str] = None,
        response_format: Optional[Mapping[str, Any]] = None,
        safety_identifier: Optional[str] = None,
        seed: Optional[int] = None,
        service_tier: Optional[str] = None,
        stop: Union[str, Sequence[str], None] = None,
        store: Optional[bool] = None,
        stream_options: Optional[Mapping[str, Any]] = None,
        temperature: Optional[float] = None,
        tool_choice: Union[str, Mapping[str, Any], None] = None,
        tools: Optional[Sequence[Mapping[str, Any]]] = None,
        top_logprobs: Optional[int] = None,
        top_p: Optional[float] = None,
        user: Optional[str] = None,
        verbosity: Optional[str] = None,
        web_search_options: Optional[Mapping[str, Any]] = None,
        feature: Optional[str] = None,
        metadata: Optional[Mapping[str, str]] = None,
        pool: Optional[str] = None,
        timeout: Optional[float] = None,
        extra_body: Optional[Mapping[str, Any]] = None,
        extra_headers: Optional[Mapping[str, str]] = None,
        extra_query: Optional[Mapping[str, Any]] = None,
        cache: Union[bool, Literal["always"], None] = None,
        cache_ttl_s: Optional[float] = None,
    ) -> Union[ChatCompletion, "AsyncStream"]:
        """An OpenAI Chat Completions call (see `llmroute._call.validate` for what is checked). llmroute's
        own: `feature` and `metadata` (kept in the ledger), `pool`, `timeout` (seconds for the whole
        call), `extra_body` (more body fields), `extra_headers`, `extra_query` (URL query parameters),
        `cache` (True, False or "always") and `cache_ttl_s` (docs/cache.md)."""
        return await self._client._create(_given(locals()))
