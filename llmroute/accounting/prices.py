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

This module does no I/O except reading its own data file on first use and the team catalogue files a
config names (`[pricing] catalogue`, read once when the `PriceBook` is built), and keeps no clock.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping, NamedTuple, Sequence

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from llmroute.errors import ConfigError

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
    "PriceTier",
    "parse_price_table",
    "layer_tables",
    "read_catalogue_file",
    "load_catalogue",
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


# The optional per-million rates an entry (and each of its input-length tiers) may carry, besides
# input and output. Absent means the fallback `Price` documents (cached: input; thinking: output; ...).
_OPTIONAL_RATES = (
    "cached_input_per_million", "explicit_cached_input_per_million", "cache_write_per_million",
    "thinking_output_per_million", "batch_input_per_million", "batch_output_per_million",
)


@dataclass(frozen=True)
class PriceTier:
    """The rates of one input-length tier: they apply when the request's prompt tokens are > `above`.

    A platform that prices by prompt length (Bailian: 0-128K, 128K-256K, 256K-1M) lists its higher
    tiers here; the entry's own rates are the first tier. Every rate of the tier applies to the whole
    request (input and output alike), as the platforms define it; an optional rate a tier leaves out
    falls back within the tier (cached -> the tier's input, thinking -> the tier's output, ...).
    """

    above: int
    input_per_million: Decimal
    output_per_million: Decimal
    cached_input_per_million: Decimal | None = None
    explicit_cached_input_per_million: Decimal | None = None
    cache_write_per_million: Decimal | None = None
    thinking_output_per_million: Decimal | None = None
    batch_input_per_million: Decimal | None = None
    batch_output_per_million: Decimal | None = None

    def scaled(self, factor: Decimal) -> "PriceTier":
        """Every rate times `factor` (a batch discount)."""
        def times(value: Decimal | None) -> Decimal | None:
            return None if value is None else value * factor

        return PriceTier(
            above=self.above, input_per_million=self.input_per_million * factor,
            output_per_million=self.output_per_million * factor,
            **{name: times(getattr(self, name)) for name in _OPTIONAL_RATES},
        )


@dataclass(frozen=True)
class Price:
    """Per-million-token rates for one model on one platform (or one configured deployment)."""

    input_per_million: Decimal
    output_per_million: Decimal
    # None: cached input tokens cost the input price (the platform has no discount, or we do not know it).
    cached_input_per_million: Decimal | None
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
    batch_input_per_million: Decimal | None = None
    batch_output_per_million: Decimal | None = None
    # Explicit (requested) context-cache hits, where they differ from implicit ones (Bailian: 10% of
    # input against 20%); None: the cached rate.
    explicit_cached_input_per_million: Decimal | None = None
    # Tokens written to an explicit context cache (Bailian: 125% of input); None: the input rate.
    cache_write_per_million: Decimal | None = None
    # Output when thinking is on (the usage reports reasoning tokens or the request enabled thinking);
    # None: the output rate.
    thinking_output_per_million: Decimal | None = None
    # Higher input-length tiers, ascending by `above`; the rates above are the first tier.
    tiers: tuple[PriceTier, ...] = ()
    # The `above` of the tier these rates are (set on the Price `for_prompt` returns); None: first tier.
    tier_above: int | None = None
    # The file the entry came from (the shipped table, or a team catalogue) and the entry's line in it.
    origin_file: str = ""
    line: int = 0

    @property
    def cached_rate(self) -> Decimal:
        """The rate cached input tokens are billed at."""
        return self.input_per_million if self.cached_input_per_million is None else self.cached_input_per_million

    @property
    def explicit_cached_rate(self) -> Decimal:
        """The rate explicit context-cache hits are billed at."""
        e = self.explicit_cached_input_per_million
        return self.cached_rate if e is None else e

    @property
    def cache_write_rate(self) -> Decimal:
        """The rate tokens written to an explicit context cache are billed at."""
        w = self.cache_write_per_million
        return self.input_per_million if w is None else w

    @property
    def thinking_output_rate(self) -> Decimal:
        """The rate output is billed at when thinking is on."""
        t = self.thinking_output_per_million
        return self.output_per_million if t is None else t

    def for_prompt(self, prompt_tokens: int) -> "Price":
        """The rates that apply to a request of `prompt_tokens` input tokens: the highest tier whose
        `above` the prompt exceeds, else these rates. Pure; the result has no tiers of its own."""
        tier = None
        for t in self.tiers:
            if prompt_tokens > t.above:
                tier = t
        if tier is None:
            return self
        rates = {name: getattr(tier, name) for name in ("input_per_million", "output_per_million", *_OPTIONAL_RATES)}
        return replace(self, tiers=(), tier_above=tier.above, **rates)


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
    "explicit_cached_input_per_million", "cache_write_per_million", "thinking_output_per_million", "tiers",
    "currency", "confirmed", "source", "source_date", "note",
}  # fmt: skip
_TIER_KEYS = {"above", "input_per_million", "output_per_million", *_OPTIONAL_RATES}
_MODES = ("chat", "embedding")


