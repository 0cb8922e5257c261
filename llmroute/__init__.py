"""llmroute: one OpenAI-shaped call over many inference platforms.

```python
from llmroute import Client
client = Client.from_config("llmroute.toml")
resp = client.chat.completions.create(model="small", messages=[{"role": "user", "content": "hi"}])
```
This module is the whole public API. Importing it does no I/O, opens no connection and loads none of
llmroute's modules: each public name loads its module on first use (PEP 562), so `import llmroute` is cheap
and `from llmroute import Client` loads what a client needs.
"""

import logging as _logging
from typing import TYPE_CHECKING, Any as _Any

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time each name is loaded on first use
    from llmroute._http.bounded import ReadLimits
    from llmroute._runtime.secrets import SecretStr
    from llmroute.accounting.cost_value import Cost
    from llmroute.accounting.report import report
    from llmroute.batch import BatchResult
    from llmroute.batch import JobView as BatchJobView
    from llmroute.cache import ResponseCache
    from llmroute.client import AsyncClient, Client
    from llmroute.config import Config, load_config
    from llmroute.embeddings import CreateEmbeddingResponse, Embedding, EmbeddingUsage
    from llmroute.errors import (AllDeploymentsFailedError, APIConnectionError, APITimeoutError, AuthenticationError,
                                 BadRequestError, BillingError, BudgetExceededError, ClientClosedError, ConfigError,
                                 ContentFilterError, ContextLengthError, EventLoopError, InvalidRequestError,
                                 LLMRouteError, NotFoundError, OpenAIError, OverloadedError, PermissionDeniedError,
                                 ProviderError,
                                 RateLimitError, RedirectError, ReplayDivergedError, RequestGuardError,
                                 ResponseTooLargeError, RoutingError, ServerError, SharedStateUnavailableError,
                                 StreamInterruptedError, QueueTimeoutError,
                                 StreamNotFinishedError)
    from llmroute.errors import APIError, APIStatusError, ConflictError, InternalServerError, UnprocessableEntityError
    from llmroute.models import Model, ModelList
    from llmroute.openai_surface.raw_responses import APIResponse
    from llmroute.openai_surface.structured import (ContentFilterFinishReasonError, LengthFinishReasonError,
                                                    ParsedChatCompletion, pydantic_function_tool)
    from llmroute.streams import AsyncStream, Stream
    from llmroute.types import (Attempt, ChatCompletion, ChatCompletionChunk, ChatCompletionTokenLogprob,
                                ChoiceLogprobs, Route, TopLogprob, Usage)

__version__ = "0.1.0"

# A library logs and never prints: without logging configured by the app, llmroute's records (breaker
# trips, ledger trouble) go nowhere instead of to stderr through logging's last-resort handler.
_logging.getLogger("llmroute").addHandler(_logging.NullHandler())

