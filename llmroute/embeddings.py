"""`client.embeddings.create(...)`: OpenAI-shaped embeddings through the same tiers, failover,
breakers, pricing, ledger and telemetry as chat.

An embeddings call is a `CallRun` whose request is built by an embedding adapter
(`providers/embeddings.py`) and whose input tokens are the texts'. It targets a tier marked
`kind = "embedding"` or a "provider:model" deployment; `model="auto"` and chat tiers are refused.
Every attempt gets its ledger record (input tokens priced at the deployment's input rate, no output)
and its span (`gen_ai.operation.name = "embeddings"`). Embeddings are never hedged.

The response is OpenAI's `CreateEmbeddingResponse` (`data[i].embedding`, `usage.prompt_tokens`),
plus `route` and `cost` that `model_dump()` leaves out. `Embeddings` and `AsyncEmbeddings` are the
thin shells that move bytes, through the client's send path (`_http/exchange.py`: timeouts, read
caps, the attempt's connect time); the rest is sans-I/O.
"""

from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Protocol, Union

from pydantic import Field

from llmroute import errors as E
from llmroute.accounting.cost_value import Cost
from llmroute._call.attempt_errors import network_errors, sync_network_errors, transport_error
from llmroute._http.exchange import Exchange, aread, read
from llmroute._call.call import CallRun, Wait
from llmroute._call.engine import EngineClient
from llmroute._call.offload import end_after, end_cancelled, mark_unsent
from llmroute._runtime.twins import SyncOffload, asleep, sleep
from llmroute.providers.embedding_wire import EmbeddingAdapter, EmbeddingInput, embedding_adapter_class
from llmroute._call.targets import Target
from llmroute._call.validate import check_feature, check_headers, check_metadata, check_timeout
from llmroute.types import Route, Usage, _OpenAIModel
from llmroute.accounting.tokens import count_text_tokens

if TYPE_CHECKING:
    from llmroute.config import Config, Deployment
    from llmroute._call.call import AttemptContext
    from llmroute._call.engine import Engine
    from llmroute._call.offload import Offload

__all__ = ["Embedding", "EmbeddingUsage", "CreateEmbeddingResponse", "PreparedEmbedding", "prepare_embedding",
           "embedding_target", "EmbeddingRun", "AttemptBatches", "Embeddings", "AsyncEmbeddings"]

ENCODING_FORMATS = ("float", "base64")
# Ours, never sent (as for chat).
_OWN = ("model", "input", "feature", "metadata", "pool", "timeout", "extra_body", "extra_headers")


class Embedding(_OpenAIModel):
    object: str = "embedding"
    embedding: Union[List[float], str]  # a str when encoding_format="base64"
    index: int = 0


class EmbeddingUsage(_OpenAIModel):
    prompt_tokens: int = 0
    total_tokens: int = 0


class CreateEmbeddingResponse(_OpenAIModel):
    object: str = "list"
    data: List[Embedding] = Field(default_factory=list)
    model: str = ""
    usage: EmbeddingUsage = Field(default_factory=EmbeddingUsage)
    route: Route | None = Field(default=None, exclude=True)
    cost: Cost | None = Field(default=None, exclude=True)


@dataclass
class PreparedEmbedding:
    """A validated `embeddings.create()` call, in the shape `CallRun` reads a chat call in."""

    model: str
    call: EmbeddingInput
    feature: str | None
    metadata: Dict[str, str]
    pool: str
    timeout_s: float | None
    request_id: str
    target: Target | None = None
    input_tokens: int | None = None
    stream: bool = False
    operation: str = "embeddings"
    cache: Any = None  # embeddings are not cached (the response cache is for chat answers)
    max_retries: int | None = None  # the client's `max_retries` option (`with_options`)

    @property
    def messages(self) -> List[Dict[str, Any]]:
        return []  # nothing chat-shaped to record or count


