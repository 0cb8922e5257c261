"""Prices: the table shipped with the package, the config's overrides, and the lookup over both.

A `Price` is a value: per-million rates for uncached input, cached input and output tokens, a
currency, and where the figure came from (source, dates, confirmed or not, table version). The
shipped table is `prices.toml` next to this module; it is read lazily on first lookup (never at
import, never from the network). `PricingConfig` is the `[pricing]` section of the config;
`PriceBook` joins both and answers "what does this deployment cost?" and, at config load, "is
every configured deployment priced?" (strict by default: an unpriced deployment is a
`ConfigError`; with `strict = false` its cost is `None` and flagged, never 0).

Lookup order for a deployment (provider name P, platform kind K, region R, model M):
  1. `[pricing."P:M"]` in the config          (exact override)
  2. `[pricing."P:*"]` in the config          (every model of that provider, e.g. a self-hosted box)
  3. the shipped entry for (K, R, M)          (region-specific: SiliconFlow, Bailian)
  4. the shipped entry for (K, M) with no region
Self-hosted kinds have no shipped prices: their cost is your hardware, so price them in the config.

Exchange rates (`[pricing.exchange_rates]`) use one convention: `CNY = 0.14` means one CNY is
worth 0.14 units of `reporting_currency`. The reporting currency itself is 1.

This module does no I/O except reading its own data file on first use, and keeps no clock.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from importlib import resources
from typing import Any, Iterable, Literal, Mapping, NamedTuple, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from llmroute.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = [
    "Currency",
    "CURRENCIES",
    "Price",
    "PriceTable",
    "PriceOverride",
    "PricingConfig",
    "ExchangeRates",
    "DeploymentRef",
    "PriceBook",
    "load_price_table",
    "normalize_region",
    "to_decimal",
]

Currency = Literal["USD", "CNY"]
CURRENCIES: tuple[str, ...] = ("USD", "CNY")
MILLION = Decimal(1_000_000)

# Region spellings a config may use, per kind -> the region key the price table uses.
# The canonical names are the ones llmroute/providers/registry.py uses for base URLs.
_REGION_ALIASES: dict[str, dict[str, str]] = {
    "siliconflow": {"cn": "cn", "china": "cn", "intl": "intl", "com": "intl", "global": "intl", "international": "intl"},
    "bailian": {
        "cn-beijing": "cn-beijing",
        "cn": "cn-beijing",
        "beijing": "cn-beijing",
        "china": "cn-beijing",
        "singapore": "singapore",
        "sg": "singapore",
        "intl": "singapore",
        "ap-southeast-1": "singapore",
        "us": "us",
        "us-virginia": "us",
        "us-east-1": "us",
        "virginia": "us",
    },
}


def normalize_region(kind: str, region: str | None) -> str | None:
    """The price table's name for `region` on platform `kind` (None stays None)."""
    if region is None:
        return None
    r = region.strip().lower()
    return _REGION_ALIASES.get(kind, {}).get(r, r)


def to_decimal(value: Any, *, what: str = "price") -> Decimal:
    """A Decimal from a TOML/JSON number or string, exact for what the user typed.

    Floats go through `str` (shortest repr), so `0.88` becomes Decimal("0.88"), not the binary
    approximation 0.88000000000000000444...
    """
    if isinstance(value, bool):
        raise ValueError(f"{what} must be a number, not a boolean")
    if isinstance(value, Decimal):
        d = value
    elif isinstance(value, float):
        d = Decimal(repr(value))
    elif isinstance(value, (int, str)):
        try:
            d = Decimal(str(value).strip())
        except InvalidOperation:
            raise ValueError(f"{what} must be a number, got {value!r}") from None
    else:
        raise ValueError(f"{what} must be a number, got {type(value).__name__}")
    if not d.is_finite():
        raise ValueError(f"{what} must be finite, got {value!r}")
    return d


