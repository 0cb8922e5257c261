"""The resilience policy: every breaker, retry, hedge and limit knob, with its default, in one value.

`[resilience]` in the config holds the defaults; a tier's or a deployment's `resilience` table
overrides any key. `merge(base, override)` layers one table over a policy and returns a new,
validated policy. This module only validates and merges values: it never reads a file, a clock
or the environment.
"""

from __future__ import annotations

import math
from typing import Any, Literal, Mapping

from pydantic import ConfigDict, Field, ValidationError, model_validator
from llmroute._runtime.config_model import ConfigModel

from llmroute.errors import ConfigError
from llmroute._runtime.suggest import did_you_mean

__all__ = ["MAX_DEADLINE_S", "ResiliencePolicy", "default_policy", "merge", "policy_from_config"]

# The longest `deadline_s` (about 11 days): far past any call's, far below the ~1e10 s at which a
# timeout overflowed the socket layer's clock (a bare OverflowError on the first request).
MAX_DEADLINE_S = 1e6


class ResiliencePolicy(ConfigModel):
    """Breaker, retry, hedge and client-side limit settings for one deployment (times in seconds)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)  # built by the first override, not at import

    # -- circuit breaker: the sliding window and what trips it
    window_s: float = Field(default=30.0, gt=0)  # time window for failure and slow-call rates
    window_kind: Literal["time", "count"] = "time"
    window_calls: int = Field(default=100, ge=1)  # size of the window when window_kind = "count"
    min_calls: int = Field(default=10, ge=1)  # no rate-based trip before this many calls in the window
    failure_rate: float = Field(default=0.5, gt=0, le=1)
    slow_ttft_s: float = Field(default=10.0, gt=0)  # slower than this to the first token = a slow call
    slow_rate: float = Field(default=0.8, gt=0, le=1)
    consecutive_failures: int = Field(default=5, ge=1)  # trips at once, whatever the window says
    # -- open and half-open
    open_s: float = Field(default=10.0, gt=0)  # first open period
    open_growth: float = Field(default=2.0, ge=1)  # each repeated trip multiplies the open period
    # The longest open period: a recovered deployment gets traffic back within this, however long
    # its outage (10, 20, 30, 30, ... s between probes of a deployment that stays down).
    open_max_s: float = Field(default=30.0, gt=0)
    open_jitter: float = Field(default=0.1, ge=0, lt=1)  # each open period shortened by up to this share
    trip_memory_s: float = Field(default=300.0, ge=0)  # closed this long without a trip: growth resets
    open_on_retry_after: bool = True  # a failure carrying Retry-After opens the breaker until then
    half_open_probes: int = Field(default=3, ge=1)  # probe calls admitted at once while half-open
    half_open_successes: int | None = Field(default=None, ge=1)  # successes that close; None = probes
    probe_lease_s: float | None = Field(default=None, gt=0)  # an unreported probe frees its slot; None = deadline_s
    fatal_open_s: float | None = Field(default=None, gt=0)  # auth/billing disable; None = until reset
    # A 401 disables the deployment until its key changes or this long passes (then one probe tries the
    # key again); None: until the key changes.
    auth_recheck_s: float | None = Field(default=300.0, gt=0)
    # A call that finds every deployment held by an open breaker whose hold ends within this many seconds
    # waits it out (then probes) instead of failing; 0 turns it off.
    wait_for_recovery_s: float = Field(default=3.0, ge=0)
    # -- retries
    max_retries: int = Field(default=2, ge=0)  # per deployment, before moving on
    # With an untried backup, at most this many same-deployment retries (and none after a timeout:
    # a silent deployment stays silent); the backup is the better bet.
    max_retries_with_backup: int = Field(default=1, ge=0)
    retry_budget: float = Field(default=0.2, ge=0, le=1)  # retries at most this share of recent requests
    retry_budget_min: int = Field(default=3, ge=0)  # retries always allowed per window (low traffic)
    retry_budget_window_s: float = Field(default=120.0, gt=0)  # "recent": longer than a slow call
    backoff_base_s: float = Field(default=0.5, ge=0)  # full jitter: uniform(0, base * 2**n), capped
    backoff_max_s: float = Field(default=8.0, ge=0)
    retry_after_max_s: float = Field(default=30.0, ge=0)  # longer Retry-After: move on, do not wait
    retry_after_with_backup_max_s: float = Field(default=2.0, ge=0)  # with a backup, wait at most this long
    deadline_s: float = Field(default=120.0, gt=0, le=MAX_DEADLINE_S)  # a whole call, every attempt included
    # -- abandoning a silent or stalled attempt (the first-token limit is the deployment's
    # ttft_timeout_s, 10 s by default, plus ttft_per_1k_tokens_s per 1,000 prompt tokens: prefill of
    # a long prompt legitimately takes longer)
    ttft_per_1k_tokens_s: float = Field(default=0.2, ge=0)
    stall_timeout_s: float = Field(default=10.0, gt=0)  # no byte (or no content) for this long after content started
    plain_via_stream: bool = True  # plain calls are streamed internally, so the limits above apply to them
    # A stream cut after content (docs/failover.md): "auto" continues it on a deployment that can
    # (another one first, then the cut one as a retry), else replays it on a same-family backup when
    # the request is greedy or seeded; "continue" only continues; "replay" also replays sampled
    # requests (verified: a replay that diverges is dropped unseen); "raise" never recovers.
    stream_recovery: Literal["auto", "continue", "replay", "raise"] = "auto"
    replay_max_chars: int = Field(default=8000, ge=0)  # a longer cut answer is not replayed (0: never replay)
    # Ask the server what it is (docs/failover.md, "Knowing what a server can do"): None, the default,
    # asks `openai-compatible` servers; true asks vllm, sglang, llamacpp and tgi deployments too; false never.
    identify_server: bool | None = None
    continue_prefill: bool | None = None  # can this deployment continue a partial answer? None: the kind's default
    context_precheck: bool = True  # skip deployments whose window is known to be too small
    # -- hedging (opt-in: off while hedge_after_ms is None)
    hedge_after_ms: float | None = Field(default=None, gt=0)
    hedge_delay: Literal["fixed", "p95"] = "fixed"  # "p95": the primary's recent p95 TTFT when known
    hedge_min_samples: int = Field(default=20, ge=1)  # TTFT samples needed before p95 is trusted
    hedge_budget: float = Field(default=0.05, ge=0, le=1)  # hedges at most this share of requests
    hedge_budget_min: int = Field(default=1, ge=0)
    # -- client-side limits (None = unlimited)
    max_concurrency: int | None = Field(default=None, ge=1)
    rpm: float | None = Field(default=None, gt=0)  # requests per minute
    tpm: float | None = Field(default=None, gt=0)  # tokens per minute (prompt + max_tokens)
    queue_timeout_s: float = Field(default=5.0, ge=0)  # wait this long for a limit, else move on
    queue_poll_s: float = Field(default=0.05, gt=0)  # re-check a full bulkhead this often
    # -- slow start of a tier balanced by load (resilience/balance.py): a first attempt that finds every
    # deployment not yet measured at its slow-start window waits up to this long for an answer to open
    # one, then goes to the lowest expected delay anyway (0: no slow start).
    slow_start_wait_s: float = Field(default=1.0, ge=0)

    @model_validator(mode="after")
    def _consistent(self) -> "ResiliencePolicy":
        if self.open_max_s < self.open_s:
            raise ValueError(f"open_max_s ({self.open_max_s}) is below open_s ({self.open_s})")
        if self.backoff_max_s < self.backoff_base_s:
            raise ValueError(f"backoff_max_s ({self.backoff_max_s}) is below backoff_base_s ({self.backoff_base_s})")
        for name in ("window_s", "open_s", "open_max_s", "deadline_s", "slow_ttft_s"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name} must be finite")
        return self

    @property
    def probe_lease(self) -> float:
        return self.probe_lease_s if self.probe_lease_s is not None else self.deadline_s

    @property
    def successes_to_close(self) -> int:
        return self.half_open_successes or self.half_open_probes

    @property
    def effective_min_calls(self) -> int:
        # A count window can never hold more calls than its size (resilience4j clamps the same way).
        if self.window_kind == "count":
            return min(self.min_calls, self.window_calls)
        return self.min_calls


def merge(base: ResiliencePolicy, override: Mapping[str, Any] | None, *, key: str = "resilience") -> ResiliencePolicy:
    """Return `base` with the keys of `override` replaced, validated as a whole.

    `key` is the config path of `override` (e.g. "tiers.large.resilience"); a bad value raises
    `ConfigError` naming `key.<field>`.
    """
    if not override:
        return base
    data = base.model_dump()
    data.update(override)
    try:
        return ResiliencePolicy.model_validate(data)
    except ValidationError as exc:
        raise _config_error(exc, key) from None


def policy_from_config(section: Mapping[str, Any] | None, *, key: str = "resilience") -> ResiliencePolicy:
    """Build the default policy from the `[resilience]` table."""
    return merge(default_policy(), section, key=key)


def default_policy() -> ResiliencePolicy:
    """`ResiliencePolicy()`, without building its validator: the defaults are valid (a test checks that they
    equal a validated `ResiliencePolicy()`), and a config that overrides nothing then builds no schema."""
    return ResiliencePolicy.model_construct()


def _config_error(exc: ValidationError, key: str) -> ConfigError:
    first = exc.errors()[0]
    loc = ".".join(str(part) for part in first.get("loc", ()))
    where = f"{key}.{loc}" if loc else key
    message = first.get("msg", "invalid value").removeprefix("Value error, ")
    if first.get("type") == "extra_forbidden":
        name = str(first.get("loc", ("",))[-1])
        hint = did_you_mean(name, ResiliencePolicy.model_fields)
        message = (f"unknown key{hint}" if hint else
                   f"unknown key (known: {', '.join(sorted(ResiliencePolicy.model_fields))})")
    more = len(exc.errors()) - 1
    if more:
        message += f" (and {more} more problem{'s' if more > 1 else ''})"
    return ConfigError(message, key=where)