def _check_input(value: Any) -> Any:
    def bad(why: str) -> E.InvalidRequestError:
        return E.InvalidRequestError(why, field="input")

    if isinstance(value, str):
        if not value:
            raise bad("must not be empty")
        return value
    if not isinstance(value, (list, tuple)) or not value:
        raise bad("must be a string, a non-empty list of strings, or token ids")
    value = list(value)
    if all(isinstance(v, str) for v in value):
        empty = next((i for i, v in enumerate(value) if not v), None)
        if empty is not None:
            raise E.InvalidRequestError("must not be empty", field=f"input[{empty}]")
        return value
    if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return value
    if all(isinstance(v, (list, tuple)) and v and all(isinstance(t, int) and not isinstance(t, bool) for t in v)
           for v in value):
        return [list(v) for v in value]
    raise bad("must be a string, a list of strings, a list of token ids, or a list of such lists (not mixed)")


def prepare_embedding(config: "Config", kwargs: Mapping[str, Any]) -> PreparedEmbedding:
    """Validate `embeddings.create()`'s arguments. Raises `InvalidRequestError` naming the argument."""
    model = kwargs.get("model")
    if not isinstance(model, str) or not model:
        raise E.InvalidRequestError("is required: an embedding tier's name or 'provider:model-id'", field="model")
    if model == "auto":
        raise E.InvalidRequestError("'auto' routes chat only; name an embedding tier or 'provider:model-id'",
                                    field="model")
    value = _check_input(kwargs.get("input"))
    dimensions = kwargs.get("dimensions")
    if dimensions is not None and (isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1):
        raise E.InvalidRequestError("must be a positive integer", field="dimensions")
    encoding_format = kwargs.get("encoding_format")
    if encoding_format is not None and encoding_format not in ENCODING_FORMATS:
        raise E.InvalidRequestError(f"must be one of {', '.join(ENCODING_FORMATS)}", field="encoding_format")
    # llmroute's own arguments are checked as create()'s are (`_call/validate.py`): the same caps on
    # what goes in every ledger row, a finite timeout, sendable headers.
    feature = kwargs.get("feature")
    if feature is not None:
        check_feature(feature)
    metadata = check_metadata(kwargs.get("metadata"))
    pool = kwargs.get("pool") or "interactive"
    if not isinstance(pool, str) or pool not in config.sections.pool_names:
        raise E.InvalidRequestError(f"unknown pool {pool!r} (known: {', '.join(sorted(config.sections.pool_names))})",
                                    field="pool")
    timeout = check_timeout(kwargs.get("timeout"))
    extra_body, extra_headers = kwargs.get("extra_body") or {}, check_headers(kwargs.get("extra_headers"))
    if not isinstance(extra_body, Mapping):
        raise E.InvalidRequestError("must be a dict", field="extra_body")
    params = {k: v for k, v in kwargs.items() if v is not None and k not in _OWN}
    return PreparedEmbedding(
        model=model, call=EmbeddingInput(value, params, dict(extra_body), dict(extra_headers)), feature=feature,
        metadata=metadata, pool=pool, timeout_s=timeout,
        request_id=os.urandom(16).hex(),
    )


def embedding_target(config: "Config", prepared: PreparedEmbedding) -> Target:
    """The deployments an embeddings call may go to: an embedding tier's, or one "provider:model"."""
    model = prepared.model
    tier = config.tiers.get(model)
    if tier is not None:
        if tier.kind != "embedding":
            raise E.RoutingError(f"tier {model!r} serves chat; embeddings go to a tier with kind = \"embedding\" "
                                 f"(embedding tiers: {', '.join(embedding_tiers(config)) or 'none'})")
        fallback: List["Deployment"] = []
        if tier.fallback_tier is not None:
            fallback = list(config.tiers[tier.fallback_tier].deployments_for(prepared.pool))
        return Target(list(tier.deployments_for(prepared.pool)), tier.name, f"tier: {tier.name}",
                      fallback=fallback, fallback_tier=tier.fallback_tier)
    if ":" in model and model.partition(":")[0] in config.providers:
        dep = config.deployment(model)
        if dep is not None:
            return Target([dep], dep.tier, f"deployment: {dep.id}")
    from llmroute._call.targets import bare_deployment  # the call core: loaded with the first client

    bare = bare_deployment(config, model) if model else None
    if bare is not None:  # the platform's own id, served by one configured deployment (or the default provider)
        return Target([bare], bare.tier, f"model: {model} ({bare.id})")
    if ":" in model:
        known = ", ".join(sorted(config.providers)) or "none"
        raise E.RoutingError(f"model {model!r}: unknown provider {model.partition(':')[0]!r} "
                             f"(configured providers: {known})")
    raise E.RoutingError(f"model {model!r} is not an embedding tier (embedding tiers: "
                         f"{', '.join(embedding_tiers(config)) or 'none'}) and not 'provider:model-id'")


