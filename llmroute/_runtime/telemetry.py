"""OpenTelemetry spans and metrics for every llmroute call (GenAI semantic conventions v1.41.0, pinned).

What it records, per call:
- one span, kind CLIENT, named ``"chat {model}"`` (the model id sent to the platform), carrying the GenAI
  attributes (``gen_ai.operation.name``, ``gen_ai.provider.name``, ``gen_ai.request.model``,
  ``gen_ai.response.model``, ``gen_ai.usage.input_tokens``, ``gen_ai.usage.output_tokens``,
  ``server.address``, ``server.port``, ``error.type`` ...) and ours under ``llmroute.*`` (tier, feature, pool,
  cost, currency, route reason, attempt count);
- a child span per attempt, kind INTERNAL, named ``"attempt {n} {deployment}"`` (retries, failovers and
  hedges each get one; ``llmroute.attempt.kind`` says which), and a zero-length child span
  ``"skip {deployment}"`` per deployment the breaker skipped;
- metrics ``gen_ai.client.operation.duration`` (s), ``gen_ai.client.token.usage`` ({token}),
  ``gen_ai.client.operation.time_to_first_chunk`` (s, streams only) and ``llmroute.cost`` ({currency}).

Semconv choices made here (the conventions are "Development" status, so the mapping lives only in this module):
- Token usage and cost are on the call span only (the billed totals of the call). Attempt spans carry
  their own counts as ``llmroute.attempt.{input,output}_tokens``, so that backends that sum
  ``gen_ai.usage.*`` over spans do not count a call twice.
- ``error.type`` is the llmroute error class name (``RateLimitError``); other exceptions use their
  qualified name (``builtins`` ones just the class name). The HTTP status, when a platform gave one,
  goes in ``http.response.status_code`` on the attempt span.
- ``gen_ai.provider.name`` is the platform kind (``together``, ``vllm`` ...) unless the conventions name
  a value for it (``_SEMCONV_PROVIDER_NAMES``). On the call span it is the provider of the attempt that
  answered (or the last one tried).
- Durations come from the ``now`` floats the caller passes (one monotonic clock per call); span start
  and end timestamps are the OpenTelemetry SDK's own.
- Message content (``gen_ai.input.messages`` / ``gen_ai.output.messages``, JSON strings in the semconv
  "parts" shape) is recorded only when ``capture_content`` is true.

What it must never do: import ``opentelemetry`` when nothing in the process uses it (the API is imported
lazily, only once the process has imported it or set an ``OTEL_PYTHON_*_PROVIDER`` variable, or a provider
is passed in); import the OpenTelemetry SDK; touch API keys (error texts pass through ``secrets.scrub``);
rely on context managers spanning a stream's yields (spans are started and ended explicitly, so an attempt
may end in another thread or asyncio task than the one that started it); build any attribute when no SDK
is configured (a call then costs a few microseconds of Python calls: ``benchmarks/telemetry_overhead.py``).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import threading
from decimal import Decimal
from typing import Any, Callable, Mapping, Sequence

from pydantic import ConfigDict, Field
from llmroute._runtime.config_model import ConfigModel

from llmroute.errors import ProviderError
from llmroute._runtime.forksafe import renew_at_fork, renew_module_locks
from llmroute._runtime.secrets import scrub

__all__ = [
    "SEMCONV_VERSION",
    "SCHEMA_URL",
    "TelemetryConfig",
    "Telemetry",
    "CallTrace",
    "AttemptTrace",
    "error_type",
    "provider_name_for",
]

SEMCONV_VERSION = "1.41.0"
SCHEMA_URL = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"

# Advisory histogram buckets from the semconv metrics table: doubling from 10 ms to 81.92 s, and powers of 4
# from 1 to 67,108,864 tokens.
DURATION_BUCKETS_S = tuple(0.01 * 2**i for i in range(14))
TOKEN_BUCKETS = tuple(float(4**i) for i in range(14))

# Platform kinds whose semconv provider value differs from the kind's name. None of today's kinds has a
# well-known value, so they pass through unchanged; the table is where a future kind gets mapped.
_SEMCONV_PROVIDER_NAMES = {
    "openai": "openai",
    "azure-openai": "azure.ai.openai",
    "mistral": "mistral_ai",
    "xai": "x_ai",
    "deepseek": "deepseek",
    "groq": "groq",
}

# Request parameters -> recommended gen_ai.request.* attributes.
_REQUEST_PARAM_ATTRIBUTES = {
    "max_tokens": "gen_ai.request.max_tokens",
    "max_completion_tokens": "gen_ai.request.max_tokens",
    "temperature": "gen_ai.request.temperature",
    "top_p": "gen_ai.request.top_p",
    "top_k": "gen_ai.request.top_k",
    "frequency_penalty": "gen_ai.request.frequency_penalty",
    "presence_penalty": "gen_ai.request.presence_penalty",
    "seed": "gen_ai.request.seed",
}

_STATUS_DESCRIPTION_MAX_CHARS = 500


class TelemetryConfig(ConfigModel):
    """The ``[telemetry]`` config section. Spans and metrics go to the global OpenTelemetry providers."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    enabled: bool = True
    # Opt-in: message text in span attributes (semconv SHOULD NOT capture by default).
    capture_content: bool = False
    metrics: bool = True
    # Instrumentation scope name for both the tracer and the meter.
    tracer_name: str = Field(default="llmroute", min_length=1)