@dataclass(frozen=True)
class Price:
    """Per-million-token rates for one model on one platform (or one configured deployment)."""

    input_per_million: Decimal
    output_per_million: Decimal
    # None: cached input tokens cost the input price (the platform has no discount, or we do not know it).
    cached_input_per_million: Optional[Decimal]
    currency: str
    version: str
    source: str = ""
    read_on: str = ""
    source_date: str = ""
    confirmed: bool = False
    model: str = ""
    kind: str | None = None
    region: str | None = None
    model_class: str | None = None
    # "table" for the shipped file, "config" for an override.
    origin: str = "table"
    note: str = ""
    # "chat" or "embedding" (billed on input tokens only).
    mode: str = "chat"
    # The platform's asynchronous batch API rates; None: not known or not offered.
    batch_input_per_million: Optional[Decimal] = None
    batch_output_per_million: Optional[Decimal] = None

    @property
    def cached_rate(self) -> Decimal:
        """The rate cached input tokens are billed at."""
        return self.input_per_million if self.cached_input_per_million is None else self.cached_input_per_million


@dataclass(frozen=True)
class PriceTable:
    """The shipped table: its version, the date it was read, and its entries."""

    version: str
    read_on: str
    entries: tuple[Price, ...]
    # (kind, region or None, model) -> Price
    index: Mapping[tuple[str, str | None, str], Price] = field(default_factory=dict)
    # Platform regions the table deliberately leaves empty: (kind, region) -> why (`[[missing]]` entries).
    missing: Mapping[tuple[str, str | None], str] = field(default_factory=dict)
    # Models a `[[missing]]` entry names (`models = [...]`): (kind, region, model) -> why nothing ships for it.
    missing_models: Mapping[tuple[str, str | None, str], str] = field(default_factory=dict)

    def get(self, kind: str, region: str | None, model: str) -> Price | None:
        region = normalize_region(kind, region)
        if region is not None:
            hit = self.index.get((kind, region, model))
            if hit is not None:
                return hit
        return self.index.get((kind, None, model))


_TABLE_KEYS = {
    "kind", "region", "model", "class", "mode", "input_per_million", "output_per_million",
    "cached_input_per_million", "batch_input_per_million", "batch_output_per_million",
    "currency", "confirmed", "source", "source_date", "note",
}  # fmt: skip
_MODES = ("chat", "embedding")