def embedding_tiers(config: "Config") -> List[str]:
    return sorted(name for name, tier in config.tiers.items() if tier.kind == "embedding")


def count_input_tokens(call: EmbeddingInput) -> int:
    """Our own count of the input: tiktoken over the texts, or the number of token ids given."""
    texts = call.texts()
    if texts is None:
        value = call.input
        return sum(len(v) if isinstance(v, list) else 1 for v in value)  # token ids, or lists of them

    return sum(count_text_tokens(t) for t in texts)


@dataclass
class _Finished:
    """What `CallRun.succeeded` and the recorder read of a finished call (an embedding has no choices)."""

    id: str
    usage: Usage
    choices: List[Any] = field(default_factory=list)
    route: Route | None = None
    cost: Cost | None = None


class EmbeddingRun(CallRun):
    """The attempts of one embeddings call: a chat `CallRun` with embedding adapters and input counting."""

    def __init__(self, engine: Engine, prepared: PreparedEmbedding, now: float, *, wall: Callable[[], float]) -> None:
        prepared.target = prepared.target or embedding_target(engine.config, prepared)
        super().__init__(engine, prepared, now, wall=wall)  # type: ignore[arg-type]  # a PreparedCall in all CallRun reads

    def admitted_target(self, routed: Target, admitted: Target) -> Target:
        """A budget's `downgrade` names a chat tier, which cannot embed: the call keeps its own tier
        (the budget still counts it; a `refuse` budget still refuses it)."""
        tier = self.engine.config.tiers.get(admitted.tier) if admitted.tier else None
        if tier is not None and tier.kind != "embedding":
            return routed
        return admitted

    def apply_output_cap(self, max_tokens: int) -> None:
        """A guard's output cap means nothing for an embedding: not sent."""

    def streams(self, deployment: "Deployment") -> bool:
        """An embeddings answer is one JSON body: never sent as a stream."""
        return False

    def _adapter(self, deployment: "Deployment") -> EmbeddingAdapter:
        adapter = self._adapters.get(deployment.id)
        if adapter is None:
            cls = embedding_adapter_class(deployment.provider.kind, deployment.provider.protocol)
            adapter = self._adapters[deployment.id] = cls(deployment)
        return adapter  # type: ignore[return-value]  # CallRun._adapters is typed for chat; here each is an EmbeddingAdapter

    def input_tokens(self) -> int:
        if self.prepared.input_tokens is None:
            self.prepared.input_tokens = count_input_tokens(self.prepared.call)  # type: ignore[arg-type]  # an EmbeddingInput here
        return self.prepared.input_tokens

    def billed_before_failing(self, ctx: Any, usage: Usage, *, estimated: bool) -> None:
        """Parts of the attempt's input were answered (and billed) before a later request failed."""
        rec = ctx.record
        rec.usage, rec.usage_estimated, rec.billed = usage, estimated, True

    def finish(self, ctx: Any, body: Dict[str, Any], usage: Usage | None, now: float) -> CreateEmbeddingResponse:
        """The attempt answered: record it (usage counted here when the platform sent none)."""
        view = _Finished(id=body.get("id") or "", usage=usage or Usage())
        self.succeeded(ctx, view, usage is not None, now, None)  # type: ignore[arg-type]  # what succeeded() reads of a ChatCompletion
        tokens = view.usage.prompt_tokens
        # The adapter checked every item (a list or a base64 str per input, indices 0..n-1): built
        # without re-validating thousands of floats per vector.
        data = [Embedding.model_construct(**item) for item in body["data"]]
        extra = {k: v for k, v in body.items() if k not in ("data", "usage")}
        return CreateEmbeddingResponse.model_construct(
            **extra, data=data, usage=EmbeddingUsage(prompt_tokens=tokens, total_tokens=tokens),
            route=view.route, cost=view.cost)