def provider_name_for(kind: str) -> str:
    """The ``gen_ai.provider.name`` value for a platform kind."""
    return _SEMCONV_PROVIDER_NAMES.get(kind, kind)


def error_type(error: BaseException) -> str:
    """The low-cardinality ``error.type`` for an exception: its class name for llmroute and builtins."""
    cls = type(error)
    module = cls.__module__
    if module == "builtins" or module == "llmroute" or module.startswith("llmroute."):
        return cls.__qualname__
    return f"{module}.{cls.__qualname__}"


class _Api:
    """The OpenTelemetry API pieces this module uses, imported once, on first need."""

    def __init__(self) -> None:
        from opentelemetry import trace

        self.trace = trace
        self.SpanKind = trace.SpanKind
        self.Status = trace.Status
        self.StatusCode = trace.StatusCode
        self.noop_tracer_providers = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)


_api: _Api | None = None
_api_lock = threading.Lock()
renew_module_locks(__name__, "_api_lock")


def _load_api() -> _Api:
    global _api
    if _api is None:
        with _api_lock:
            if _api is None:
                _api = _Api()
    return _api


_noop_meter_types: tuple[type, ...] | None = None


def _noop_meter_provider_types() -> tuple[type, ...]:
    global _noop_meter_types
    if _noop_meter_types is None:
        from opentelemetry import metrics

        types: list[type] = [metrics.NoOpMeterProvider]
        try:  # the proxy class is private; without it every global provider is treated as real (slower, correct)
            from opentelemetry.metrics._internal import _ProxyMeterProvider

            types.append(_ProxyMeterProvider)
        except ImportError:  # pragma: no cover - depends on the API version
            pass
        _noop_meter_types = tuple(types)
    return _noop_meter_types


_UNKNOWN = object()


def _global_provider(public: str, internal: str, variable: str, getter: str, from_env: bool) -> Any:
    """The global provider the application set, or None when it set none (so nothing can record).

    Asked on every call until a real provider appears, so it must be cheap: the public getter reads
    os.environ each time (about 1.5 us here), so when no OTEL_PYTHON_*_PROVIDER variable was set we read
    the API's set-once module variable instead, falling back to the getter if the API renamed it.
    """
    if from_env:
        return getattr(importlib.import_module(public), getter)()
    module = sys.modules.get(internal)
    if module is None:
        return None  # the application never imported the API, so it cannot have set a provider
    provider = getattr(module, variable, _UNKNOWN)
    if provider is _UNKNOWN:  # pragma: no cover - depends on the API version
        return getattr(module, getter)()
    return provider


