"""`client.models.list()` and `.retrieve(model)`: the models each configured provider serves, OpenAI-shaped.

Each provider's `GET {base}/models` is asked (Together's bare array and Ollama's native list are
read too, see `providers/embeddings.py`). A model's `id` is "provider:model-id", the form
`create(model=...)` takes (a `Client(base_url=...)` lists the server's own ids, which it takes), so a
listed id can be called as is; `model` keeps the platform's own id
and every field the platform sent (`context_length`, `max_model_len`, `type`, ...) stays readable.
A provider that cannot be listed does not hide the others: its typed error is in `.errors`; only
when every provider asked failed is an error raised. Listing is free: no ledger record, no breaker.
The requests go through the client's send path (`_http/exchange.py`): its timeouts and read caps.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Protocol

from pydantic import Field

from llmroute import errors as E
from llmroute._http.exchange import Exchange, afetch, fetch
from llmroute.providers.embedding_wire import models_request, parse_model_list
from llmroute._http.transport import DROPPED_BEFORE_REPLY
from llmroute.types import _OpenAIModel
from llmroute.config import DEFAULT_CONNECT_TIMEOUT_S
from llmroute.providers.error_mapping import error_from_response
from llmroute._http.timeouts import Timeouts
from llmroute._runtime.twins import agather, gather

if TYPE_CHECKING:
    from llmroute.config import Config, Provider
    from llmroute._http.bounded import ReadLimits
    from llmroute._http.transport import AsyncTransport, SyncTransport

__all__ = ["Model", "ModelList", "Models", "AsyncModels"]


class Model(_OpenAIModel):
    id: str
    object: str = "model"
    created: int = 0
    owned_by: str = ""
    provider: str = ""  # the provider's name in [providers]
    model: str = ""  # the platform's own model id


class ModelList(_OpenAIModel):
    """`data`: every model listed; iterate it like openai-python's page. `errors`: provider -> error."""

    object: str = "list"
    data: List[Model] = Field(default_factory=list)
    errors: Dict[str, Any] = Field(default_factory=dict, exclude=True)

    def __iter__(self) -> Iterator[Model]:  # type: ignore[override]  # the page's models, as openai-python's (not pydantic's field pairs)
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)


def _providers(config: "Config", provider: str | None) -> List["Provider"]:
    if provider is None:
        return list(config.providers.values())
    if provider not in config.providers:
        known = ", ".join(sorted(config.providers)) or "none"
        raise E.InvalidRequestError(f"unknown provider {provider!r} (configured providers: {known})", field="provider")
    return [config.providers[provider]]


def _timeouts(provider: "Provider") -> Timeouts:
    cfg = provider.config
    connect = cfg.connect_timeout_s or DEFAULT_CONNECT_TIMEOUT_S
    total = min(cfg.timeout_s or 30.0, 30.0)  # a model list is small: no reason to wait minutes
    return Timeouts(connect_s=min(connect, total), ttft_s=total, total_s=total, read_s=total, read_kind="total")


def _models_of(provider: "Provider", content: bytes, config: "Config") -> List[Model]:
    # A one-server client (`Client(base_url=...)`) lists the server's own ids, as openai-python does.
    own = config.default_provider == provider.name
    return [Model.model_validate({**m, "id": m["id"] if own else f"{provider.name}:{m['id']}",
                                  "provider": provider.name, "model": m["id"]})
            for m in parse_model_list(provider, content)]


def _error(provider: "Provider", status: int, headers: Any, content: bytes) -> E.ProviderError:
    return error_from_response(status, headers, content, provider=provider.name, deployment=None, kind=provider.kind)


def _result(listed: Dict[str, List[Model]], errors: Dict[str, E.ProviderError]) -> ModelList:
    if errors and not listed:
        if len(errors) == 1:
            raise next(iter(errors.values()))
        detail = "; ".join(f"{name}: {type(e).__name__}: {e}" for name, e in errors.items())
        raise E.APIConnectionError(f"no provider could list its models ({detail})")
    return ModelList(data=[m for models in listed.values() for m in models], errors=errors)


def _exchange(client: "_ModelsClient | _AsyncModelsClient", provider: "Provider") -> Exchange:
    """`GET /models` on the one send path (`_http/exchange.py`), within the client's read caps."""
    return Exchange(models_request(provider), _timeouts(provider), client.read_limits, provider=provider.name,
                    deployment=provider.name, max_connections=provider.max_connections)


