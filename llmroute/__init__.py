"""llmroute: one OpenAI-shaped call over many inference platforms.

```python
from llmroute import Client
client = Client.from_config("llmroute.toml")
resp = client.chat.completions.create(model="small", messages=[{"role": "user", "content": "hi"}])
```
This module is the whole public API. Importing it does no I/O and opens no connection.
"""

from .client import AsyncClient, AsyncStream, Client, Stream
from .config import Config, load_config
from .errors import (
    AllDeploymentsFailedError,
    AuthenticationError,
    BadRequestError,
    BillingError,
    BudgetExceededError,
    ConfigError,
    ConnectionError,
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
    StreamInterruptedError,
    TimeoutError,
)
from .errors import ClientClosedError, EventLoopError, RedirectError, ResponseTooLargeError
from .bounded import ReadLimits
from .secrets import SecretStr
from .types import Attempt, ChatCompletion, ChatCompletionChunk, Route, Usage

__version__ = "0.1.0"


def __getattr__(name: str):
    # `llmroute.report(...)`: the cost report, imported only when used.
    if name == "report":
        from .accounting.report import report

        return report
    raise AttributeError(f"module 'llmroute' has no attribute {name!r}")


__all__ = [
    "Client",
    "AsyncClient",
    "report",
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
    "TimeoutError",
    "ConnectionError",
    "StreamInterruptedError",
    "ClientClosedError",
    "EventLoopError",
    "RedirectError",
    "ResponseTooLargeError",
    "ReadLimits",
]