# Observable gauges of each deployment's load (resilience/balance.py): name, unit, description, snapshot key.
LOAD_GAUGES = (
    ("llmroute.deployment.in_flight", "{request}", "Calls in flight to the deployment from this client.", "in_flight"),
    ("llmroute.deployment.latency", "s", "Peak-sensitive EWMA of the deployment's latency.", "latency_s"),
    ("llmroute.deployment.expected_delay", "s", "Expected delay of a new call to the deployment.",
     "expected_delay_s"),
    ("llmroute.deployment.queue.running", "{request}", "Requests the server says it is running (its gauges).",
     "queue_running"),
    ("llmroute.deployment.queue.waiting", "{request}", "Requests the server says are waiting (its gauges).",
     "queue_waiting"),
    ("llmroute.deployment.kv_cache.usage", "1", "KV-cache usage the server reports, 0..1.", "kv_cache"),
    ("llmroute.deployment.slow_start.window", "{request}",
     "Calls in flight this client allows the deployment while its capacity is not learned (slow start).", "window"),
)


def _load_gauges(meter: Any, source: Callable[[], Mapping[str, Mapping[str, Any]]]) -> list[Any]:
    """One observable gauge per `LOAD_GAUGES` entry, read from `source()` at each collection."""
    from opentelemetry.metrics import Observation  # the API is installed whenever a meter exists

    def callback(key: str) -> Callable[[Any], list[Any]]:
        def observe(options: Any) -> list[Any]:
            return [Observation(value, {"llmroute.deployment": dep}) for dep, load in source().items()
                    if isinstance(value := load.get(key), (int, float))]
        return observe

    return [meter.create_observable_gauge(name, callbacks=[callback(key)], unit=unit, description=description)
            for name, unit, description, key in LOAD_GAUGES]


class _Instruments:
    """The four instruments, created once per meter provider (and the load gauges, given a source)."""

    def __init__(self, meter: Any, load_source: Callable[[], Any] | None = None) -> None:
        self.duration = _histogram(
            meter, "gen_ai.client.operation.duration", "s", "GenAI operation duration.", DURATION_BUCKETS_S
        )
        self.token_usage = _histogram(
            meter, "gen_ai.client.token.usage", "{token}", "Number of input and output tokens used.", TOKEN_BUCKETS
        )
        self.time_to_first_chunk = _histogram(
            meter,
            "gen_ai.client.operation.time_to_first_chunk",
            "s",
            "Time from the start of a streamed call to its first chunk.",
            DURATION_BUCKETS_S,
        )
        self.cost = meter.create_counter(
            "llmroute.cost", unit="{currency}", description="Cost of calls, in the currency of llmroute.currency."
        )
        self.load = _load_gauges(meter, load_source) if load_source is not None else []


def _histogram(meter: Any, name: str, unit: str, description: str, buckets: Sequence[float]) -> Any:
    try:
        return meter.create_histogram(
            name, unit=unit, description=description, explicit_bucket_boundaries_advisory=list(buckets)
        )
    except TypeError:  # opentelemetry-api < 1.23 has no bucket advisory
        return meter.create_histogram(name, unit=unit, description=description)