# public name -> (module, attribute in it)
_WHERE = {
    "Client": ("llmroute.client", "Client"),
    "AsyncClient": ("llmroute.client", "AsyncClient"),
    "Stream": ("llmroute.streams", "Stream"),
    "AsyncStream": ("llmroute.streams", "AsyncStream"),
    "ResponseCache": ("llmroute.cache", "ResponseCache"),
    "Config": ("llmroute.config", "Config"),
    "load_config": ("llmroute.config", "load_config"),
    "ReadLimits": ("llmroute._http.bounded", "ReadLimits"),
    "SecretStr": ("llmroute._runtime.secrets", "SecretStr"),
    "Cost": ("llmroute.accounting.cost_value", "Cost"),
    "report": ("llmroute.accounting.report", "report"),
    "BatchResult": ("llmroute.batch", "BatchResult"),
    "BatchJobView": ("llmroute.batch", "JobView"),
    "CreateEmbeddingResponse": ("llmroute.embeddings", "CreateEmbeddingResponse"),
    "Embedding": ("llmroute.embeddings", "Embedding"),
    "EmbeddingUsage": ("llmroute.embeddings", "EmbeddingUsage"),
    "Model": ("llmroute.models", "Model"),
    "ModelList": ("llmroute.models", "ModelList"),
    "ParsedChatCompletion": ("llmroute.openai_surface.structured", "ParsedChatCompletion"),
    "pydantic_function_tool": ("llmroute.openai_surface.structured", "pydantic_function_tool"),
    "LengthFinishReasonError": ("llmroute.openai_surface.structured", "LengthFinishReasonError"),
    "ContentFilterFinishReasonError": ("llmroute.openai_surface.structured", "ContentFilterFinishReasonError"),
    "APIResponse": ("llmroute.openai_surface.raw_responses", "APIResponse"),
    **{name: ("llmroute.types", name) for name in (
        "ChatCompletion", "ChatCompletionChunk", "Usage", "Route", "Attempt", "ChoiceLogprobs",
        "ChatCompletionTokenLogprob", "TopLogprob")},
    **{name: ("llmroute.errors", name) for name in (
        "LLMRouteError", "ConfigError", "InvalidRequestError", "RoutingError", "BudgetExceededError",
        "RequestGuardError", "AllDeploymentsFailedError", "ProviderError", "AuthenticationError",
        "PermissionDeniedError", "BillingError", "NotFoundError", "BadRequestError", "ContextLengthError",
        "ContentFilterError", "RateLimitError", "OverloadedError", "ServerError", "APITimeoutError",
        "APIConnectionError", "StreamInterruptedError", "ReplayDivergedError", "ClientClosedError", "EventLoopError", "RedirectError",
        "ResponseTooLargeError", "StreamNotFinishedError", "SharedStateUnavailableError", "QueueTimeoutError",
        # openai-python's exception names (llmroute/errors.py draws the one tree)
        "APIError", "APIStatusError", "ConflictError", "InternalServerError", "UnprocessableEntityError",
        "OpenAIError")},
}


def __getattr__(name: str) -> _Any:
    import importlib

    where = _WHERE.get(name)
    if where is None:
        # `llmroute.TimeoutError` / `llmroute.ConnectionError`: the old names, with a DeprecationWarning.
        from llmroute.errors import deprecated_error

        renamed = deprecated_error(name)
        if renamed is not None:
            return renamed
        raise AttributeError(f"module 'llmroute' has no attribute {name!r}")
    value = getattr(importlib.import_module(where[0]), where[1])
    globals()[name] = value  # the next access is a plain module attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))


__all__ = [
    "ResponseCache",
    "Client",
    "AsyncClient",
    "report",
    "BatchResult",
    "BatchJobView",
    "Stream",
    "AsyncStream",
    "Config",
    "load_config",
    "SecretStr",
    "ChatCompletion",
    "ChatCompletionChunk",
    "Usage",
    "Route",
    "Attempt",
    "Cost",
    "ChoiceLogprobs",
    "ChatCompletionTokenLogprob",
    "TopLogprob",
    "LLMRouteError",
    "OpenAIError",
    "ConfigError",
    "InvalidRequestError",
    "RoutingError",
    "BudgetExceededError",
    "RequestGuardError",
    "AllDeploymentsFailedError",
    "QueueTimeoutError",
    "ProviderError",
    "AuthenticationError",
    "PermissionDeniedError",
    "BillingError",
    "NotFoundError",
    "BadRequestError",
    "ContextLengthError",
    "ContentFilterError",
    "RateLimitError",
    "OverloadedError",
    "ServerError",
    "APITimeoutError",
    "APIConnectionError",
    "StreamInterruptedError",
    "ReplayDivergedError",
    "ClientClosedError",
    "EventLoopError",
    "RedirectError",
    "ResponseTooLargeError",
    "ReadLimits",
    "StreamNotFinishedError",
    "CreateEmbeddingResponse",
    "Embedding",
    "EmbeddingUsage",
    "Model",
    "ModelList",
    "SharedStateUnavailableError",
    "ParsedChatCompletion",
    "pydantic_function_tool",
    "LengthFinishReasonError",
    "ContentFilterFinishReasonError",
    "APIResponse",
    # openai-python's exception names (llmroute/errors.py draws the one tree)
    "APIError",
    "APIStatusError",
    "ConflictError",
    "InternalServerError",
    "UnprocessableEntityError",
]