class _Lines:
    """Where each `[[price]]`, `[[price.tiers]]` and `[[missing]]` table starts in a TOML text, and where a
    key sits in one, so an error can say "file:line". A plain scan of the lines, no second TOML parser."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        self.heads: dict[str, list[int]] = {"price": [], "missing": []}
        self.tiers: list[list[int]] = []  # per [[price]]: the line of each of its [[price.tiers]]
        for n, raw in enumerate(self.lines, start=1):
            line = raw.strip().replace(" ", "")
            if line.startswith("[[price]]"):
                self.heads["price"].append(n)
                self.tiers.append([])
            elif line.startswith("[[price.tiers]]") and self.tiers:
                self.tiers[-1].append(n)
            elif line.startswith("[[missing]]"):
                self.heads["missing"].append(n)

    def _end(self, start: int) -> int:
        for n in range(start + 1, len(self.lines) + 1):
            if self.lines[n - 1].lstrip().startswith("["):
                return n
        return len(self.lines) + 1

    def of(self, table: str, index: int, key: str | None = None, tier: int | None = None) -> int:
        """The line of `key` in the `index`-th table (or its `tier`-th tier), else the table's header; 0: unknown."""
        heads = self.heads.get(table, [])
        if index >= len(heads):
            return 0
        start = heads[index]
        if tier is not None and index < len(self.tiers) and tier < len(self.tiers[index]):
            start = self.tiers[index][tier]
        if key:
            for n in range(start + 1, self._end(start)):
                if self.lines[n - 1].lstrip().startswith((f"{key} ", f"{key}=")):
                    return n
        return start


def _where(name: str, line: int) -> str:
    return f"{name}:{line}" if line else name


def _rate(raw: Mapping[str, Any], key: str) -> Decimal | None:
    value = raw.get(key)
    return None if value is None else _non_negative(value, key)


def _parse_tiers(raw: Any, lines: _Lines, i: int, name: str) -> tuple[PriceTier, ...]:
    if not isinstance(raw, list):
        raise ConfigError("`tiers` must be an array of tables ([[price.tiers]])",
                          path=_where(name, lines.of("price", i, "tiers")), key=f"price[{i}].tiers")
    tiers: list[PriceTier] = []
    for j, t in enumerate(raw):
        key = f"price[{i}].tiers[{j}]"
        if not isinstance(t, Mapping):
            raise ConfigError("a tier is a table", path=_where(name, lines.of("price", i, tier=j)), key=key)
        unknown = set(t) - _TIER_KEYS
        if unknown:
            raise ConfigError(f"unknown keys {sorted(unknown)} (a tier takes {', '.join(sorted(_TIER_KEYS))})",
                              path=_where(name, lines.of("price", i, tier=j)), key=key)
        field_name = "above"
        try:
            above = t["above"]
            if type(above) is not int or above <= 0:
                raise ValueError(f"above must be a whole number of prompt tokens > 0, got {above!r}")
            if tiers and above <= tiers[-1].above:
                raise ValueError(f"tiers must ascend: above = {above} follows above = {tiers[-1].above}")
            rates: dict[str, Any] = {}
            for field_name in ("input_per_million", "output_per_million", *_OPTIONAL_RATES):
                rates[field_name] = _rate(t, field_name)
                if rates[field_name] is None and field_name in ("input_per_million", "output_per_million"):
                    raise ValueError(f"a tier needs {field_name}")
            tiers.append(PriceTier(above=above, **rates))
        except KeyError:
            raise ConfigError("a tier needs `above` (the prompt tokens it starts after)",
                              path=_where(name, lines.of("price", i, tier=j)), key=key) from None
        except ValueError as e:
            raise ConfigError(str(e), path=_where(name, lines.of("price", i, field_name, tier=j)), key=key) from None
    return tuple(tiers)


