"""Batch prices: the online price of a deployment times its platform's batch factor. Sans-I/O.

The factors ship in `discounts.toml` beside this module (read on first use, never at import, never
from the network); `[batch.price_factors]` in the config overrides them per provider or deployment.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from decimal import Decimal
from functools import lru_cache
from importlib import resources
from typing import Mapping, Tuple

from llmroute.accounting.prices import Price, to_decimal
from llmroute.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["Discount", "load_discounts", "batch_factor", "batch_price"]


@dataclass(frozen=True)
class Discount:
    kind: str
    factor: Decimal
    models: Tuple[str, ...] = ()
    other_factor: Decimal = Decimal(1)
    cached_factor: Decimal | None = None
    source: str = ""
    confirmed: bool = False
    version: str = ""


@lru_cache(maxsize=1)
def load_discounts() -> Mapping[str, Discount]:
    name = "llmroute/batch/discounts.toml"
    doc = tomllib.loads(resources.files(__package__).joinpath("discounts.toml").read_text(encoding="utf-8"))
    version = str(doc.get("version", ""))
    out = {}
    for i, raw in enumerate(doc.get("discount", [])):
        try:
            cached = raw.get("cached_factor")
            out[raw["kind"]] = Discount(
                kind=raw["kind"], factor=to_decimal(raw["factor"], what="factor"),
                models=tuple(raw.get("models", ())),
                other_factor=to_decimal(raw.get("other_factor", 1), what="other_factor"),
                cached_factor=None if cached is None else to_decimal(cached, what="cached_factor"),
                source=str(raw.get("source", "")), confirmed=bool(raw.get("confirmed", False)), version=version,
            )
        except (KeyError, ValueError) as exc:
            raise ConfigError(str(exc), path=name, key=f"discount[{i}]") from None
    return out


def batch_factor(kind: str, model: str, provider_name: str = "",
                 overrides: Mapping[str, object] = {}) -> Tuple[Decimal, Decimal | None, str]:
    """(factor, cached_factor, source) for a model on a platform; overrides: "provider:model" then "provider"."""
    for key in (f"{provider_name}:{model}", provider_name):
        if key in overrides:
            return to_decimal(overrides[key], what=f"batch.price_factors.{key}"), None, "config"
    discount = load_discounts().get(kind)
    if discount is None:
        return Decimal(1), None, "no batch discount known"
    if discount.models and model not in discount.models:
        return discount.other_factor, None, discount.source
    return discount.factor, discount.cached_factor, discount.source


def batch_price(online: Price | None, *, kind: str, model: str, provider_name: str = "",
                overrides: Mapping[str, object] = {}) -> Price | None:
    """The batch price for an online `Price` (None stays None: unpriced is never 0)."""
    if online is None:
        return None
    factor, cached_factor, source = batch_factor(kind, model, provider_name, overrides)
    batch_input = online.input_per_million * factor
    cached: Decimal | None
    if cached_factor is not None:
        cached = batch_input * cached_factor
    else:
        cached = None if online.cached_input_per_million is None else online.cached_input_per_million * factor
    discount = load_discounts().get(kind)
    version = f"{online.version}+{discount.version if discount and source != 'config' else 'config'}"
    thinking = online.thinking_output_per_million
    return replace(
        online, input_per_million=batch_input, output_per_million=online.output_per_million * factor,
        cached_input_per_million=cached, version=version,
        thinking_output_per_million=None if thinking is None else thinking * factor,
        tiers=tuple(t.scaled(factor) for t in online.tiers),
        source=f"{online.source} | batch x{factor}: {source}", note=f"batch price ({factor} of online)",
    )
