"""The `[batch]` section of the config: where jobs are stored, how they are polled and priced.

```toml
[batch]
store = "llmroute-batches.sqlite"   # the job store, relative to the config file, or postgresql://...
                                    # (default with [ledger] sink = "postgres": the ledger's database)
poll_interval_s = 30                # first wait between polls of a platform job
max_poll_interval_s = 600           # backoff ceiling while nothing changes
backoff = 1.5
completion_window = "24h"
on_failure = "fail"                 # resubmit | next_deployment | online | fail
mode = "platform"                   # platform: batch APIs only | local: every request through the online
                                    # path (batch pool, [pools.batch] limits) | auto: local where the
                                    # deployment's platform has no batch API (vLLM, llama.cpp, ...)
max_resubmits = 1
[batch.accounts]                    # Fireworks account id per provider name
fw = "my-account"
[batch.price_factors]               # override the shipped batch factor, per provider or provider:model
sf = 0.5
```
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Literal

from pydantic import ConfigDict, Field, ValidationError
from llmroute._runtime.config_model import ConfigModel

from llmroute import errors as E

if TYPE_CHECKING:
    from llmroute.accounting.ledger import LedgerConfig
    from llmroute.config import Config

__all__ = ["BatchSettings", "FAILURE_POLICIES"]

FAILURE_POLICIES = ("resubmit", "next_deployment", "online", "fail")


class BatchSettings(ConfigModel):
    model_config = ConfigDict(extra="forbid")

    store: str = "llmroute-batches.sqlite"
    poll_interval_s: float = Field(default=30.0, gt=0)
    max_poll_interval_s: float = Field(default=600.0, gt=0)
    backoff: float = Field(default=1.5, ge=1)
    completion_window: str = "24h"
    on_failure: Literal["resubmit", "next_deployment", "online", "fail"] = "fail"
    mode: Literal["platform", "local", "auto"] = "platform"
    max_resubmits: int = Field(default=1, ge=0)
    accounts: Dict[str, str] = Field(default_factory=dict)
    control_urls: Dict[str, str] = Field(default_factory=dict)
    price_factors: Dict[str, float] = Field(default_factory=dict)

    @classmethod
    def from_config(cls, config: Config, *, ledger: LedgerConfig | None = None, **overrides: Any) -> "BatchSettings":
        """`ledger` (the `[ledger]` section): with `sink = "postgres"` and no `[batch] store`, the job
        store is the ledger's PostgreSQL database."""
        raw = dict(getattr(config.raw, "batch", None) or {})
        raw.update({k: v for k, v in overrides.items() if v is not None})
        if "store" not in raw and ledger is not None and ledger.sink == "postgres" and ledger.url:
            raw["store"] = ledger.url
        try:
            settings = cls.model_validate(raw)
        except ValidationError as exc:
            err = exc.errors()[0]
            key = ".".join(str(p) for p in err["loc"])
            raise E.ConfigError(err["msg"], path=config.source, key=f"batch.{key}") from None
        store = Path(settings.store)
        if not settings.store.startswith(("postgresql://", "postgres://")) and not store.is_absolute():
            settings.store = str(Path(config.base_dir) / store)
        return settings