def parse_price_table(text: str, *, name: str = "prices.toml") -> PriceTable:
    """Parse a price table in the shipped format (see prices.toml). Raises ConfigError naming the file,
    the line and the entry (`prices.toml:412: price[31].output_per_million: must be >= 0`)."""
    if sys.version_info >= (3, 11):
        import tomllib  # loaded with the first table read, not with the pricing section
    else:  # pragma: no cover
        import tomli as tomllib
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"not valid TOML: {e}", path=name) from None
    lines = _Lines(text)
    unknown_top = set(doc) - {"version", "read_on", "price", "missing"}
    if unknown_top:
        raise ConfigError(f"unknown top-level keys {sorted(unknown_top)} (a price table has version, read_on, "
                          "[[price]] and [[missing]])", path=name)
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
            raise ConfigError(f"unknown keys {sorted(unknown)}", path=_where(name, lines.of("price", i)), key=key)
        field_name: str | None = None
        try:
            kind, model = raw["kind"], raw["model"]
            currency = raw["currency"]
            field_name = "currency"
            if currency not in CURRENCIES:
                raise ValueError(f"currency must be one of {CURRENCIES}, got {currency!r}")
            mode = raw.get("mode", "chat")
            field_name = "mode"
            if mode not in _MODES:
                raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")
            rates: dict[str, Any] = {}
            for field_name in ("input_per_million", "output_per_million", *_OPTIONAL_RATES):
                if field_name in ("input_per_million", "output_per_million"):
                    rates[field_name] = _non_negative(raw[field_name], field_name)
                else:
                    rates[field_name] = _rate(raw, field_name)
            field_name = "source"
            if not str(raw.get("source", "")).strip():
                raise ValueError("every entry needs a `source` (the page its figures come from)")
            field_name = None
            tiers = _parse_tiers(raw["tiers"], lines, i, name) if "tiers" in raw else ()
            price = Price(
                **rates,
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
                tiers=tiers,
                origin_file=name,
                line=lines.of("price", i),
            )
        except KeyError as e:
            raise ConfigError(f"missing key {e.args[0]!r}", path=_where(name, lines.of("price", i)), key=key) from None
        except ValueError as e:
            raise ConfigError(str(e), path=_where(name, lines.of("price", i, field_name)), key=key) from None
        k = (price.kind or "", price.region, price.model)
        if k in index:
            first = index[k].line
            raise ConfigError(f"duplicate entry for {k} (first at line {first})",
                              path=_where(name, lines.of("price", i)), key=key)
        index[k] = price
        entries.append(price)
    missing: dict[tuple[str, str | None], str] = {}
    missing_models: dict[tuple[str, str | None, str], str] = {}
    for i, raw in enumerate(doc.get("missing", [])):
        models = raw.get("models", [])
        where = _where(name, lines.of("missing", i))
        if (set(raw) - {"kind", "region", "reason", "models"} or "kind" not in raw or "reason" not in raw
                or not isinstance(models, list) or not all(isinstance(m, str) and m for m in models)):
            raise ConfigError("a [[missing]] entry has kind, optional region, optional models (a list of "
                              "model ids) and reason", path=where, key=f"missing[{i}]")
        region = normalize_region(raw["kind"], raw.get("region"))
        for model in models:
            if (raw["kind"], region, model) in index:
                raise ConfigError(f"{model!r} is both priced and listed as missing", path=where, key=f"missing[{i}]")
            missing_models[(raw["kind"], region, model)] = str(raw["reason"])
        if not models:
            missing[(raw["kind"], region)] = str(raw["reason"])
    return PriceTable(version=version, read_on=read_on, entries=tuple(entries), index=index, missing=missing,
                      missing_models=missing_models)


