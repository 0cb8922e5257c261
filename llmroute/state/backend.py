"""The `[state]` section: where limits, budgets and breakers live when several processes share them.

    [state]
    backend = "redis"                   # "local" (default: per process) | "redis"
    url = "redis://127.0.0.1:6379/0"    # ${VAR} allowed; rediss:// for TLS
    key_prefix = "llmroute:"
    on_unavailable = "local"            # "local": fall back to per-process state | "refuse"
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, model_validator
from llmroute._runtime.config_model import ConfigModel

__all__ = ["StateConfig"]


class StateConfig(ConfigModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    backend: Literal["local", "redis"] = "local"
    url: str | None = None
    key_prefix: str = "llmroute:"
    on_unavailable: Literal["local", "refuse"] = "local"
    # Redis Cluster: connect with the cluster client (keys of one scope already share a hash tag).
    cluster: bool = False
    # Each Redis command waits at most this long; past it the call goes on with local state.
    timeout_ms: float = Field(default=100.0, gt=0, le=10_000)
    # While Redis is down, try it again this often (calls in between use local state at once).
    retry_interval_s: float = Field(default=1.0, gt=0, le=300)
    # A concurrency slot of a process that stopped renewing it (killed) is freed after this long.
    lease_s: float = Field(default=30.0, gt=0, le=3600)
    # How often each process reads the fleet's breaker states (an open breaker is seen within it).
    breaker_sync_s: float = Field(default=0.25, gt=0, le=60)

    @model_validator(mode="after")
    def _url(self) -> "StateConfig":
        if self.backend == "redis":
            if not self.url:
                raise ValueError('backend = "redis" needs url (redis://, rediss:// or unix://)')
            if not self.url.startswith(("redis://", "rediss://", "unix://")):
                raise ValueError(f"url must start with redis://, rediss:// or unix://, got {self.url.split(':')[0]}://")
        return self
