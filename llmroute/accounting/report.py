"""Cost reports from a ledger file: `llmroute report` and `llmroute.report(...)`.

    llmroute report --ledger llmroute-ledger.db --by feature,tier,provider,model,day --since 7d \
                    --format table|csv|json|html [--out FILE] [--reprice KIND[:REGION]] [--config FILE] \
                    [--wide] [--by-length]

Per group (the `--by` keys plus the currency, since amounts in different currencies never add up):
requests (distinct request ids), attempts, errors and error rate (attempts whose status is not ok,
over attempts), tokens (`input_tokens` includes cached ones, as OpenAI's `prompt_tokens`), cost,
cost per request, p50/p95 latency and TTFT (over attempts that have them), and counts of unpriced and
estimated attempts; where the response cache was in play, `cache_hits`, `cache_hit_rate` (requests
answered from the cache over requests looked up) and `cost_saved` (what those answers cost when first
made). Totals come per currency, and in the reporting currency when exchange rates are
set (`[pricing]` in `--config`). An attempt with no cost (unpriced, or an error nothing was billed
for) is counted in the group of its keys in that group's currency (`unpriced_attempts` says how many
were unpriced); keys with no priced attempt at all form a group with `cost = null`. A missing key
value (a call with no feature) shows as `(none)`. The terminal table fits 120 columns (`--wide` for
every column); CSV amounts are rounded to 0.000001 of the currency, JSON keeps them exact. Probe calls
of `llmroute health` and `bench smoke` are left out unless `include_probes`, and the calls of shadow
comparisons (`[routing.shadow]`, metadata `shadow = "1"`) unless `include_shadow` (`--include-shadow`).

`--by-length` adds latency by input- and output-token bucket (the HTML report always has it).

`--reconcile FILE [--platform NAME|KIND] [--bill-tz +08:00] [--tolerance 0.01]` compares the ledger per
day and model with a platform's usage or billing export and names the likely cause of each difference
(`llmroute/accounting/reconcile.py`, docs/pricing.md).

`--reprice KIND` prices the same tokens at another platform's price for the same model class (the
`class` field of the price table, e.g. 7b, 70b), assuming the same cached tokens: what a switch
would have cost. Records whose model has no class, or whose class that platform does not price,
are counted in `reprice_unpriced`.

`--format json` prints `{"groups": [...], "totals": [...]}`, amounts as decimal strings ("0.004784"):
exact, as the ledger holds them, where a JSON number would be read back as a binary float. `--format
html` writes one self-contained file with inline SVG charts (cost per feature per day, cost share
by tier): no script, no network, opens in any browser.

Percentiles are linear interpolation between closest ranks (numpy's default), in pure Python.
This module reads the ledger and writes only the report the user asked for.
"""

from __future__ import annotations

import csv
import html
import io
import json
import math
import re
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from llmroute._runtime.percentile import percentile
from llmroute.accounting.cost import compute_cost
from llmroute.accounting.ledger import LedgerRecord, is_probe, is_shadow
from llmroute.accounting.sinks import read_records
from llmroute.accounting.prices import ExchangeRates, PriceBook, normalize_region

__all__ = ["report", "ReportRows", "parse_time", "percentile", "GROUP_KEYS", "latency_by_length",
           "to_table", "to_csv", "to_length_table"]

GROUP_KEYS = ("feature", "tier", "pool", "provider", "provider_kind", "deployment", "model", "day", "status", "cache")
FORMATS = ("table", "csv", "json", "html")


class ReportRows(list[dict[str, Any]]):
    """The groups of a report, one dict per group (a list, so `pandas.DataFrame(rows)` works);
    `.totals` holds the totals per currency."""

    totals: list[dict[str, Any]]

    def __init__(self, rows: Iterable[dict[str, Any]] = (), totals: Sequence[dict[str, Any]] = ()) -> None:
        super().__init__(rows)
        self.totals = list(totals)


