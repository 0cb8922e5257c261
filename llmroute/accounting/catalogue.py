"""Team price catalogues: files in the shipped table's format, laid over it without a release.

`[pricing] catalogue = "prices.toml"` (or a list, applied in order) names them; each is read once, at
config load (`prices.read_catalogue_file` / `prices.load_catalogue`, re-exported here), parsed by
`prices.parse_price_table` (errors name the file and the line), and laid over the shipped table by
`prices.layer_tables`: an entry replaces the shipped entry of the same (kind, region,
model), a new one is added, and each figure keeps its own file's `version`, which the ledger records
as `price_version`. `llmroute prices check FILE` lints one file; `llmroute prices diff` shows what the
catalogue changes against the shipped table (`diff_tables`).

This module compares tables: it reads no file itself, never fetches a price from the network, never
writes, and keeps no state between calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Iterable

from llmroute.accounting.prices import Price, PriceTable, PriceTier, load_catalogue, read_catalogue_file

__all__ = ["read_catalogue_file", "load_catalogue", "diff_tables", "lint_table", "PriceChange", "RATE_FIELDS"]

# The figures `diff_tables` compares, in display order.
RATE_FIELDS = (
    "input_per_million", "output_per_million", "cached_input_per_million", "explicit_cached_input_per_million",
    "cache_write_per_million", "thinking_output_per_million", "batch_input_per_million", "batch_output_per_million",
    "currency", "confirmed",
)


@dataclass(frozen=True)
class PriceChange:
    """One entry that differs between two tables: `change` is "added" or "changed"; `fields` maps each
    changed figure (and "tiers") to (before, after), as text; `where` is the file and line it came from."""

    change: str
    kind: str
    region: str | None
    model: str
    fields: dict[str, tuple[str, str]]
    version: str
    where: str

    @property
    def label(self) -> str:
        platform = f"{self.kind}/{self.region}" if self.region else self.kind
        return f"{platform} {self.model}"


def _text(value: Decimal | str | bool | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, Decimal):
        return format(value.normalize(), "f")
    return str(value)


_TIER_EXTRAS = (("thinking", "thinking_output_per_million"), ("cached", "cached_input_per_million"),
                ("explicit", "explicit_cached_input_per_million"), ("write", "cache_write_per_million"),
                ("batch", "batch_input_per_million"))


def _tiers_text(price: Price) -> str:
    """Each tier as ">131072: 2.4/20 thinking 24 cached 0.48" (input/output, then the rates it sets)."""
    parts = []
    for t in price.tiers:
        extras = "".join(f" {label} {_text(getattr(t, f))}" for label, f in _TIER_EXTRAS if getattr(t, f) is not None)
        parts.append(f">{t.above}: {_text(t.input_per_million)}/{_text(t.output_per_million)}{extras}")
    return "; ".join(parts) or "-"


def diff_tables(base: PriceTable, other: PriceTable | Iterable[Price]) -> list[PriceChange]:
    """The entries of `other` that `base` lacks or prices differently (an entry only in `base` is not a
    change: a catalogue cannot remove a shipped price)."""
    entries = other.entries if isinstance(other, PriceTable) else tuple(other)
    changes: list[PriceChange] = []
    for p in entries:
        where = f"{p.origin_file}:{p.line}" if p.line else p.origin_file
        before = base.index.get((p.kind or "", p.region, p.model))
        if before is None:
            figures = {f: ("", _text(getattr(p, f))) for f in RATE_FIELDS if getattr(p, f) is not None}
            if p.tiers:
                figures["tiers"] = ("", _tiers_text(p))
            changes.append(PriceChange("added", p.kind or "", p.region, p.model, figures, p.version, where))
            continue
        if before is p:
            continue
        fields = {f: (_text(getattr(before, f)), _text(getattr(p, f))) for f in RATE_FIELDS
                  if getattr(before, f) != getattr(p, f)}
        if before.tiers != p.tiers:
            fields["tiers"] = (_tiers_text(before), _tiers_text(p))
        if fields:
            changes.append(PriceChange("changed", p.kind or "", p.region, p.model, fields, p.version, where))
    return sorted(changes, key=lambda c: (c.kind, c.region or "", c.model))


def lint_table(table: PriceTable) -> list[str]:
    """Figures that parse but are probably typos, as "file:line: model: what" lines (`prices check`
    prints them as warnings): a cache hit dearer than input, a cache write cheaper than input, thinking
    output cheaper than output, a higher input-length tier cheaper than the one below it."""
    out: list[str] = []
    for p in table.entries:
        where = f"{p.origin_file}:{p.line}: {p.kind}{'/' + p.region if p.region else ''} {p.model}"
        levels: list[tuple[str, Price | PriceTier]] = [("first tier", p), *((f"tier >{t.above}", t) for t in p.tiers)]
        previous: Price | PriceTier | None = None
        for label, r in levels:
            if r.cached_input_per_million is not None and r.cached_input_per_million > r.input_per_million:
                out.append(f"{where}: {label}: cached input {_text(r.cached_input_per_million)} costs more than "
                           f"input {_text(r.input_per_million)}")
            if r.explicit_cached_input_per_million is not None and r.explicit_cached_input_per_million > r.input_per_million:
                out.append(f"{where}: {label}: explicit cache hits cost more than input")
            if r.cache_write_per_million is not None and r.cache_write_per_million < r.input_per_million:
                out.append(f"{where}: {label}: cache writes {_text(r.cache_write_per_million)} cost less than "
                           f"input {_text(r.input_per_million)}")
            if r.thinking_output_per_million is not None and r.thinking_output_per_million < r.output_per_million:
                out.append(f"{where}: {label}: thinking output costs less than output")
            if previous is not None and (r.input_per_million < previous.input_per_million
                                         or r.output_per_million < previous.output_per_million):
                out.append(f"{where}: {label} is cheaper than the tier below it")
            previous = r
    return out