def layer_tables(base: PriceTable, *layers: PriceTable) -> PriceTable:
    """`base` with each layer laid over it in order: an entry of a layer replaces the entry of the same
    (kind, region, model) below it, a new one is added; each keeps its own file's `version`, so the
    ledger's `price_version` says which file priced a call. A layer's `[[missing]]` entries are added,
    and a model a layer prices stops being "missing". The result's version joins the files' versions."""
    if not layers:
        return base
    index = dict(base.index)
    missing = dict(base.missing)
    missing_models = dict(base.missing_models)
    for layer in layers:
        index.update(layer.index)
        missing.update(layer.missing)
        missing_models.update(layer.missing_models)
    for k in index:
        missing_models.pop(k, None)
    version = "+".join([base.version, *(layer.version for layer in layers)])
    read_on = max([base.read_on, *(layer.read_on for layer in layers)])
    return PriceTable(version=version, read_on=read_on, entries=tuple(index.values()), index=index,
                      missing=missing, missing_models=missing_models)


def read_catalogue_file(path: str | Path, *, base_dir: str | Path | None = None) -> PriceTable:
    """Parse one catalogue file (relative to `base_dir` when relative). A file that cannot be read or
    parsed is a ConfigError naming it (and the line, for a bad entry)."""
    p = Path(path)
    if not p.is_absolute() and base_dir is not None:
        p = Path(base_dir) / p
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read the price catalogue: {e.strerror or e}", path=str(p),
                          key="pricing.catalogue") from None
    except UnicodeDecodeError:
        raise ConfigError("the price catalogue is not UTF-8 text", path=str(p), key="pricing.catalogue") from None
    return parse_price_table(text, name=str(p))


def load_catalogue(paths: Sequence[str], *, base_dir: str | Path | None = None,
                   base: PriceTable | None = None) -> PriceTable:
    """The shipped table (or `base`) with every file of `paths` laid over it, in order."""
    layers = [read_catalogue_file(path, base_dir=base_dir) for path in paths]
    return layer_tables(base or load_price_table(), *layers)


@lru_cache(maxsize=1)
def load_price_table() -> PriceTable:
    """The table shipped in the package, read once on first use."""
    from importlib import resources  # only when the shipped table is first needed

    text = resources.files(__package__).joinpath("prices.toml").read_text(encoding="utf-8")
    return parse_price_table(text, name="llmroute/accounting/prices.toml")


def _non_negative(value: Any, what: str) -> Decimal:
    d = to_decimal(value, what=what)
    if d < 0:
        raise ValueError(f"{what} must be >= 0, got {value!r}")
    return d