class Telemetry:
    """Starts a `CallTrace` per call. One instance per client; safe to share across threads and tasks.

    `tracer_provider` / `meter_provider` default to the global ones, looked up on each call until a real
    (SDK) provider shows up, since the application may configure OpenTelemetry after building the client.
    """

    def __init__(
        self,
        config: TelemetryConfig | None = None,
        *,
        tracer_provider: Any = None,
        meter_provider: Any = None,
    ) -> None:
        self.config = config if config is not None else TelemetryConfig()
        self._tracer_provider = tracer_provider
        self._meter_provider = meter_provider
        self._tracer: Any = None
        self._instruments: _Instruments | None = None
        # Every deployment's load estimate (`LoadBalancer.snapshot`), observed as gauges; set by the engine.
        self.load_source: Callable[[], Any] | None = None
        self._bind_lock = threading.Lock()
        renew_at_fork(self, "_bind_lock")
        # Without these variables (read once: the API reads them when first asked) a global provider can only
        # exist if the application imported the API to set it.
        self._tracer_env = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ
        self._meter_env = "OTEL_PYTHON_METER_PROVIDER" in os.environ

    # -- binding to providers (cached once real; a global provider can only be set once) -----------------

    def _current_tracer(self) -> Any:
        if self._tracer is not None:
            return self._tracer
        provider = self._tracer_provider
        if provider is None:
            provider = _global_provider(
                "opentelemetry.trace", "opentelemetry.trace", "_TRACER_PROVIDER", "get_tracer_provider", self._tracer_env
            )
            if provider is None:
                return None
        api = _load_api()
        if isinstance(provider, api.noop_tracer_providers):
            return None
        with self._bind_lock:
            if self._tracer is None:
                self._tracer = provider.get_tracer(self.config.tracer_name, schema_url=SCHEMA_URL)
        return self._tracer

    def _current_instruments(self) -> _Instruments | None:
        if self._instruments is not None:
            return self._instruments
        provider = self._meter_provider
        if provider is None:
            provider = _global_provider(
                "opentelemetry.metrics",
                "opentelemetry.metrics._internal",
                "_METER_PROVIDER",
                "get_meter_provider",
                self._meter_env,
            )
            if provider is None:
                return None
        if isinstance(provider, _noop_meter_provider_types()):
            return None
        with self._bind_lock:
            if self._instruments is None:
                meter = provider.get_meter(self.config.tracer_name, schema_url=SCHEMA_URL)
                self._instruments = _Instruments(meter, self.load_source)
        return self._instruments

    # -- the call path -------------------------------------------------------------------------------------

    def start_call(
        self,
        *,
        request_model: str,
        now: float,
        stream: bool = False,
        provider_name: str | None = None,
        tier: str | None = None,
        feature: str | None = None,
        pool: str | None = None,
        route_reason: str | None = None,
        requested_model: str | None = None,
        request_params: Mapping[str, Any] | None = None,
        messages: Sequence[Any] | None = None,
        operation: str = "chat",
    ) -> CallTrace:
        """Open the call span. `request_model` is the platform model id of the first candidate;
        `requested_model` what the user passed as `model=` (a tier or alias); `provider_name` the first
        candidate's platform kind; `messages` are recorded only when `capture_content` is on."""
        if not self.config.enabled:
            return _NOOP_CALL
        tracer = self._current_tracer()
        instruments = self._current_instruments() if self.config.metrics else None
        if tracer is None and instruments is None:
            return _NOOP_CALL
        return CallTrace(
            tracer,
            instruments,
            capture_content=self.config.capture_content,
            request_model=request_model,
            now=now,
            stream=stream,
            provider_name=provider_name,
            tier=tier,
            feature=feature,
            pool=pool,
            route_reason=route_reason,
            requested_model=requested_model,
            request_params=request_params,
            messages=messages,
            operation=operation,
        )


