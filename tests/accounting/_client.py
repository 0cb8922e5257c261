"""Configs for the accounting tests that go through the public client to the loopback servers.

Every config prices every deployment (strict pricing, the default) unless a test turns strictness off
on purpose, and keeps its ledger in memory unless the test gives it a file in `tmp_path`.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from tests.providers.helpers import MESSAGES, NO_RETRIES

__all__ = ["MESSAGES", "MILLION", "TABLE_VERSION", "provider", "config", "per_million"]

MILLION = Decimal(1_000_000)
# The version of llmroute/accounting/prices.toml these tests were hand-computed against.
TABLE_VERSION = "2026.12.04-1"


def provider(kind: str, server: Any, **extra: Any) -> dict[str, Any]:
    """A provider table for a loopback server (its base URL and test key)."""
    out: dict[str, Any] = {"kind": kind, "base_url": server.base_url, **extra}
    key = getattr(server, "default_api_key", None)
    if key and "api_key" not in out:
        out["api_key"] = key
    return out


def config(providers: dict[str, Any], tiers: dict[str, Any], *, pricing: dict[str, Any] | None = None,
           ledger: dict[str, Any] | None = None, **sections: Any) -> dict[str, Any]:
    """A whole config: `tiers` maps a tier name to a list of deployment ids (or a full tier table)."""
    tier_tables = {name: (t if isinstance(t, dict) else {"deployments": list(t)}) for name, t in tiers.items()}
    return {
        "providers": providers,
        "tiers": tier_tables,
        "resilience": dict(NO_RETRIES),
        "pricing": pricing or {},
        "ledger": ledger or {"sink": "memory"},
        **sections,
    }


def per_million(tokens: int, rate: str) -> Decimal:
    """What `tokens` cost at `rate` per million tokens, exactly."""
    return Decimal(tokens) * Decimal(rate) / MILLION