_REL = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_time(value: Any, *, now: float | None = None, what: str = "--since") -> float | None:
    """Unix seconds from `7d` / `24h` / `30m` (before `now`), an ISO date or datetime (UTC unless it
    says otherwise), a datetime/date, or a number. None stays None."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).timestamp()
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=timezone.utc).timestamp()
    if isinstance(value, str):
        m = _REL.match(value)
        if m:
            return (time.time() if now is None else now) - float(m.group(1)) * _UNIT_S[m.group(2)]
        try:
            return parse_time(datetime.fromisoformat(value.strip().replace("Z", "+00:00")))
        except ValueError:
            pass
    raise ValueError(f"{what}: {value!r} is not a duration like 7d/24h/30m or an ISO date")


def _day(ts: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(ts))


def _key_value(rec: LedgerRecord, key: str) -> Any:
    if key == "day":
        return _day(rec.ts)
    if key.startswith("metadata."):
        v = rec.metadata.get(key[len("metadata.") :])
        return None if v is None else str(v)
    return getattr(rec, key)


def _check_by(by: Sequence[str]) -> list[str]:
    out = []
    for k in by:
        k = k.strip()
        if not k:
            continue
        if k not in GROUP_KEYS and not (k.startswith("metadata.") and len(k) > len("metadata.")):
            raise ValueError(f"--by: unknown key {k!r} (known: {', '.join(GROUP_KEYS)}, metadata.<key>)")
        out.append(k)
    return out


@dataclass
class _Group:
    request_ids: set[str] = field(default_factory=set)
    priced_request_ids: set[str] = field(default_factory=set)
    attempts: int = 0
    errors: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    cost: Decimal = Decimal(0)
    unpriced: int = 0
    estimated: int = 0
    latency: list[float] = field(default_factory=list)
    ttft: list[float] = field(default_factory=list)
    reprice_cost: Decimal = Decimal(0)
    reprice_currency: set[str] = field(default_factory=set)
    reprice_unpriced: int = 0
    cache_lookups: set[str] = field(default_factory=set)  # request ids the cache was asked about
    cache_hits: set[str] = field(default_factory=set)
    cost_saved: Decimal = Decimal(0)

    def add(self, rec: LedgerRecord) -> None:
        self.request_ids.add(rec.request_id)
        self.attempts += 1
        self.errors += rec.status != "ok"
        self.input_tokens += rec.input_tokens
        self.output_tokens += rec.output_tokens
        self.cached_tokens += rec.cached_tokens
        self.reasoning_tokens += rec.reasoning_tokens
        if rec.cost is None:
            self.unpriced += not rec.priced
        else:
            self.cost += rec.cost
            self.priced_request_ids.add(rec.request_id)
        self.estimated += bool(rec.estimated)
        if rec.latency_ms is not None:
            self.latency.append(rec.latency_ms)
        if rec.ttft_ms is not None:
            self.ttft.append(rec.ttft_ms)
        if rec.cache in _CACHE_LOOKUPS:
            self.cache_lookups.add(rec.request_id)
            if rec.cache != "miss":
                self.cache_hits.add(rec.request_id)
        if rec.cost_saved is not None:
            self.cost_saved += rec.cost_saved


_CACHE_LOOKUPS = frozenset({"hit", "semantic-hit", "miss"})


def _parse_reprice(reprice: str) -> tuple[str, str | None]:
    kind, _, region = reprice.partition(":")
    return kind.strip(), (region.strip() or None)


def report(
    ledger: str | Path | Iterable[LedgerRecord],
    *,
    by: Sequence[str] | str = ("feature",),
    since: Any = None,
    until: Any = None,
    reprice: str | None = None,
    rates: ExchangeRates | None = None,
    price_book: PriceBook | None = None,
    now: float | None = None,
    include_probes: bool = False,
    include_shadow: bool = False,
) -> ReportRows:
    """Rows of a cost report over a ledger file (SQLite or JSONL) or an iterable of records.

    `by`: group keys (`GROUP_KEYS` or `metadata.<key>`), a sequence or "a,b". `since`/`until`: unix
    seconds, `7d`-style durations, ISO dates or datetimes. `reprice`: a platform kind (optionally
    `kind:region`) to price the same traffic at. `rates`: to add reporting-currency figures (default:
    the price book's config, if it sets them). Amounts are exact Decimals. Probe calls
    (`llmroute health`, `bench smoke`: metadata `llmroute_probe`) are left out unless `include_probes`;
    shadow comparisons' calls (`[routing.shadow]`: metadata `shadow = "1"`) unless `include_shadow`.
    """
    by_keys = _check_by(by.split(",") if isinstance(by, str) else list(by))
    t_since, t_until = parse_time(since, now=now), parse_time(until, now=now, what="--until")
    if price_book is None and reprice is not None:
        price_book = PriceBook()
    if rates is None and price_book is not None:
        rates = price_book.rates()
    target = _parse_reprice(reprice) if reprice else None
    book = price_book if target is not None else None  # the prices to reprice with (set whenever `reprice` is)
    if target is not None and book is not None and target[0] not in {p.kind for p in book.table.entries}:
        raise ValueError(f"--reprice: no shipped prices for platform {target[0]!r}")
    if target is not None and book is not None and target[1] is not None:
        regions = {p.region for p in book.table.entries if p.kind == target[0] and p.region}
        if regions and normalize_region(target[0], target[1]) not in regions:  # else every row came out unpriced
            raise ValueError(f"--reprice: no prices for platform {target[0]!r} in region {target[1]!r} "
                             f"(regions: {', '.join(sorted(regions))})")
    if t_since is not None and t_until is not None and t_until <= t_since:
        raise ValueError(f"--until ({until}) is not after --since ({since}): the range holds no time")

    if isinstance(ledger, (str, Path)):
        records: Iterable[LedgerRecord] = read_records(ledger, since=t_since, until=t_until)
    else:
        records = (
            r for r in ledger if (t_since is None or r.ts >= t_since) and (t_until is None or r.ts < t_until)
        )

    groups: dict[tuple[Any, ...], _Group] = defaultdict(_Group)
    totals: dict[str | None, _Group] = defaultdict(_Group)
    class_cache: dict[tuple[str | None, str | None], Any] = {}
    records = [rec for rec in records if _counted(rec, include_probes, include_shadow)]
    # A record with no cost (unpriced, or an error nothing was billed for) joins the group of the same
    # keys in the currency that group bills in, so "no feature" is one row, not a priced and a blank one.
    # (When a key bills in two currencies, they go with the first in alphabetical order.)
    currency_of: dict[tuple[Any, ...], str] = {}
    for rec in records:
        if rec.cost is not None and rec.currency is not None:
            keys = tuple(_key_value(rec, k) for k in by_keys)
            currency_of[keys] = min(rec.currency, currency_of.get(keys, rec.currency))
    for rec in records:
        keys = tuple(_key_value(rec, k) for k in by_keys)
        key = keys + (rec.currency if rec.cost is not None else currency_of.get(keys),)
        g = groups[key]
        g.add(rec)
        totals[key[-1]].add(rec)
        if target is not None and book is not None:
            ck = (rec.provider, rec.model)
            if ck not in class_cache:
                cls = book.class_of(rec.model or "", rec.provider)
                class_cache[ck] = cls and book.price_for_class(target[0], cls, target[1])
            tp = class_cache[ck]
            if tp:
                c = compute_cost(
                    tp, prompt_tokens=rec.input_tokens, completion_tokens=rec.output_tokens, cached_tokens=rec.cached_tokens
                )
                assert c.amount is not None  # priced: `tp` is a price
                for gg in (g, totals[key[-1]]):
                    gg.reprice_cost += c.amount
                    gg.reprice_currency.add(tp.currency)
            else:
                g.reprice_unpriced += 1
                totals[key[-1]].reprice_unpriced += 1

    rows = [
        _row(dict(zip(by_keys, key[:-1])), key[-1], g, rates, reprice)
        for key, g in sorted(groups.items(), key=lambda kv: tuple("" if v is None else str(v) for v in kv[0]))
    ]
    total_rows = [
        _row({}, cur, g, rates, reprice) for cur, g in sorted(totals.items(), key=lambda kv: kv[0] or "~")
    ]
    if rates is not None and totals:
        total_rows.append(_reporting_total(totals, rates))
    return ReportRows(rows, total_rows)


def _counted(record: LedgerRecord, include_probes: bool, include_shadow: bool) -> bool:
    """Whether a record counts in a report: probes and shadow traffic only when asked for."""
    return (include_probes or not is_probe(record)) and (include_shadow or not is_shadow(record))


def _ms(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def _row(
    keys: dict[str, Any], currency: str | None, g: _Group, rates: ExchangeRates | None, reprice: str | None
) -> dict[str, Any]:
    requests = len(g.request_ids)
    priced = currency is not None
    cost = g.cost if priced else None
    row: dict[str, Any] = dict(keys)
    row.update(
        requests=requests,
        attempts=g.attempts,
        errors=g.errors,
        error_rate=g.errors / g.attempts if g.attempts else 0.0,
        input_tokens=g.input_tokens,
        output_tokens=g.output_tokens,
        cached_tokens=g.cached_tokens,
        reasoning_tokens=g.reasoning_tokens,
        cost=cost,
        currency=currency,
        # Over the requests that were priced: unpriced ones would make the average look cheaper.
        cost_per_request=(cost / len(g.priced_request_ids)) if (cost is not None and g.priced_request_ids) else None,
        unpriced_attempts=g.unpriced,
        estimated_attempts=g.estimated,
        latency_p50_ms=_ms(percentile(g.latency, 50)),
        latency_p95_ms=_ms(percentile(g.latency, 95)),
        ttft_p50_ms=_ms(percentile(g.ttft, 50)),
        ttft_p95_ms=_ms(percentile(g.ttft, 95)),
    )
    if g.cache_lookups:
        # Requests the cache answered over requests it was asked about (bypasses not counted);
        # cost_saved: what the answers served from the cache cost when they were first made.
        row["cache_hits"] = len(g.cache_hits)
        row["cache_hit_rate"] = len(g.cache_hits) / len(g.cache_lookups)
        row["cost_saved"] = g.cost_saved if priced else None
    if rates is not None:
        row["reporting_currency"] = rates.reporting_currency
        row["cost_in_reporting_currency"] = (
            rates.convert(cost, currency) if cost is not None and currency is not None else None)
    if reprice is not None:
        row["reprice"] = reprice
        curs = sorted(g.reprice_currency)
        row["reprice_cost"] = g.reprice_cost if len(curs) == 1 else None
        row["reprice_currency"] = curs[0] if len(curs) == 1 else (None if not curs else "mixed")
        row["reprice_unpriced"] = g.reprice_unpriced
    return row


def _reporting_total(totals: Mapping[str | None, _Group], rates: ExchangeRates) -> dict[str, Any]:
    amount, unconverted, requests, attempts = Decimal(0), [], set(), 0
    for cur, g in totals.items():
        requests |= g.request_ids
        attempts += g.attempts
        if cur is None:
            continue
        c = rates.convert(g.cost, cur)
        if c is None:
            unconverted.append(cur)
        else:
            amount += c
    return {
        "currency": rates.reporting_currency,
        "in_reporting_currency": True,
        "cost": amount,
        "requests": len(requests),
        "attempts": attempts,
        "unconverted_currencies": unconverted,
        "unpriced_attempts": sum(g.unpriced for g in totals.values()),
    }


# ------------------------------------------------------------------------------------- output
def _plain(v: Any) -> Any:
    if isinstance(v, Decimal):
        return f"{v:f}"  # exact: money is never a binary float on the way out
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def to_json(rows: ReportRows) -> str:
    doc = {
        "groups": [{k: _plain(v) for k, v in r.items()} for r in rows],
        "totals": [{k: _plain(v) for k, v in t.items()} for t in rows.totals],
    }
    return json.dumps(doc, ensure_ascii=False, indent=2, default=str)


def _fmt(v: Any, key: str = "") -> str:
    if v is None:
        return "(none)" if key in GROUP_KEYS or key.startswith("metadata.") else "-"
    if isinstance(v, Decimal):
        return f"{v:.6f}" if "cost" in key else f"{v.normalize():f}"
    if isinstance(v, float):
        return f"{v:.1%}" if key in ("error_rate", "cache_hit_rate") else f"{v:.1f}"
    if isinstance(v, list):
        return ",".join(map(str, v)) or "-"
    return str(v)


_TABLE_COLS = [
    "requests", "attempts", "error_rate", "input_tokens", "cached_tokens", "output_tokens", "cost", "currency",
    "cost_per_request", "latency_p50_ms", "latency_p95_ms", "ttft_p50_ms", "ttft_p95_ms",
]  # fmt: skip
# The terminal table's default columns (fit 120 columns); `--wide` shows _TABLE_COLS and the rest.
_NARROW_COLS = ["requests", "error_rate", "input_tokens", "output_tokens", "cost", "currency", "cost_per_request",
                "latency_p95_ms", "ttft_p95_ms"]  # fmt: skip
# Short headers for the narrow table; CSV, JSON and --wide keep the full names.
_SHORT = {"requests": "reqs", "error_rate": "err%", "input_tokens": "in_tok", "output_tokens": "out_tok",
          "cached_tokens": "cached", "currency": "cur", "cost_per_request": "per_req", "latency_p95_ms": "p95_ms",
          "ttft_p95_ms": "ttft95", "unpriced_attempts": "unpriced", "estimated_attempts": "estimated",
          "cost_in_reporting_currency": "cost_rep", "reprice_cost": "reprice", "reprice_currency": "rp_cur",
          "reprice_unpriced": "rp_unpriced"}  # fmt: skip
# Dropped first, in this order, when the narrow table is still too wide.
_DROP_ORDER = ["ttft_p95_ms", "error_rate", "cost_per_request", "latency_p95_ms", "input_tokens"]
TABLE_WIDTH = 120


def _columns(rows: ReportRows, by_keys: Sequence[str], wide: bool = True) -> list[str]:
    cols = list(by_keys) + (_TABLE_COLS if wide else _NARROW_COLS)
    if rows and "cost_in_reporting_currency" in rows[0]:
        cols.append("cost_in_reporting_currency")
    if rows and "reprice_cost" in rows[0]:
        cols += ["reprice_cost", "reprice_currency", "reprice_unpriced"]
    if any("cache_hit_rate" in r for r in rows):
        cols += ["cache_hits", "cache_hit_rate", "cost_saved"]
    if any(r.get("unpriced_attempts") for r in rows):
        cols.append("unpriced_attempts")
    if any(r.get("estimated_attempts") for r in rows):
        cols.append("estimated_attempts")
    return cols


def _render(header: list[str], data: list[list[str]]) -> list[str]:
    widths = [max([len(h)] + [len(d[i]) for d in data]) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip(), "  ".join("-" * w for w in widths)]
    for d in data:
        lines.append("  ".join(x.rjust(w) if x[:1].isdigit() or x[:1] == "-" else x.ljust(w)
                               for x, w in zip(d, widths)).rstrip())
    return lines


def _fit(cols: list[str], rows: ReportRows, by_keys: Sequence[str], width: int) -> tuple[list[str], list[str], list[list[str]]]:
    """Columns, headers and cells of the narrow table: optional columns dropped, then the longest key
    values cut with an ellipsis, until a line fits `width`."""
    cols = list(cols)

    def build() -> tuple[list[str], list[list[str]]]:
        return [_SHORT.get(c, c) for c in cols], [[_fmt(r.get(c), c) for c in cols] for r in rows]

    def line_width(header: list[str], data: list[list[str]]) -> int:
        return sum(max([len(h)] + [len(d[i]) for d in data]) for i, h in enumerate(header)) + 2 * (len(header) - 1)

    def cut_keys(floor: int) -> None:
        keys = [i for i, c in enumerate(cols) if c in by_keys]
        while line_width(header, data) > width and keys:
            i = max(keys, key=lambda j: max(len(d[j]) for d in data) if data else 0)
            longest = max((len(d[i]) for d in data), default=0)
            if longest <= floor:
                break
            keep = max(floor, longest - (line_width(header, data) - width)) - 1
            for d in data:
                if len(d[i]) > keep + 1:
                    d[i] = d[i][:keep] + "…"

    header, data = build()
    cut_keys(32)  # long names first give way, to 32 characters
    for drop in _DROP_ORDER:  # then the least needed figures
        if line_width(header, data) <= width:
            break
        if drop in cols:
            cols.remove(drop)
            header, data = build()
            cut_keys(32)
    cut_keys(8)
    return cols, header, data


def to_table(rows: ReportRows, by_keys: Sequence[str], *, wide: bool = False, width: int = TABLE_WIDTH) -> str:
    """The terminal table: at most `width` columns unless `wide` (every column, full names)."""
    cols = _columns(rows, by_keys, wide=wide)
    if wide:
        header, body = cols, [[_fmt(r.get(c), c) for c in cols] for r in rows]
    else:
        cols, header, body = _fit(cols, rows, by_keys, width)
    tcols = ["currency", "requests", "attempts", "input_tokens", "cached_tokens", "output_tokens", "cost"]
    tbody = [
        [("in " if t.get("in_reporting_currency") else "") + _fmt(t.get("currency"))] + [_fmt(t.get(c), c) for c in tcols[1:]]
        for t in rows.totals
    ]
    theader = ["total " + tcols[0], *tcols[1:]] if wide else ["total cur", *(_SHORT.get(c, c) for c in tcols[1:])]
    lines = _render(header, body) + [""] + _render(theader, tbody) + [""]
    if not rows:
        lines.append("(no records in range)")
    elif not wide and len(cols) < len(_columns(rows, by_keys, wide=True)):
        lines.append("--wide: every column (attempts, cached tokens, p50s, full names); --format csv|json: all fields")
    return "\n".join(lines) + "\n"


# Money in CSV: a millionth of the currency unit (as the table shows), enough for per-request costs
# of cheap models and far from the 28 digits a Decimal division carries. JSON keeps the exact value.
MONEY_QUANTUM = Decimal("0.000001")
_RATIOS = ("error_rate",)


def _csv_cell(value: Any, key: str) -> str:
    if value is None:
        return ""
    if isinstance(value, Decimal):
        return f"{value.quantize(MONEY_QUANTUM):f}"
    if isinstance(value, float):
        return f"{value:.4f}" if key in _RATIOS else f"{value:.3f}"
    return str(value)


def to_csv(rows: ReportRows, by_keys: Sequence[str]) -> str:
    cols = list(by_keys) + [c for c in (rows[0].keys() if rows else _TABLE_COLS) if c not in by_keys]
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(cols)
    for r in rows:
        w.writerow([_csv_cell(r.get(c), c) for c in cols])
    return out.getvalue()


# ------------------------------------------------------------------------- latency by length
# Token-count buckets (lower bounds). The field guide's first check when P95 jumps (section 5.1): are
# long prompts or long answers a bigger share, and is it they that are slow?
INPUT_BUCKETS = (0, 256, 1024, 4096, 16384)
OUTPUT_BUCKETS = (0, 64, 256, 1024)


def _bucket_label(bounds: Sequence[int], i: int) -> str:
    def k(n: int) -> str:
        return f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else str(n)

    return f"{k(bounds[i])}-{k(bounds[i + 1])}" if i + 1 < len(bounds) else f">={k(bounds[i])}"


def latency_by_length(records: Iterable[LedgerRecord]) -> list[dict[str, Any]]:
    """Successful attempts grouped by input-token and by output-token bucket: count, share, p50/p95
    latency and p95 TTFT per bucket (empty buckets left out)."""
    ok = [r for r in records if r.status == "ok" and r.latency_ms is not None]
    out: list[dict[str, Any]] = []
    for dimension, bounds, attr in (("input", INPUT_BUCKETS, "input_tokens"), ("output", OUTPUT_BUCKETS, "output_tokens")):
        buckets: dict[int, list[LedgerRecord]] = defaultdict(list)
        for r in ok:
            n = getattr(r, attr) or 0
            i = max(j for j, lo in enumerate(bounds) if n >= lo)
            buckets[i].append(r)
        for i in sorted(buckets):
            recs = buckets[i]
            lat = [r.latency_ms for r in recs if r.latency_ms is not None]
            ttft = [r.ttft_ms for r in recs if r.ttft_ms is not None]
            out.append({"tokens": dimension, "bucket": _bucket_label(bounds, i), "attempts": len(recs),
                        "share": len(recs) / len(ok), "latency_p50_ms": _ms(percentile(lat, 50)),
                        "latency_p95_ms": _ms(percentile(lat, 95)), "ttft_p95_ms": _ms(percentile(ttft, 95))})
    return out


def to_length_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The latency-by-length view as a terminal table."""
    if not rows:
        return "latency by length: no successful attempts with a latency in range\n"
    header = ["tokens", "bucket", "attempts", "share", "p50_ms", "p95_ms", "ttft95"]
    data = [[r["tokens"], r["bucket"], str(r["attempts"]), f"{r['share']:.1%}", _fmt(r["latency_p50_ms"]),
             _fmt(r["latency_p95_ms"]), _fmt(r["ttft_p95_ms"])] for r in rows]
    return "latency by length (successful attempts):\n" + "\n".join(_render(header, data)) + "\n"


# --------------------------------------------------------------------------------------- HTML
_PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"]


def _chart_data(
    records: Iterable[LedgerRecord], rates: ExchangeRates | None
) -> tuple[dict[str, dict[str, dict[str, Decimal]]], dict[str, dict[str, Decimal]]]:
    """(currency -> day -> feature -> amount) and (currency -> tier -> amount), converted to the
    reporting currency where a rate allows."""
    per_day: dict[str, dict[str, dict[str, Decimal]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(Decimal)))
    per_tier: dict[str, dict[str, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    for r in records:
        if r.cost is None or r.currency is None:
            continue
        cur, amt = r.currency, r.cost
        if rates is not None:
            c = rates.convert(amt, cur)
            if c is not None:
                cur, amt = rates.reporting_currency, c
        per_day[cur][_day(r.ts)][r.feature or "(none)"] += amt
        per_tier[cur][r.tier or "(none)"] += amt
    return per_day, per_tier


def _nice_max(x: float) -> float:
    if x <= 0:
        return 1.0
    exp: float = 10 ** math.floor(math.log10(x))  # an int from 1 up (the numbers print as before)
    for m in (1, 2, 2.5, 5, 10):
        if x <= m * exp:
            return m * exp
    return 10 * exp


def _svg_stacked_bars(data: Mapping[str, Mapping[str, Decimal]], currency: str) -> str:
    days = sorted(data)
    features = sorted({f for d in data.values() for f in d})
    colors = {f: _PALETTE[i % len(_PALETTE)] for i, f in enumerate(features)}
    W, H, left, right, top, bottom = 820, 320, 70, 160, 20, 60
    pw, ph = W - left - right, H - top - bottom
    vmax = _nice_max(max((float(sum(d.values())) for d in data.values()), default=0))
    step = pw / max(len(days), 1)
    bw = max(step * 0.7, 1)
    e = html.escape
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" role="img" '
             f'aria-label="cost per feature per day ({e(currency)})" font-family="sans-serif" font-size="11">']  # fmt: skip
    for i in range(5):
        v = vmax * i / 4
        y = top + ph - ph * i / 4
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" stroke="#ddd"/>')
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{v:.6g}</text>')
    for i, day in enumerate(days):
        x = left + i * step + (step - bw) / 2
        y = top + ph
        for f in features:
            amt = data[day].get(f)
            if not amt:
                continue
            h = ph * float(amt) / vmax
            y -= h
            parts.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{bw:.1f}" height="{h:.1f}" fill="{colors[f]}">'
                f"<title>{e(day)} {e(f)}: {amt:.6f} {e(currency)}</title></rect>"
            )
        if len(days) <= 31 or i % math.ceil(len(days) / 31) == 0:
            parts.append(
                f'<text x="{x + bw / 2:.1f}" y="{top + ph + 14}" text-anchor="end" '
                f'transform="rotate(-45 {x + bw / 2:.1f} {top + ph + 14})">{e(day)}</text>'
            )
    parts.append(f'<text x="{left}" y="{H - 4}" fill="#555">cost ({e(currency)}) per day, stacked by feature</text>')
    for i, f in enumerate(features):
        y = top + i * 16
        parts.append(f'<rect x="{left + pw + 14}" y="{y}" width="10" height="10" fill="{colors[f]}"/>')
        parts.append(f'<text x="{left + pw + 30}" y="{y + 9}">{e(f)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _svg_donut(data: Mapping[str, Decimal], currency: str) -> str:
    total = float(sum(data.values()))
    tiers = sorted(data, key=lambda t: -data[t])
    W, H, cx, cy, r, r2 = 520, max(240, 30 + 20 * len(tiers)), 120, 120, 100, 55
    e = html.escape
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" role="img" '
             f'aria-label="cost share by tier ({e(currency)})" font-family="sans-serif" font-size="12">']  # fmt: skip
    a0 = -math.pi / 2
    for i, t in enumerate(tiers):
        share = float(data[t]) / total if total else 0.0
        color = _PALETTE[i % len(_PALETTE)]
        label = f"{e(t)}: {share:.1%} ({data[t]:.6f} {e(currency)})"
        if share >= 0.9999:
            parts.append(f'<circle cx="{cx}" cy="{cy}" r="{(r + r2) / 2}" fill="none" stroke="{color}" '
                         f'stroke-width="{r - r2}"><title>{label}</title></circle>')  # fmt: skip
        elif share > 0:
            a1 = a0 + share * 2 * math.pi
            large = 1 if share > 0.5 else 0
            p = (
                f"M {cx + r * math.cos(a0):.2f} {cy + r * math.sin(a0):.2f} "
                f"A {r} {r} 0 {large} 1 {cx + r * math.cos(a1):.2f} {cy + r * math.sin(a1):.2f} "
                f"L {cx + r2 * math.cos(a1):.2f} {cy + r2 * math.sin(a1):.2f} "
                f"A {r2} {r2} 0 {large} 0 {cx + r2 * math.cos(a0):.2f} {cy + r2 * math.sin(a0):.2f} Z"
            )
            parts.append(f'<path d="{p}" fill="{color}"><title>{label}</title></path>')
            a0 = a1
        parts.append(f'<rect x="260" y="{20 + i * 20}" width="12" height="12" fill="{color}"/>')
        parts.append(f'<text x="278" y="{30 + i * 20}">{label}</text>')
    parts.append("</svg>")
    return "".join(parts)


def to_html(rows: ReportRows, by_keys: Sequence[str], records: Iterable[LedgerRecord], *, title: str,
            rates: ExchangeRates | None) -> str:  # fmt: skip
    records = list(records)
    per_day, per_tier = _chart_data(records, rates)
    e = html.escape
    cols = _columns(rows, by_keys)
    lengths = latency_by_length(records)
    lhead = "".join(f"<th>{e(c)}</th>" for c in ("tokens", "bucket", "attempts", "share", "latency p50 ms",
                                                  "latency p95 ms", "TTFT p95 ms"))
    lbody = "\n".join(
        f"<tr><td>{e(r['tokens'])}</td><td>{e(r['bucket'])}</td><td>{r['attempts']}</td><td>{r['share']:.1%}</td>"
        f"<td>{e(_fmt(r['latency_p50_ms']))}</td><td>{e(_fmt(r['latency_p95_ms']))}</td>"
        f"<td>{e(_fmt(r['ttft_p95_ms']))}</td></tr>" for r in lengths)
    by_length = (f'<h2>Latency by length (successful attempts)</h2>\n<div class="scroll"><table><thead><tr>{lhead}'
                 f"</tr></thead><tbody>\n{lbody}\n</tbody></table></div>") if lengths else ""
    charts = []
    for cur in sorted(per_day):
        charts.append(f"<h2>Cost per feature per day ({e(cur)})</h2>\n{_svg_stacked_bars(per_day[cur], cur)}")
        charts.append(f"<h2>Cost share by tier ({e(cur)})</h2>\n{_svg_donut(per_tier[cur], cur)}")
    if not charts:
        charts.append("<p>No priced records in range: nothing to chart.</p>")
    head = "".join(f"<th>{e(c)}</th>" for c in cols)
    body = "\n".join("<tr>" + "".join(f"<td>{e(_fmt(r.get(c), c))}</td>" for c in cols) + "</tr>" for r in rows)
    tcols = ["currency", "requests", "attempts", "input_tokens", "cached_tokens", "output_tokens", "cost"]
    thead = "".join(f"<th>{e(c)}</th>" for c in tcols)
    tbody = "\n".join(
        "<tr>"
        + "".join(
            f"<td>{e(('in ' if (c == 'currency' and t.get('in_reporting_currency')) else '') + _fmt(t.get(c), c))}</td>"
            for c in tcols
        )
        + "</tr>"
        for t in rows.totals
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{e(title)}</title>
<style>
body {{ font-family: sans-serif; margin: 24px; color: #222; }}
table {{ border-collapse: collapse; font-size: 12px; }}
.scroll {{ overflow-x: auto; max-width: 100%; margin-bottom: 24px; }}
th, td {{ border: 1px solid #ccc; padding: 3px 6px; text-align: right; }}
th {{ background: #f3f3f3; }}
h2 {{ font-size: 15px; margin-top: 28px; }}
</style></head><body>
<h1>{e(title)}</h1>
{"".join(charts)}
<h2>Groups</h2>
<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>
{body}
</tbody></table></div>
<h2>Totals</h2>
<div class="scroll"><table><thead><tr>{thead}</tr></thead><tbody>
{tbody}
</tbody></table></div>
{by_length}
<p style="color:#777;font-size:11px">input_tokens include cached tokens. Unpriced attempts have no cost (never 0).
Generated {e(datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))} by llmroute.</p>
</body></html>
"""