def parse_price_table(text: str, *, name: str = "prices.toml") -> PriceTable:
    """Parse a price table in the shipped format (see prices.toml). Raises ConfigError naming the entry."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"not valid TOML: {e}", path=name) from None
    version = doc.get("version")
    read_on = str(doc.get("read_on", ""))
    if not isinstance(version, str) or not version:
        raise ConfigError("the price table has no `version`", path=name, key="version")
    entries: list[Price] = []
    index: dict[tuple[str, str | None, str], Price] = {}
    for i, raw in enumerate(doc.get("price", [])):
        key = f"price[{i}]"
        unknown = set(raw) - _TABLE_KEYS
        if unknown:
            raise ConfigError(f"unknown keys {sorted(unknown)}", path=name, key=key)
        try:
            kind, model = raw["kind"], raw["model"]
            currency = raw["currency"]
            if currency not in CURRENCIES:
                raise ValueError(f"currency must be one of {CURRENCIES}, got {currency!r}")
            cached = raw.get("cached_input_per_million")
            mode = raw.get("mode", "chat")
            if mode not in _MODES:
                raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")
            if not str(raw.get("source", "")).strip():
                raise ValueError("every entry needs a `source` (the page its figures come from)")
            batch_in, batch_out = raw.get("batch_input_per_million"), raw.get("batch_output_per_million")
            price = Price(
                input_per_million=_non_negative(raw["input_per_million"], "input_per_million"),
                output_per_million=_non_negative(raw["output_per_million"], "output_per_million"),
                cached_input_per_million=None if cached is None else _non_negative(cached, "cached_input_per_million"),
                currency=currency,
                version=version,
                source=str(raw.get("source", "")),
                read_on=read_on,
                source_date=str(raw.get("source_date", "")),
                confirmed=bool(raw.get("confirmed", False)),
                model=model,
                kind=kind,
                region=normalize_region(kind, raw.get("region")),
                model_class=raw.get("class"),
                origin="table",
                note=str(raw.get("note", "")),
                mode=mode,
                batch_input_per_million=None if batch_in is None else _non_negative(batch_in, "batch_input_per_million"),
                batch_output_per_million=None if batch_out is None else _non_negative(batch_out, "batch_output_per_million"),
            )
        except KeyError as e:
            raise ConfigError(f"missing key {e.args[0]!r}", path=name, key=key) from None
        except ValueError as e:
            raise ConfigError(str(e), path=name, key=key) from None
        k = (price.kind or "", price.region, price.model)
        if k in index:
            raise ConfigError(f"duplicate entry for {k}", path=name, key=key)
        index[k] = price
        entries.append(price)
    missing: dict[tuple[str, str | None], str] = {}
    missing_models: dict[tuple[str, str | None, str], str] = {}
    for i, raw in enumerate(doc.get("missing", [])):
        models = raw.get("models", [])
        if (set(raw) - {"kind", "region", "reason", "models"} or "kind" not in raw or "reason" not in raw
                or not isinstance(models, list) or not all(isinstance(m, str) and m for m in models)):
            raise ConfigError("a [[missing]] entry has kind, optional region, optional models (a list of "
                              "model ids) and reason", path=name, key=f"missing[{i}]")
        region = normalize_region(raw["kind"], raw.get("region"))
        for model in models:
            if (raw["kind"], region, model) in index:
                raise ConfigError(f"{model!r} is both priced and listed as missing", path=name, key=f"missing[{i}]")
            missing_models[(raw["kind"], region, model)] = str(raw["reason"])
        if not models:
            missing[(raw["kind"], region)] = str(raw["reason"])
    return PriceTable(version=version, read_on=read_on, entries=tuple(entries), index=index, missing=missing,
                      missing_models=missing_models)


@lru_cache(maxsize=1)
def load_price_table() -> PriceTable:
    """The table shipped in the package, read once on first use."""
    text = resources.files(__package__).joinpath("prices.toml").read_text(encoding="utf-8")
    return parse_price_table(text, name="llmroute/accounting/prices.toml")


def _non_negative(value: Any, what: str) -> Decimal:
    d = to_decimal(value, what=what)
    if d < 0:
        raise ValueError(f"{what} must be >= 0, got {value!r}")
    return d


class PriceOverride(BaseModel):
    """One `[pricing."provider:model"]` table in the config."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    input_per_million: Decimal
    output_per_million: Decimal
    # Absent: cached input tokens cost the input price.
    cached_input_per_million: Optional[Decimal] = None
    currency: Currency = "USD"
    # Model class for `llmroute report --reprice` ("7b", "70b"); optional.
    model_class: Optional[str] = Field(default=None, alias="class")

    @field_validator("input_per_million", "output_per_million", "cached_input_per_million", mode="before")
    @classmethod
    def _exact(cls, v: Any, info: Any) -> Any:
        return None if v is None else _non_negative(v, info.field_name)