def _wanted(config: "Config", model: Any) -> tuple[str | None, str]:
    """`retrieve(model)`: (the provider to ask, or None for every one; the id as `list()` gives it).
    "provider:model-id" names its provider; a one-server client's own ids name the server's."""
    if not isinstance(model, str) or not model.strip():
        raise E.InvalidRequestError(f"model must be a non-empty string, got {type(model).__name__}", field="model")
    name, colon, _ = model.partition(":")
    if colon and name in config.providers:
        return name, model
    return config.default_provider, model


def _found(models: ModelList, model: str, provider: str | None) -> Model:
    for listed in models.data:
        if listed.id == model:
            return listed
    if models.errors:  # a provider that could not be listed may serve it: say so, not "not found"
        raise next(iter(models.errors.values()))
    where = f"provider {provider!r}" if provider is not None else "any configured provider"
    raise E.NotFoundError(f"model {model!r} is not listed by {where} (client.models.list() shows the ids)",
                          provider=provider, status=404)


def _dropped(found: Any) -> bool:
    return isinstance(found, E.APIConnectionError) and getattr(found, "code", None) == DROPPED_BEFORE_REPLY



# --- async source: AsyncModels ---
class _AsyncModelsClient(Protocol):
    """What `AsyncModels` uses of its `AsyncClient` (client.py imports this module, not the reverse)."""

    @property
    def config(self) -> Config: ...
    @property
    def _transport(self) -> AsyncTransport: ...
    @property
    def read_limits(self) -> ReadLimits: ...


class AsyncModels:
    """`AsyncClient.models`: `list(provider=None)`, every configured provider asked (`twins.agather`: at
    once on the async side, one after the other on the sync side)."""

    def __init__(self, client: _AsyncModelsClient) -> None:
        self._client = client

    async def list(self, *, provider: str | None = None) -> ModelList:
        async def one(p: "Provider") -> Any:
            try:
                reply = await afetch(self._client._transport, _exchange(self._client, p), functools.partial(_error, p))
                return _models_of(p, reply.body, self._client.config)
            except E.ProviderError as error:
                return error

        async def twice(p: "Provider") -> Any:  # a GET: resent once after a dropped kept-alive connection
            found = await one(p)
            return await one(p) if _dropped(found) else found

        providers = _providers(self._client.config, provider)
        results = await agather(functools.partial(twice, p) for p in providers)
        listed = {p.name: r for p, r in zip(providers, results) if not isinstance(r, E.ProviderError)}
        errors = {p.name: r for p, r in zip(providers, results) if isinstance(r, E.ProviderError)}
        return _result(listed, errors)

    async def retrieve(self, model: str) -> Model:
        """One model, as openai-python's `models.retrieve(model)`: `model` as `list()` gives its id
        ("provider:model-id", or a one-server client's own id), found in its provider's list.
        NotFoundError when it is not listed."""
        provider, wanted = _wanted(self._client.config, model)
        return _found(await self.list(provider=provider), wanted, provider)
# --- end async source: AsyncModels ---


# --- generated from AsyncModels by scripts/gen_sync.py; do not edit ---
class _ModelsClient(Protocol):
    """What `Models` uses of its `Client` (client.py imports this module, not the reverse)."""

    @property
    def config(self) -> Config: ...
    @property
    def _transport(self) -> SyncTransport: ...
    @property
    def read_limits(self) -> ReadLimits: ...


class Models:
    """`Client.models`: `list(provider=None)`, every configured provider asked (`twins.gather`: at
    once on the async side, one after the other on the sync side)."""

    def __init__(self, client: _ModelsClient) -> None:
        self._client = client

    def list(self, *, provider: str | None = None) -> ModelList:
        def one(p: "Provider") -> Any:
            try:
                reply = fetch(self._client._transport, _exchange(self._client, p), functools.partial(_error, p))
                return _models_of(p, reply.body, self._client.config)
            except E.ProviderError as error:
                return error

        def twice(p: "Provider") -> Any:  # a GET: resent once after a dropped kept-alive connection
            found = one(p)
            return one(p) if _dropped(found) else found

        providers = _providers(self._client.config, provider)
        results = gather(functools.partial(twice, p) for p in providers)
        listed = {p.name: r for p, r in zip(providers, results) if not isinstance(r, E.ProviderError)}
        errors = {p.name: r for p, r in zip(providers, results) if isinstance(r, E.ProviderError)}
        return _result(listed, errors)

    def retrieve(self, model: str) -> Model:
        """One model, as openai-python's `models.retrieve(model)`: `model` as `list()` gives its id
        ("provider:model-id", or a one-server client's own id), found in its provider's list.
        NotFoundError when it is not listed."""
        provider, wanted = _wanted(self._client.config, model)
        return _found(self.list(provider=provider), wanted, provider)
# --- end generated: AsyncModels ---