class AttemptBatches:
    """One attempt's requests: the input split as the platform requires (DashScope: 10 texts per
    request), sent in order, answers joined into one response. Sans-I/O: the shells send."""

    def __init__(self, ctx: Any, call: EmbeddingInput) -> None:
        self.ctx = ctx
        self.parts = ctx.adapter.batches(call)
        self.bodies: List[Dict[str, Any]] = []
        self.usages: List[Usage | None] = []

    def next_request(self) -> Any:
        """The next request to send (also set as `ctx.request`), or None when all are answered."""
        i = len(self.bodies)
        if i >= len(self.parts):
            return None
        if len(self.parts) > 1:
            self.ctx.request = self.ctx.adapter.build_request(self.parts[i])
        return self.ctx.request

    def add(self, headers: Any, content: bytes) -> None:
        body, usage = self.ctx.adapter.parse_embeddings(headers, content, self.parts[len(self.bodies)])
        self.bodies.append(body)
        self.usages.append(usage)

    def result(self) -> tuple[Dict[str, Any], Usage | None]:
        if len(self.bodies) == 1:
            return self.bodies[0], self.usages[0]
        data = [{**item, "index": n} for n, item in enumerate(i for body in self.bodies for i in body["data"])]
        if any(u is None for u in self.usages):
            return {**self.bodies[0], "data": data}, None
        tokens = sum(u.prompt_tokens for u in self.usages if u is not None)
        return {**self.bodies[0], "data": data}, Usage(prompt_tokens=tokens, total_tokens=tokens)

    def failed(self, run: "EmbeddingRun", error: E.ProviderError, now: float) -> None:
        """A request failed: the parts answered before it were billed, so the attempt records them."""
        if self.bodies:
            tokens = sum(u.prompt_tokens if u is not None else count_input_tokens(p)
                         for u, p in zip(self.usages, self.parts))
            run.billed_before_failing(self.ctx, Usage(prompt_tokens=tokens, total_tokens=tokens),
                                      estimated=any(u is None for u in self.usages))
        run.failed(self.ctx, error, now)


def _now() -> float:
    return time.monotonic()


# --- async source: AsyncEmbeddings ---
class _AsyncEmbeddingsClient(EngineClient, Protocol):
    """What `AsyncEmbeddings` uses of its `AsyncClient` (client.py imports this module, not the reverse)."""

    @property
    def _offload(self) -> Offload: ...
    async def _send(self, ctx: AttemptContext) -> tuple[Any, Exchange]: ...
    def _call_args(self, kwargs: Dict[str, Any]) -> tuple[Dict[str, Any], int | None]: ...