class PricingConfig(BaseModel):
    """The `[pricing]` section: strictness, reporting currency, exchange rates and per-deployment prices.

    The per-deployment tables sit directly under `[pricing]` with quoted keys holding a colon
    (`[pricing."together:my-finetune"]`); they are collected into `prices`. Any other unknown key is
    an error.
    """

    model_config = ConfigDict(extra="forbid")

    strict: bool = True
    reporting_currency: Optional[Currency] = None
    # Value of one unit of the keyed currency in `reporting_currency` (CNY = 0.14: 1 CNY = 0.14 USD).
    exchange_rates: dict[str, Decimal] = Field(default_factory=dict)
    prices: dict[str, PriceOverride] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _collect_deployment_tables(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        out: dict[str, Any] = {}
        prices: dict[str, Any] = dict(data.get("prices") or {})
        for key, value in data.items():
            if key == "prices":
                continue
            if ":" in key:
                prices[key] = value
            else:
                out[key] = value
        out["prices"] = prices
        return out

    @field_validator("prices")
    @classmethod
    def _keys(cls, v: dict[str, PriceOverride]) -> dict[str, PriceOverride]:
        for key in v:
            provider, _, model = key.partition(":")
            if not provider or not model:
                raise ValueError(f'price key {key!r} must be "<provider name>:<model id>" (or "<provider>:*")')
        return v

    @field_validator("exchange_rates", mode="before")
    @classmethod
    def _rates(cls, v: Any) -> Any:
        if not isinstance(v, Mapping):
            return v
        out = {}
        for cur, rate in v.items():
            if cur not in CURRENCIES:
                raise ValueError(f"exchange_rates: unknown currency {cur!r} (known: {', '.join(CURRENCIES)})")
            d = to_decimal(rate, what=f"exchange_rates.{cur}")
            if d <= 0:
                raise ValueError(f"exchange_rates.{cur} must be > 0, got {rate!r}")
            out[cur] = d
        return out

    @model_validator(mode="after")
    def _rates_need_a_target(self) -> "PricingConfig":
        if self.exchange_rates and self.reporting_currency is None:
            raise ValueError("exchange_rates is set but reporting_currency is not")
        return self

    def rates(self) -> "ExchangeRates | None":
        if self.reporting_currency is None:
            return None
        return ExchangeRates(self.reporting_currency, self.exchange_rates)


@dataclass(frozen=True)
class ExchangeRates:
    """`rates[X]` is the value of 1 X in `reporting_currency`; the reporting currency is 1."""

    reporting_currency: str
    rates: Mapping[str, Decimal] = field(default_factory=dict)

    def rate(self, currency: str) -> Decimal | None:
        if currency == self.reporting_currency:
            return Decimal(1)
        return self.rates.get(currency)

    def convert(self, amount: Decimal, from_currency: str, to_currency: str | None = None) -> Decimal | None:
        """`amount` in `to_currency` (default: the reporting currency), or None when a rate is missing."""
        to_currency = to_currency or self.reporting_currency
        if from_currency == to_currency:
            return amount
        a, b = self.rate(from_currency), self.rate(to_currency)
        if a is None or b is None:
            return None
        return amount * a / b


class DeploymentRef(NamedTuple):
    """A configured deployment, as `check_priced` needs it. `key` is its config key path."""

    deployment: str  # "provider:model"
    provider: str  # provider name in [providers]
    kind: str  # platform kind
    region: str | None
    model: str
    key: str  # e.g. 'tiers.small.deployments[0]'


class PriceBook:
    """The shipped table plus the config's overrides. Immutable after construction; thread-safe."""

    def __init__(self, config: PricingConfig | None = None, table: PriceTable | None = None) -> None:
        self.config = config or PricingConfig()
        self.table = table or load_price_table()
        self._overrides: dict[str, Price] = {
            key: _override_price(key, ov) for key, ov in self.config.prices.items()
        }

    @property
    def strict(self) -> bool:
        return self.config.strict

    @property
    def version(self) -> str:
        return self.table.version

    def rates(self) -> ExchangeRates | None:
        return self.config.rates()

    def lookup(self, provider_name: str, provider_kind: str, region: str | None, model: str) -> Price | None:
        """The price of `model` on that provider, or None when nothing prices it."""
        hit = self._overrides.get(f"{provider_name}:{model}") or self._overrides.get(f"{provider_name}:*")
        if hit is not None:
            return hit
        return self.table.get(provider_kind, region, model)

    def check_priced(
        self, deployments: Iterable[DeploymentRef], strict: bool | None = None, *, providers: Iterable[str] | None = None
    ) -> None:
        """Raise ConfigError naming the first unpriced deployment (when strict), or an override
        naming no configured provider (`providers`: all configured provider names; default: those
        the deployments use). `strict` defaults to `pricing.strict`."""
        strict = self.strict if strict is None else strict
        deployments = list(deployments)
        known = set(providers) if providers is not None else {d.provider for d in deployments}
        for key in self.config.prices:
            provider = key.partition(":")[0]
            if (known or providers is not None) and provider not in known:
                raise ConfigError(
                    f"names provider {provider!r}, which is not configured "
                    f"(known: {', '.join(sorted(known)) or 'none'})",
                    key=f'pricing."{key}"',
                )
        if not strict:
            return
        for d in deployments:
            if self.lookup(d.provider, d.kind, d.region, d.model) is None:
                where = f" in region {d.region!r}" if d.region else ""
                raise ConfigError(
                    f"deployment {d.deployment!r} ({d.kind}{where}, model {d.model!r}) has no price"
                    f"{self._missing_note(d.kind, d.region, d.model)}. "
                    f'Add [pricing."{d.provider}:{d.model}"] with input_per_million and output_per_million '
                    f"(0 for hardware you already pay for), or set pricing.strict = false "
                    f"to run it with cost None, flagged",
                    key=d.key,
                )

    def check_call_priced(self, deployment: DeploymentRef) -> None:
        """The same rule for a deployment named in `create(model="provider:model")` as for a configured
        one: with `strict`, no price is a ConfigError naming the model and the fix, before anything is sent."""
        if not self.strict or self.lookup(deployment.provider, deployment.kind, deployment.region,
                                          deployment.model) is not None:
            return
        where = f" in region {deployment.region!r}" if deployment.region else ""
        raise ConfigError(
            f"model {deployment.deployment!r} ({deployment.kind}{where}) has no price"
            f"{self._missing_note(deployment.kind, deployment.region, deployment.model)}, so the call was not sent. "
            f'Add [pricing."{deployment.provider}:{deployment.model}"] with input_per_million and '
            f"output_per_million, or set pricing.strict = false to run it with cost None, flagged "
            f"(`llmroute prices {deployment.model}` lists what ships)",
            key=f'pricing."{deployment.deployment}"',
        )

    def _missing_note(self, kind: str, region: str | None, model: str | None = None) -> str:
        region = normalize_region(kind, region)
        where = f"{kind}/{region}" if region else kind
        why = self.table.missing_models.get((kind, region, model or "")) if model else None
        if why:
            return f" (no shipped price for {model} on {where}: {why})"
        why = self.table.missing.get((kind, region))
        return f" (nothing ships for {where}: {why})" if why else ""

    def class_of(self, model: str, provider_name: str | None = None) -> str | None:
        """The model class ("7b", "70b") of `model`: from a config override, else any table entry."""
        if provider_name is not None:
            ov = self._overrides.get(f"{provider_name}:{model}")
            if ov is not None and ov.model_class:
                return ov.model_class
        for price in self.table.entries:
            if price.model == model and price.model_class:
                return price.model_class
        return None

    def price_for_class(self, kind: str, model_class: str, region: str | None = None) -> Price | None:
        """The price a platform charges for a model of `model_class` (confirmed entries first).

        With no region, a region-priced kind answers from its first region in the table.
        """
        region = normalize_region(kind, region)
        candidates = [
            p
            for p in self.table.entries
            if p.kind == kind and p.model_class == model_class and (region is None or p.region in (region, None))
        ]
        if not candidates:
            return None
        # Confirmed first, then newest (table order within a kind lists current models first).
        return sorted(candidates, key=lambda p: not p.confirmed)[0]


def _override_price(key: str, ov: PriceOverride) -> Price:
    model = key.partition(":")[2]
    canon = json.dumps(
        [str(ov.input_per_million), str(ov.output_per_million), str(ov.cached_input_per_million), ov.currency],
        separators=(",", ":"),
    )
    # The version changes whenever the configured figures do, so ledger rows say which price applied.
    digest = hashlib.sha256(canon.encode()).hexdigest()[:8]
    return Price(
        input_per_million=ov.input_per_million,
        output_per_million=ov.output_per_million,
        cached_input_per_million=ov.cached_input_per_million,
        currency=ov.currency,
        version=f"config:{digest}",
        source=f'config [pricing."{key}"]',
        confirmed=True,
        model=model,
        model_class=ov.model_class,
        origin="config",
    )