class PriceOverride(BaseModel):
    """One `[pricing."provider:model"]` table in the config."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)

    input_per_million: Decimal
    output_per_million: Decimal
    # Absent: cached input tokens cost the input price.
    cached_input_per_million: Decimal | None = None
    # Optional, as in the price table (docs/pricing.md); input-length tiers go in a team catalogue.
    explicit_cached_input_per_million: Decimal | None = None
    cache_write_per_million: Decimal | None = None
    thinking_output_per_million: Decimal | None = None
    currency: Currency = "USD"
    # Model class for `llmroute report --reprice` ("7b", "70b"); optional.
    model_class: str | None = Field(default=None, alias="class")

    @field_validator("input_per_million", "output_per_million", "cached_input_per_million",
                     "explicit_cached_input_per_million", "cache_write_per_million", "thinking_output_per_million",
                     mode="before")
    @classmethod
    def _exact(cls, v: Any, info: Any) -> Any:
        return None if v is None else _non_negative(v, info.field_name)


class PricingConfig(BaseModel):
    """The `[pricing]` section: strictness, reporting currency, exchange rates and per-deployment prices.

    The per-deployment tables sit directly under `[pricing]` with quoted keys holding a colon
    (`[pricing."together:my-finetune"]`); they are collected into `prices`. Any other unknown key is
    an error.
    """

    model_config = ConfigDict(extra="forbid", defer_build=True)

    strict: bool = True
    # Team price files laid over the shipped table, in order (same format as prices.toml); relative
    # paths are read from the config file's folder. `llmroute prices check FILE` lints one.
    catalogue: list[str] = Field(default_factory=list)
    reporting_currency: Currency | None = None
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

    @field_validator("catalogue", mode="before")
    @classmethod
    def _catalogue(cls, v: Any) -> Any:
        if isinstance(v, str):
            v = [v]
        if not isinstance(v, list) or not all(isinstance(x, str) and x.strip() for x in v):
            raise ValueError('catalogue must be a file name or a list of file names (catalogue = "prices.toml")')
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

    def __init__(self, config: PricingConfig | None = None, table: PriceTable | None = None, *,
                 base_dir: str | None = None) -> None:
        """`table` defaults to the shipped one with the config's `catalogue` files laid over it (read here,
        relative to `base_dir`: the config file's folder; a bad file is a ConfigError naming file and line)."""
        self.config = config or PricingConfig()
        if table is None and self.config.catalogue:
            table = load_catalogue(self.config.catalogue, base_dir=base_dir)  # the team's files, at config load
        self._table = table  # the shipped table (~70 KB of TOML) is read on first need: see `table`
        self._overrides: dict[str, Price] = {
            key: _override_price(key, ov) for key, ov in self.config.prices.items()
        }

    @property
    def table(self) -> PriceTable:
        """The shipped table with the config's catalogue files laid over it. The shipped one alone is
        parsed on first need (a lookup no override answers, a report): a config whose deployments are
        all priced by `[pricing."provider:model"]` never reads it."""
        if self._table is None:
            self._table = load_price_table()
        return self._table

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
        # Looked up first whatever `strict` says: the shipped table (read on first need) is then read before
        # the call, never while its cost is computed, which for a stream abandoned at exit is at interpreter exit.
        if self.lookup(deployment.provider, deployment.kind, deployment.region,
                       deployment.model) is not None or not self.strict:
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
    figures: list[Any] = [str(ov.input_per_million), str(ov.output_per_million), str(ov.cached_input_per_million),
                          ov.currency]
    extra = {k: str(getattr(ov, k)) for k in ("explicit_cached_input_per_million", "cache_write_per_million",
                                              "thinking_output_per_million") if getattr(ov, k) is not None}
    if extra:  # only then, so the version of an override without them is what it always was
        figures.append(extra)
    canon = json.dumps(figures, separators=(",", ":"), sort_keys=True)
    # The version changes whenever the configured figures do, so ledger rows say which price applied.
    digest = hashlib.sha256(canon.encode()).hexdigest()[:8]
    return Price(
        input_per_million=ov.input_per_million,
        output_per_million=ov.output_per_million,
        cached_input_per_million=ov.cached_input_per_million,
        explicit_cached_input_per_million=ov.explicit_cached_input_per_million,
        cache_write_per_million=ov.cache_write_per_million,
        thinking_output_per_million=ov.thinking_output_per_million,
        currency=ov.currency,
        version=f"config:{digest}",
        source=f'config [pricing."{key}"]',
        confirmed=True,
        model=model,
        model_class=ov.model_class,
        origin="config",
        origin_file="config",
    )