class AsyncEmbeddings:
    """`AsyncClient.embeddings`: `create(model=, input=, dimensions=, encoding_format=, user=, feature=,
    metadata=, pool=, timeout=, extra_body=, extra_headers=)`."""

    def __init__(self, client: _AsyncEmbeddingsClient) -> None:
        self._client = client

    async def create(self, **kwargs: Any) -> CreateEmbeddingResponse:
        client = self._client
        kwargs, max_retries = client._call_args(kwargs)  # the client's options (timeout, max_retries, headers)
        prepared = prepare_embedding(client.config, kwargs)
        prepared.max_retries = max_retries
        offload = client._offload  # admission and the plan's steps: AsyncClient's in worker threads
        run = await offload.run(functools.partial(EmbeddingRun, client._engine, prepared, _now(), wall=time.time),
                                undo=end_cancelled)
        try:
            return await self._attempts(run, prepared)
        except E.LLMRouteError:
            raise
        except BaseException as exc:  # cancelled, KeyboardInterrupt, or a bug of ours: what the call holds is given back
            end_after(run, exc)
            raise

    async def _attempts(self, run: "EmbeddingRun", prepared: PreparedEmbedding) -> CreateEmbeddingResponse:
        client = self._client
        raised = network_errors()
        while True:
            step = await client._offload.run(run.next_step, _now(), undo=mark_unsent)
            if isinstance(step, Wait):
                await asleep(step.seconds)
                continue
            ctx = step
            batches = AttemptBatches(ctx, prepared.call)
            try:
                while batches.next_request() is not None:
                    response, ex = await client._send(ctx)
                    batches.add(response.headers, await aread(response, ex))
            except E.InvalidRequestError:  # a request the transport cannot build: unsent, the caller's
                raise
            except E.ProviderError as error:
                batches.failed(run, error, _now())
                continue
            except raised as exc:
                batches.failed(run, transport_error(exc, ctx), _now())
                continue
            return run.finish(ctx, *batches.result(), _now())
# --- end async source: AsyncEmbeddings ---


# --- generated from AsyncEmbeddings by scripts/gen_sync.py; do not edit ---
class _EmbeddingsClient(EngineClient, Protocol):
    """What `Embeddings` uses of its `Client` (client.py imports this module, not the reverse)."""

    @property
    def _offload(self) -> SyncOffload: ...
    def _send(self, ctx: AttemptContext) -> tuple[Any, Exchange]: ...
    def _call_args(self, kwargs: Dict[str, Any]) -> tuple[Dict[str, Any], int | None]: ...


class Embeddings:
    """`Client.embeddings`: `create(model=, input=, dimensions=, encoding_format=, user=, feature=,
    metadata=, pool=, timeout=, extra_body=, extra_headers=)`."""

    def __init__(self, client: _EmbeddingsClient) -> None:
        self._client = client

    def create(self, **kwargs: Any) -> CreateEmbeddingResponse:
        client = self._client
        kwargs, max_retries = client._call_args(kwargs)  # the client's options (timeout, max_retries, headers)
        prepared = prepare_embedding(client.config, kwargs)
        prepared.max_retries = max_retries
        offload = client._offload  # admission and the plan's steps: Client's in worker threads
        run = offload.run(functools.partial(EmbeddingRun, client._engine, prepared, _now(), wall=time.time),
                                undo=end_cancelled)
        try:
            return self._attempts(run, prepared)
        except E.LLMRouteError:
            raise
        except BaseException as exc:  # cancelled, KeyboardInterrupt, or a bug of ours: what the call holds is given back
            end_after(run, exc)
            raise

    def _attempts(self, run: "EmbeddingRun", prepared: PreparedEmbedding) -> CreateEmbeddingResponse:
        client = self._client
        raised = sync_network_errors()
        while True:
            step = client._offload.run(run.next_step, _now(), undo=mark_unsent)
            if isinstance(step, Wait):
                sleep(step.seconds)
                continue
            ctx = step
            batches = AttemptBatches(ctx, prepared.call)
            try:
                while batches.next_request() is not None:
                    response, ex = client._send(ctx)
                    batches.add(response.headers, read(response, ex))
            except E.InvalidRequestError:  # a request the transport cannot build: unsent, the caller's
                raise
            except E.ProviderError as error:
                batches.failed(run, error, _now())
                continue
            except raised as exc:
                batches.failed(run, transport_error(exc, ctx), _now())
                continue
            return run.finish(ctx, *batches.result(), _now())
# --- end generated: AsyncEmbeddings ---