class CallTrace:
    """One call: its span, its attempts, its metrics. Every method may be called from any thread or task."""

    def __init__(
        self,
        tracer: Any,
        instruments: _Instruments | None,
        *,
        capture_content: bool,
        request_model: str,
        now: float,
        stream: bool,
        provider_name: str | None,
        tier: str | None,
        feature: str | None,
        pool: str | None,
        route_reason: str | None,
        requested_model: str | None,
        request_params: Mapping[str, Any] | None,
        messages: Sequence[Any] | None,
        operation: str,
    ) -> None:
        self._tracer = tracer
        self._instruments = instruments
        self._capture_content = capture_content
        self.operation = operation
        self.request_model = request_model
        self.provider_name = provider_name
        self.stream = stream
        self.tier = tier
        self.feature = feature
        self.pool = pool
        self.started_at = now
        self._first_chunk_at: float | None = None
        self._attempt_count = 0
        self._last_attempt: AttemptTrace | None = None
        self._answering_attempt: AttemptTrace | None = None
        self._ended = False
        self._lock = threading.Lock()
        self._span: Any = None
        self._context: Any = None
        self._recording = False
        if tracer is None:
            return
        api = _load_api()
        # Sampling-relevant attributes go in at start (semconv c.2).
        attributes: dict[str, Any] = {"gen_ai.operation.name": operation, "gen_ai.request.model": request_model}
        if provider_name:
            attributes["gen_ai.provider.name"] = provider_name_for(provider_name)
        span = tracer.start_span(f"{operation} {request_model}", kind=api.SpanKind.CLIENT, attributes=attributes)
        self._span = span
        self._context = api.trace.set_span_in_context(span)
        self._recording = span.is_recording()
        if not self._recording:
            return
        _set_present(
            span,
            {
                "gen_ai.request.stream": True if stream else None,
                "llmroute.tier": tier,
                "llmroute.feature": feature,
                "llmroute.pool": pool,
                "llmroute.route_reason": route_reason,
                "llmroute.requested_model": requested_model,
            },
        )
        if request_params:
            span.set_attributes(_request_param_attributes(request_params))
        if capture_content and messages is not None:
            span.set_attribute("gen_ai.input.messages", _json(_input_messages(messages)))

    @property
    def is_recording(self) -> bool:
        """Whether the call span records attributes (false when sampled out or with no SDK)."""
        return self._recording

    def set_cache(self, outcome: str | None, similarity: float | None = None) -> None:
        """The response cache's outcome for this call (`llmroute.cache`, `llmroute.cache.similarity`)."""
        if getattr(self, "_recording", False):
            _set_present(self._span, {"llmroute.cache": outcome, "llmroute.cache.similarity": similarity})

    @property
    def context(self) -> Any:
        """An OpenTelemetry Context holding the call span, for code that wants to nest spans under it."""
        return self._context

    def start_attempt(
        self,
        *,
        now: float,
        attempt_number: int,
        provider_name: str,
        deployment: str,
        request_model: str,
        server_address: str | None = None,
        server_port: int | None = None,
        breaker_state: str | None = None,
        kind: str = "first",
    ) -> AttemptTrace:
        """Open a child span for one attempt. `kind` is "first", "retry", "failover" or "hedge"."""
        attempt = AttemptTrace(
            self,
            now=now,
            attempt_number=attempt_number,
            provider_name=provider_name,
            deployment=deployment,
            request_model=request_model,
            server_address=server_address,
            server_port=server_port,
            breaker_state=breaker_state,
            kind=kind,
        )
        with self._lock:
            self._attempt_count += 1
            self._last_attempt = attempt
        return attempt

    def skip(
        self,
        *,
        deployment: str,
        reason: str,
        provider_name: str | None = None,
        breaker_state: str | None = None,
    ) -> None:
        """Record a deployment passed over without a request (an open breaker, a full pool): a zero-length
        child span, so it shows in the trace's waterfall next to the attempts."""
        if self._tracer is None or not self._recording:
            return
        api = _load_api()
        attributes = _present(
            {
                "llmroute.deployment": deployment,
                "llmroute.skipped_reason": reason,
                "llmroute.breaker_state": breaker_state,
                "gen_ai.provider.name": provider_name_for(provider_name) if provider_name else None,
            }
        )
        span = self._tracer.start_span(
            f"skip {deployment}", context=self._context, kind=api.SpanKind.INTERNAL, attributes=attributes
        )
        span.end()

    def _note_first_chunk(self, now: float) -> None:
        with self._lock:
            if self._first_chunk_at is None or now < self._first_chunk_at:
                self._first_chunk_at = now

    def _note_attempt_ended(self, attempt: AttemptTrace, answered: bool) -> None:
        if answered:
            with self._lock:
                if self._answering_attempt is None:
                    self._answering_attempt = attempt

    def end(
        self,
        *,
        now: float,
        response_model: str | None = None,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        cache_read_input_tokens: int | None = None,
        reasoning_output_tokens: int | None = None,
        cost: Decimal | None = None,
        currency: str | None = None,
        cost_estimated: bool | None = None,
        error: BaseException | None = None,
        finish_reasons: Sequence[str] | None = None,
        response_id: str | None = None,
        output_messages: Sequence[Any] | None = None,
    ) -> None:
        """Close the call: its final attributes, status and metrics. Token counts and cost are the call's
        billed totals (every attempt that was billed). A second call is ignored."""
        with self._lock:
            if self._ended:
                return
            self._ended = True
            answering = self._answering_attempt or self._last_attempt
            first_chunk_at = self._first_chunk_at
            attempt_count = self._attempt_count
        provider = provider_name_for(answering.provider_name) if answering else (
            provider_name_for(self.provider_name) if self.provider_name else None
        )
        request_model = answering.request_model if answering else self.request_model
        server_address = answering.server_address if answering else None
        server_port = answering.server_port if answering else None
        err_type = error_type(error) if error is not None else None
        time_to_first_chunk = (
            first_chunk_at - self.started_at if self.stream and first_chunk_at is not None else None
        )

        span = self._span
        if span is not None:
            if self._recording:
                if request_model != self.request_model:
                    # Failover to another model: the name tells the model that answered (or was last tried).
                    span.update_name(f"{self.operation} {request_model}")
                _set_present(
                    span,
                    {
                        "gen_ai.provider.name": provider,
                        "gen_ai.request.model": request_model,
                        "gen_ai.response.model": response_model,
                        "gen_ai.response.id": response_id,
                        "gen_ai.response.finish_reasons": list(finish_reasons) if finish_reasons else None,
                        "gen_ai.response.time_to_first_chunk": time_to_first_chunk,
                        "gen_ai.usage.input_tokens": input_tokens,
                        "gen_ai.usage.output_tokens": output_tokens,
                        "gen_ai.usage.cache_read.input_tokens": cache_read_input_tokens,
                        "gen_ai.usage.reasoning.output_tokens": reasoning_output_tokens,
                        "server.address": server_address,
                        "server.port": server_port,
                        "error.type": err_type,
                        "llmroute.cost": float(cost) if cost is not None else None,
                        "llmroute.currency": currency,
                        "llmroute.cost.estimated": cost_estimated,
                        "llmroute.attempts": attempt_count,
                    },
                )
                if self._capture_content and output_messages is not None:
                    span.set_attribute(
                        "gen_ai.output.messages",
                        _json(_output_messages(output_messages, finish_reasons, errored=error is not None)),
                    )
                if error is not None:
                    _set_error_status(span, error)
            span.end()

        instruments = self._instruments
        if instruments is None:
            return
        attributes = _present(
            {
                "gen_ai.operation.name": self.operation,
                "gen_ai.provider.name": provider,
                "gen_ai.request.model": request_model,
                "gen_ai.response.model": response_model,
                "server.address": server_address,
                "server.port": server_port,
                "error.type": err_type,
                "llmroute.tier": self.tier,
                "llmroute.feature": self.feature,
            }
        )
        instruments.duration.record(max(0.0, now - self.started_at), attributes)
        if time_to_first_chunk is not None:
            instruments.time_to_first_chunk.record(max(0.0, time_to_first_chunk), attributes)
        # Semconv: report usage only when counts are known; never invent them.
        if input_tokens is not None:
            instruments.token_usage.record(input_tokens, {**attributes, "gen_ai.token.type": "input"})
        if output_tokens is not None:
            instruments.token_usage.record(output_tokens, {**attributes, "gen_ai.token.type": "output"})
        if cost is not None and currency:
            cost_attributes = {**attributes, "llmroute.currency": currency}
            if self.pool:
                cost_attributes["llmroute.pool"] = self.pool
            instruments.cost.add(float(cost), cost_attributes)


