"""llmroute: one OpenAI-shaped call over many inference platforms.

```python
from llmroute import Client
client = Client.from_config("llmroute.toml")
resp = client.chat.completions.create(model="small", messages=[{"role": "user", "content": "hi"}])
```
This module is the whole public API. Importing it does no I/O and opens no connection.
"""

import logging as _logging
from typing import Any as _Any

from llmroute.cache import ResponseCache
from llmroute.client import AsyncClient, AsyncStream, Client, Stream
from llmroute.config import Config, load_config
from llmroute.errors import (
    AllDeploymentsFailedError,
    AuthenticationError,
    BadRequestError,
    BillingError,
    BudgetExceededError,
    ConfigError,
    APIConnectionError,
    ContentFilterError,
    ContextLengthError,
    InvalidRequestError,
    LLMRouteError,
    NotFoundError,
    OverloadedError,
    PermissionDeniedError,
    ProviderError,
    RateLimitError,
    RequestGuardError,
    RoutingError,
    ServerError,
    SharedStateUnavailableError,
    StreamInterruptedError,
    StreamNotFinishedError,
    APITimeoutError,
)
from llmroute.errors import ClientClosedError, EventLoopError, RedirectError, ReplayDivergedError, ResponseTooLargeError
from llmroute.errors import deprecated_error as _deprecated_error
from llmroute._http.bounded import ReadLimits
from llmroute._runtime.secrets import SecretStr
from llmroute.accounting.cost_value import Cost
from llmroute.types import Attempt, ChatCompletion, ChatCompletionChunk, Route, Usage
from llmroute.types import ChatCompletionTokenLogprob, ChoiceLogprobs, TopLogprob

__version__ = "0.1.0"

# A library logs and never prints: without logging configured by the app, llmroute's records (breaker
# trips, ledger trouble) go nowhere instead of to stderr through logging's last-resort handler.
_logging.getLogger("llmroute").addHandler(_logging.NullHandler())


def __getattr__(name: str) -> _Any:
    # `llmroute.TimeoutError` / `llmroute.ConnectionError`: the old names, with a DeprecationWarning.
    renamed = _deprecated_error(name)
    if renamed is not None:
        return renamed
    # `llmroute.report(...)`: the cost report, imported only when used.
    if name == "report":
        # loaded on first access (module __getattr__): `import llmroute` stays light
        from llmroute.accounting.report import report

        return report
    if name in ("BatchResult", "BatchJobView"):  # batch job results, imported only when used
        from llmroute import batch  # loaded on first access (module __getattr__): `import llmroute` stays light

        return batch.BatchResult if name == "BatchResult" else batch.JobView

    # Embedding and model-list types: imported when first used (a client imports them on creation).
    if name in ("CreateEmbeddingResponse", "Embedding", "EmbeddingUsage"):
        from llmroute import embeddings  # loaded on first access (module __getattr__): `import llmroute` stays light

        return getattr(embeddings, name)
    if name in ("Model", "ModelList"):
        from llmroute import models  # loaded on first access (module __getattr__): `import llmroute` stays light

        return getattr(models, name)
    raise AttributeError(f"module 'llmroute' has no attribute {name!r}")


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
    "ConfigError",
    "InvalidRequestError",
    "RoutingError",
    "BudgetExceededError",
    "RequestGuardError",
    "AllDeploymentsFailedError",
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
]
