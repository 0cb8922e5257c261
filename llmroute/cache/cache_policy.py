"""The `[cache]` config section, a tier's `cache = {...}`, and the per-call decision. Sans-I/O.

A call is looked up in the cache when the cache is on for it (the call's `cache=`, else its tier's
`cache`, else `[cache] enabled`). A call's own `cache=True` (or `cache="always"`) caches that call
whatever its temperature: the caller asked for it. Caching turned on by a tier or by `[cache]` keeps
the reproducible-only rule: only a request that asks for a reproducible answer (`temperature = 0` or
a `seed`) is cached, unless `reproducible_only = false` (in `[cache]` or on the tier). `cache=False`
on a call bypasses the cache (no lookup, no store). A bypass the caller did not ask for is logged
once per (tier, reason) at WARNING (`cache_step.begin`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Literal, Mapping, Union

from pydantic import ConfigDict, Field
from llmroute._runtime.config_model import ConfigModel

from llmroute import errors as E

__all__ = ["CacheConfig", "SemanticConfig", "TierCacheConfig", "CacheSettings", "CallCache", "Decision",
           "pop_cache_args", "decide", "is_reproducible"]

MiB = 1024 * 1024


class _Section(ConfigModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)


class SemanticConfig(_Section):
    """`[cache.semantic]`: serve a paraphrase of a cached question from the cache (opt-in)."""

    enabled: bool = False
    base_url: str | None = None  # an OpenAI-compatible server: POST {base_url}/embeddings
    model: str = "embedding"
    api_key: str | None = None
    # Cosine similarity a hit needs. Chosen from benchmarks/cache_semantic.py (see docs/cache.md).
    threshold: float = Field(default=0.95, gt=0, le=1)
    timeout_s: float = Field(default=2.0, gt=0)
    max_candidates: int = Field(default=2000, ge=1)  # entries compared per lookup, newest first
    # A hit also needs the same numbers and codes ("X200", "100", "v2.1") in both questions: sentence
    # embeddings put "X200" and "X300", or 100 and 1000, close together (docs/cache.md).
    match_numbers: bool = True


class CacheConfig(_Section):
    """`[cache]`: where answers are kept, for how long, and how big they may get."""

    enabled: bool = False
    backend: Literal["memory", "sqlite", "redis"] = "memory"
    path: str = "llmroute-cache.db"  # sqlite: relative to the config file's folder
    url: str | None = None  # redis: redis://host:port/db
    key_prefix: str = "llmroute:cache"
    ttl_s: float = Field(default=3600.0, gt=0)
    max_entries: int = Field(default=10_000, ge=1)
    max_bytes: int = Field(default=64 * MiB, ge=1)
    max_entry_bytes: int = Field(default=1 * MiB, ge=1)
    namespace_keys: List[str] = Field(default_factory=lambda: ["tenant"])
    reproducible_only: bool = True
    timeout_s: float = Field(default=0.25, gt=0)  # redis socket timeout
    retry_after_error_s: float = Field(default=5.0, ge=0)  # a failing backend is skipped this long
    semantic: SemanticConfig = Field(default_factory=SemanticConfig.model_construct)  # the defaults, unvalidated (valid)


class TierCacheConfig(_Section):
    """`[tiers.X] cache = { ttl_s = 3600 }`: the cache for calls that go to this tier."""

    enabled: bool = True
    ttl_s: float | None = Field(default=None, gt=0)
    reproducible_only: bool | None = None
    semantic: bool | None = None


@dataclass(frozen=True)
class CacheSettings:
    """The validated `[cache]` section and the tiers' `cache` tables."""

    config: CacheConfig
    tiers: Mapping[str, TierCacheConfig] = field(default_factory=dict)

    @property
    def in_use(self) -> bool:
        return self.config.enabled or bool(self.tiers)


@dataclass(frozen=True)
class CallCache:
    """What a call asked of the cache: `cache=` (None, True, False or "always") and `cache_ttl_s=`."""

    mode: Union[bool, str] | None = None
    ttl_s: float | None = None


def pop_cache_args(kwargs: Dict[str, Any]) -> tuple[Dict[str, Any], CallCache]:
    """`create()`'s kwargs without `cache`/`cache_ttl_s`, and those two, validated."""
    if "cache" not in kwargs and "cache_ttl_s" not in kwargs:
        return kwargs, CallCache()
    kwargs = dict(kwargs)
    mode = kwargs.pop("cache", None)
    ttl = kwargs.pop("cache_ttl_s", None)
    if mode is not None and mode not in (True, False, "always"):
        raise E.InvalidRequestError('must be True, False or "always"', field="cache")
    if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or ttl <= 0):
        raise E.InvalidRequestError("must be a positive number of seconds", field="cache_ttl_s")
    return kwargs, CallCache(mode, float(ttl) if ttl is not None else None)


def is_reproducible(params: Mapping[str, Any]) -> bool:
    """Temperature 0 or a seed: the caller asked for the same answer each time."""
    temperature = params.get("temperature")
    if params.get("seed") is not None:
        return True
    return temperature is not None and not isinstance(temperature, bool) and temperature == 0


@dataclass(frozen=True)
class Decision:
    """`use`: look up and store; `outcome`: "bypass" when the cache is on but skipped, else None."""

    use: bool
    outcome: str | None
    ttl_s: float = 0.0
    semantic: bool = False
    reason: str = ""


_OFF = Decision(False, None)


def decide(settings: CacheSettings, call: CallCache, tier: str | None, params: Mapping[str, Any]) -> Decision:
    """Whether this call uses the cache, and with what TTL. Without a `[cache]` section, `cache=True`
    uses the defaults (in-process backend)."""
    cfg = settings.config
    tier_cfg = settings.tiers.get(tier) if tier is not None else None
    if call.mode is False:
        return Decision(False, "bypass", reason="cache=False")
    on = call.mode in (True, "always") or (tier_cfg.enabled if tier_cfg is not None else cfg.enabled)
    if not on:
        return _OFF
    reproducible_only = cfg.reproducible_only
    if tier_cfg is not None and tier_cfg.reproducible_only is not None:
        reproducible_only = tier_cfg.reproducible_only
    if call.mode not in (True, "always") and reproducible_only and not is_reproducible(params):
        return Decision(False, "bypass", reason="not reproducible (no temperature=0 and no seed); pass cache=True "
                                                "on the call, or set reproducible_only = false, to cache it anyway")
    ttl = call.ttl_s or (tier_cfg.ttl_s if tier_cfg is not None and tier_cfg.ttl_s else None) or cfg.ttl_s
    semantic = cfg.semantic.enabled
    if tier_cfg is not None and tier_cfg.semantic is not None:
        semantic = tier_cfg.semantic and cfg.semantic.enabled
    return Decision(True, None, ttl_s=ttl, semantic=semantic)