class AttemptTrace:
    """One request to one deployment: a child span of the call, ended explicitly (any thread or task)."""

    def __init__(
        self,
        call: CallTrace,
        *,
        now: float,
        attempt_number: int,
        provider_name: str,
        deployment: str,
        request_model: str,
        server_address: str | None,
        server_port: int | None,
        breaker_state: str | None,
        kind: str,
    ) -> None:
        self._call = call
        self.started_at = now
        self.attempt_number = attempt_number
        self.provider_name = provider_name
        self.deployment = deployment
        self.request_model = request_model
        self.server_address = server_address
        self.server_port = server_port
        self._first_chunk_at: float | None = None
        self._ended = False
        self._lock = threading.Lock()
        self._span: Any = None
        self._context: Any = None
        self._recording = False
        tracer = call._tracer
        if tracer is None:
            return
        api = _load_api()
        attributes = {
            "gen_ai.provider.name": provider_name_for(provider_name),
            "gen_ai.request.model": request_model,
            "llmroute.deployment": deployment,
            "llmroute.attempt": attempt_number,
            "llmroute.attempt.kind": kind,
        }
        if server_address:
            attributes["server.address"] = server_address
            if server_port is not None:
                attributes["server.port"] = server_port
        if breaker_state:
            attributes["llmroute.breaker_state"] = breaker_state
        span = tracer.start_span(
            f"attempt {attempt_number} {deployment}",
            context=call._context,
            kind=api.SpanKind.INTERNAL,
            attributes=attributes,
        )
        self._span = span
        self._recording = span.is_recording()

    @property
    def context(self) -> Any:
        """An OpenTelemetry Context holding this attempt's span (attach it around the HTTP send so that an
        HTTP-client instrumentation nests under the attempt); None when not tracing."""
        if self._span is None:
            return None
        if self._context is None:
            self._context = _load_api().trace.set_span_in_context(self._span)
        return self._context

    def first_chunk(self, now: float) -> None:
        """The first chunk with content arrived (TTFT: docs/bench.md, Definitions). Later calls are ignored."""
        with self._lock:
            if self._first_chunk_at is not None or self._ended:
                return
            self._first_chunk_at = now
        self._call._note_first_chunk(now)
        if self._recording:
            self._span.set_attribute("gen_ai.response.time_to_first_chunk", max(0.0, now - self.started_at))

    def event(self, name: str, attributes: Mapping[str, Any]) -> None:
        """A span event on the attempt (a skipped malformed stream event, a resumed answer)."""
        if self._recording:
            self._span.add_event(name, attributes=dict(attributes))

    def end(
        self,
        *,
        now: float,
        response_model: str | None = None,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        error: BaseException | None = None,
        finish_reasons: Sequence[str] | None = None,
        response_id: str | None = None,
        cancelled: bool = False,
    ) -> None:
        """Close the attempt. `cancelled` marks a hedge loser closed on purpose (not an error).
        A second call is ignored."""
        with self._lock:
            if self._ended:
                return
            self._ended = True
        self._call._note_attempt_ended(self, answered=error is None and not cancelled)
        span = self._span
        if span is None:
            return
        if self._recording:
            status_code = error.status if isinstance(error, ProviderError) else None
            _set_present(
                span,
                {
                    "gen_ai.response.model": response_model,
                    "gen_ai.response.id": response_id,
                    "gen_ai.response.finish_reasons": list(finish_reasons) if finish_reasons else None,
                    "llmroute.attempt.input_tokens": input_tokens,
                    "llmroute.attempt.output_tokens": output_tokens,
                    "llmroute.attempt.duration_s": max(0.0, now - self.started_at),
                    "llmroute.attempt.cancelled": True if cancelled else None,
                    "error.type": error_type(error) if error is not None else None,
                    "http.response.status_code": status_code,
                },
            )
            if error is not None:
                _set_error_status(span, error)
        span.end()


