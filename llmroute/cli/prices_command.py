"""`llmroute prices [SEARCH] [--config FILE]`: what the shipped price table holds, and what a config is charged.

`llmroute prices check FILE...` lints team catalogue files (the shipped format; errors name file and
line); `llmroute prices diff FILE... | --config CONFIG` lists what they add or change against the shipped
table.

Without `--config` it lists the shipped entries whose platform, region or model contains SEARCH (case
does not matter): the per-million rates (input, cached input, output, batch), the currency, whether
the figure is confirmed on the platform's own page, and the page's date (`--sources` adds the page).
With `--config` it lists every configured deployment with the price it would be charged (the
config's `[pricing]` override, else the shipped entry), or UNPRICED. Output fits 120 columns.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from decimal import Decimal
from typing import Any, Iterable, List, Sequence

from llmroute.accounting.prices import Price, load_price_table
from llmroute.config import Config, load_config
from llmroute._runtime.cli_help import with_defaults

__all__ = ["main", "check_main", "diff_main", "price_rows", "config_rows", "format_rate"]


def format_rate(value: Decimal | None) -> str:
    """A per-million rate as the page shows it: no exponent, no trailing zeros; '-' for none."""
    if value is None:
        return "-"
    return format(value.normalize(), "f")


def _row(price: Price) -> dict[str, Any]:
    cached = price.cached_input_per_million
    return {
        "kind": price.kind or "", "region": price.region or "", "model": price.model, "mode": price.mode,
        "platform": f"{price.kind}/{price.region}" if price.region else (price.kind or ""),
        "cur": price.currency, "input": format_rate(price.input_per_million),
        "cached": format_rate(cached) if cached is not None else "=input",
        "output": format_rate(price.output_per_million) if price.mode == "chat" else "(embed)",
        "batch": (f"{format_rate(price.batch_input_per_million)}/{format_rate(price.batch_output_per_million)}"
                  if price.batch_input_per_million is not None else "-"),
        "thinking": format_rate(price.thinking_output_per_million),
        "cache_write": format_rate(price.cache_write_per_million),
        "tiers": "; ".join(f">{t.above}: {format_rate(t.input_per_million)}/{format_rate(t.output_per_million)}"
                           for t in price.tiers) or "-",
        "confirmed": "yes" if price.confirmed else "no", "date": price.source_date, "source": price.source,
        "note": price.note,
    }


def price_rows(search: str = "", prices: Iterable[Price] | None = None) -> List[dict[str, Any]]:
    """The shipped entries matching `search` (substring of platform, region or model), as display rows."""
    needle = search.lower()
    entries = load_price_table().entries if prices is None else prices
    return [_row(p) for p in entries
            if not needle or needle in f"{p.kind} {p.region or ''} {p.model}".lower()]


def config_rows(config: Config) -> List[dict[str, Any]]:
    """Every configured deployment and the price it would be charged (origin: config, table or none)."""
    book = config.sections.prices
    rows = []
    for dep in config.all_deployments():
        p = dep.provider
        price = book.lookup(p.name, p.kind, p.region, dep.model)
        row: dict[str, Any] = {"deployment": dep.id, "tier": dep.tier or ""}
        if price is None:
            row.update({"origin": "none", "cur": "", "input": "UNPRICED", "cached": "", "output": "",
                        "batch": "", "confirmed": "", "date": "", "source": "", "mode": "", "note": ""})
        else:
            row.update(_row(price))
            row["origin"] = price.origin
        rows.append(row)
    return rows


_CAPS = {"date": 10}


def _table(rows: Sequence[dict[str, Any]], columns: Sequence[str], width: int = 120) -> str:
    if not rows:
        return "(nothing matches)"
    widths = {c: min(_CAPS.get(c, 999), max(len(c), *(len(str(r.get(c, ""))) for r in rows))) for c in columns}
    # The first column (model or deployment names) gives way so the table fits `width`.
    total = sum(widths.values()) + 2 * (len(columns) - 1)
    flexible = "model" if "model" in widths else columns[0]
    if total > width:
        widths[flexible] = max(len(flexible), widths[flexible] - (total - width))

    def cell(c: str, v: Any) -> str:
        text = str(v)
        if len(text) > widths[c]:
            text = text[: widths[c] - 1] + "…"
        return text.ljust(widths[c])

    lines = ["  ".join(cell(c, c) for c in columns).rstrip()]
    lines += ["  ".join(cell(c, r.get(c, "")) for c in columns).rstrip() for r in rows]
    return "\n".join(lines)


def check_main(argv: Sequence[str]) -> int:
    """`llmroute prices check FILE...`: lint team catalogue files (the shipped format); 0 when all are good."""
    from llmroute.accounting.catalogue import lint_table, read_catalogue_file
    from llmroute.errors import ConfigError

    parser = argparse.ArgumentParser(prog="llmroute prices check",
                                     description="Check price catalogue files (the format of the shipped prices.toml).")
    parser.add_argument("files", nargs="+", help="catalogue files to check")
    args = parser.parse_args(argv)
    status = 0
    shipped = load_price_table()
    for name in args.files:
        try:
            table = read_catalogue_file(name)
        except ConfigError as e:
            print(f"llmroute prices check: {e}", file=sys.stderr)
            status = 2
            continue
        unconfirmed = sum(1 for p in table.entries if not p.confirmed)
        tiered = sum(1 for p in table.entries if p.tiers)
        replaced = sum(1 for p in table.entries if (p.kind or "", p.region, p.model) in shipped.index)
        print(f"{name}: ok, version {table.version}: {len(table.entries)} entries ({replaced} replace shipped "
              f"ones, {tiered} tiered, {unconfirmed} unconfirmed)")
        for warning in lint_table(table):
            print(f"warning: {warning}")
    return status


def diff_main(argv: Sequence[str]) -> int:
    """`llmroute prices diff [FILE...] [--config FILE]`: what the catalogue files (or the config's
    `[pricing] catalogue`) change against the shipped table."""
    from llmroute.accounting.catalogue import diff_tables, load_catalogue
    from llmroute.errors import ConfigError

    parser = argparse.ArgumentParser(prog="llmroute prices diff",
                                     description="What catalogue files change against the shipped price table.")
    parser.add_argument("files", nargs="*", help="catalogue files, laid over the shipped table in order")
    parser.add_argument("--config", help="use the config's [pricing] catalogue files")
    parser.add_argument("--json", action="store_true", help="JSON rows instead of text")
    args = parser.parse_args(argv)
    if not args.files and not args.config:
        parser.error("name catalogue files, or --config for the config's [pricing] catalogue")
    shipped = load_price_table()
    try:
        if args.config:
            layered = load_config(args.config).sections.prices.table
        else:
            layered = load_catalogue(args.files)
    except ConfigError as e:
        print(f"llmroute prices diff: {e}", file=sys.stderr)
        return 2
    changes = diff_tables(shipped, layered)
    if args.json:
        print(json.dumps([{"change": c.change, "kind": c.kind, "region": c.region, "model": c.model,
                           "version": c.version, "where": c.where,
                           "fields": {k: {"shipped": a, "catalogue": b} for k, (a, b) in c.fields.items()}}
                          for c in changes], indent=2, ensure_ascii=False))
        return 0
    print(f"against the shipped table {shipped.version}: {len(changes)} entr{'y' if len(changes) == 1 else 'ies'} "
          "added or changed")
    for c in changes:
        print(f"{c.change:7}  {c.label}  ({c.where}, version {c.version})")
        for name, (before, after) in c.fields.items():
            print(f"           {name}: {before or '(none)'} -> {after}")
    return 0


def main(argv: List[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "check":
        return check_main(argv[1:])
    if argv and argv[0] == "diff":
        return diff_main(argv[1:])
    parser = argparse.ArgumentParser(
        prog="llmroute prices",
        description="List the shipped price table (per million tokens), or what a config's deployments are charged.")
    parser.add_argument("search", nargs="?", default="", help="substring of platform, region or model (any case)")
    parser.add_argument("--config", help="show what each deployment of this config is charged, and from where")
    parser.add_argument("--wide", action="store_true", help="add the batch rates, mode and page date (wider than 120)")
    parser.add_argument("--sources", action="store_true", help="one line per entry with the page and note")
    parser.add_argument("--json", action="store_true", help="JSON rows instead of a table")
    args = with_defaults(parser).parse_args(argv)
    table = load_price_table()
    if args.config:
        rows = config_rows(load_config(args.config))
        if args.search:
            rows = [r for r in rows if args.search.lower() in r["deployment"].lower()]
        columns = ["deployment", "tier", "origin", "cur", "input", "cached", "output", "confirmed"]
    else:
        rows = price_rows(args.search)
        columns = ["platform", "model", "cur", "input", "cached", "output", "confirmed"]
    if args.wide:
        columns += ["thinking", "cache_write", "batch", "mode", "date", "tiers"]
    if args.json:
        print(json.dumps(rows, indent=2, ensure_ascii=False))
        return 0
    print(f"prices per million tokens; table {table.version} (read {table.read_on})"
          + ("; batch = input/output of the platform's batch API" if args.wide else "; --wide adds batch rates"))
    print(_table(rows, columns, width=10_000 if args.wide else 120))
    tiered = sum(1 for r in rows if r.get("tiers") not in (None, "", "-"))
    thinking = sum(1 for r in rows if r.get("thinking") not in (None, "", "-"))
    if (tiered or thinking) and not args.wide:
        print(f"{tiered} of these are priced by input length (the rates above are the first tier) and "
              f"{thinking} have a thinking-output rate: --wide shows them (docs/pricing.md)")
    if args.sources:
        print()
        for r in rows:
            if r.get("source"):
                label = r.get("deployment") or f"{r['kind']}{'/' + r['region'] if r['region'] else ''} {r['model']}"
                print(f"{label}: {r['source']}" + (f" ({r['note']})" if r.get("note") else ""))
    if not args.config:
        needle = args.search.lower()
        for (kind, region), why in sorted(table.missing.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
            if not needle or needle in f"{kind} {region or ''}".lower() or needle in f"{kind}/{region or ''}":
                print(f"not shipped: {kind}{'/' + region if region else ''}: {why}")
        groups: dict[tuple[str, str, str], list[str]] = {}
        for (kind, region, model), why in table.missing_models.items():
            if not needle or needle in f"{kind} {region or ''} {model}".lower() or needle in f"{kind}/{region or ''}":
                groups.setdefault((kind, region or "", why), []).append(model)
        for (kind, region, why), models in sorted(groups.items()):
            print(textwrap.fill(f"not shipped on {kind}{'/' + region if region else ''} ({why}): "
                                + ", ".join(sorted(models)), width=120, subsequent_indent="    ",
                                break_on_hyphens=False, break_long_words=False))
    unpriced = [r["deployment"] for r in rows if r.get("input") == "UNPRICED"]
    if unpriced:
        print(f"\n{len(unpriced)} deployment(s) have no price: add [pricing.\"provider:model\"] tables "
              "(or pricing.strict = false to run them with cost None, flagged)", file=sys.stderr)
    return 0