class _NoopCallTrace(CallTrace):
    """What `start_call` returns when nothing records: every method returns at once."""

    def __init__(self) -> None:  # no state: one shared instance
        pass

    @property
    def is_recording(self) -> bool:
        return False

    @property
    def context(self) -> Any:
        return None

    def start_attempt(self, **_: Any) -> AttemptTrace:
        return _NOOP_ATTEMPT

    def skip(self, **_: Any) -> None:
        pass

    def end(self, **_: Any) -> None:
        pass


class _NoopAttemptTrace(AttemptTrace):
    def __init__(self) -> None:
        pass

    @property
    def context(self) -> Any:
        return None

    def first_chunk(self, now: float) -> None:
        pass

    def event(self, name: str, attributes: Mapping[str, Any]) -> None:
        pass

    def end(self, **_: Any) -> None:
        pass


_NOOP_CALL = _NoopCallTrace()
_NOOP_ATTEMPT = _NoopAttemptTrace()


# -- attribute helpers ---------------------------------------------------------------------------------------


def _present(attributes: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in attributes.items() if v is not None}


def _set_present(span: Any, attributes: Mapping[str, Any]) -> None:
    span.set_attributes(_present(attributes))


def _set_error_status(span: Any, error: BaseException) -> None:
    api = _load_api()
    description = scrub(str(error))[:_STATUS_DESCRIPTION_MAX_CHARS] or error_type(error)
    span.set_status(api.Status(api.StatusCode.ERROR, description))


def _request_param_attributes(params: Mapping[str, Any]) -> dict[str, Any]:
    attributes: dict[str, Any] = {}
    for key, name in _REQUEST_PARAM_ATTRIBUTES.items():
        value = params.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            attributes[name] = value
    stop = params.get("stop")
    if isinstance(stop, str):
        attributes["gen_ai.request.stop_sequences"] = [stop]
    elif isinstance(stop, (list, tuple)) and all(isinstance(s, str) for s in stop) and stop:
        attributes["gen_ai.request.stop_sequences"] = list(stop)
    n = params.get("n")
    if isinstance(n, int) and n != 1:
        attributes["gen_ai.request.choice.count"] = n
    return attributes


# -- content capture (opt-in): OpenAI-shaped messages -> semconv gen-ai-{input,output}-messages.json -------


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _as_mapping(message: Any) -> Mapping[str, Any]:
    if isinstance(message, Mapping):
        return message
    dump = getattr(message, "model_dump", None)
    if dump is not None:
        dumped: Mapping[str, Any] = dump(exclude_none=True)
        return dumped
    return {"role": getattr(message, "role", "user"), "content": getattr(message, "content", None)}


def _content_parts(content: Any) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "content": content}]
    parts: list[dict[str, Any]] = []
    for item in content:
        item = _as_mapping(item)
        kind = item.get("type")
        if kind == "text":
            parts.append({"type": "text", "content": item.get("text", "")})
        elif kind == "image_url":
            image = item.get("image_url") or {}
            url = image.get("url") if isinstance(image, Mapping) else image
            parts.append({"type": "uri", "modality": "image", "uri": url})
        else:
            parts.append({k: v for k, v in item.items()})
    return parts


def _tool_call_parts(tool_calls: Any) -> list[dict[str, Any]]:
    parts = []
    for call in tool_calls or ():
        call = _as_mapping(call)
        function = _as_mapping(call.get("function") or {})
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                pass  # keep the string: the model's arguments are not always valid JSON
        parts.append({"type": "tool_call", "id": call.get("id"), "name": function.get("name"), "arguments": arguments})
    return parts


def _message_parts(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    if message.get("role") == "tool":
        return [{"type": "tool_call_response", "id": message.get("tool_call_id"), "response": message.get("content")}]
    return _content_parts(message.get("content")) + _tool_call_parts(message.get("tool_calls"))


def _input_messages(messages: Sequence[Any]) -> list[dict[str, Any]]:
    out = []
    for message in messages:
        message = _as_mapping(message)
        out.append({"role": message.get("role", "user"), "parts": _message_parts(message)})
    return out


# OpenAI finish reasons -> the semconv output-message enum (others pass through).
_FINISH_REASONS = {"tool_calls": "tool_call", "function_call": "tool_call"}


def _output_messages(messages: Sequence[Any], finish_reasons: Sequence[str] | None, *, errored: bool) -> list[dict[str, Any]]:
    out = []
    for index, message in enumerate(messages):
        message = _as_mapping(message)
        if finish_reasons and index < len(finish_reasons) and finish_reasons[index]:
            reason = _FINISH_REASONS.get(finish_reasons[index], finish_reasons[index])
        else:
            # The schema requires a finish reason; a message without one was cut short.
            reason = "error" if errored else "stop"
        out.append({"role": message.get("role", "assistant"), "parts": _message_parts(message), "finish_reason": reason})
    return out
