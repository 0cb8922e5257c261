"""Cost reports from a ledger file: `llmroute report` and `llmroute.report(...)`.

    llmroute report --ledger llmroute-ledger.db --by feature,tier,provider,model,day --since 7d \
                    --format table|csv|json|html [--out FILE] [--reprice KIND[:REGION]] [--config FILE]

Per group (the `--by` keys plus the currency, since amounts in different currencies never add up):
requests (distinct request ids), attempts, errors and error rate (attempts whose status is not ok,
over attempts), tokens (`input_tokens` includes cached ones, as OpenAI's `prompt_tokens`), cost,
cost per request, p50/p95 latency and TTFT (over attempts that have them), and counts of unpriced and
estimated attempts. Totals come per currency, and in the reporting currency when exchange rates are
set (`[pricing]` in `--config`). Unpriced attempts form groups of their own with `cost = null`.

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

import argparse
import csv
import html
import io
import json
import math
import re
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ..errors import ConfigError, LLMRouteError
from .cost import compute_cost
from .ledger import LedgerRecord, read_records
from .prices import ExchangeRates, PriceBook, PricingConfig

__all__ = ["report", "ReportRows", "parse_time", "percentile", "main", "GROUP_KEYS"]

GROUP_KEYS = ("feature", "tier", "pool", "provider", "provider_kind", "deployment", "model", "day", "status")
FORMATS = ("table", "csv", "json", "html")


class ReportRows(list):
    """The groups of a report, one dict per group (a list, so `pandas.DataFrame(rows)` works);
    `.totals` holds the totals per currency."""

    totals: list[dict[str, Any]]

    def __init__(self, rows: Iterable[dict[str, Any]] = (), totals: Sequence[dict[str, Any]] = ()) -> None:
        super().__init__(rows)
        self.totals = list(totals)


def percentile(values: Sequence[float], p: float) -> float | None:
    """The p-th percentile (0-100) by linear interpolation; None for no values."""
    if not values:
        return None
    xs = sorted(values)
    k = (len(xs) - 1) * p / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


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
    request_ids: set = field(default_factory=set)
    attempts: int = 0
    errors: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    cost: Decimal = Decimal(0)
    unpriced: int = 0
    estimated: int = 0
    latency: list = field(default_factory=list)
    ttft: list = field(default_factory=list)
    reprice_cost: Decimal = Decimal(0)
    reprice_currency: set = field(default_factory=set)
    reprice_unpriced: int = 0

    def add(self, rec: LedgerRecord) -> None:
        self.request_ids.add(rec.request_id)
        self.attempts += 1
        self.errors += rec.status != "ok"
        self.input_tokens += rec.input_tokens
        self.output_tokens += rec.output_tokens
        self.cached_tokens += rec.cached_tokens
        self.reasoning_tokens += rec.reasoning_tokens
        if rec.cost is None:
            self.unpriced += 1
        else:
            self.cost += rec.cost
        self.estimated += bool(rec.estimated)
        if rec.latency_ms is not None:
            self.latency.append(rec.latency_ms)
        if rec.ttft_ms is not None:
            self.ttft.append(rec.ttft_ms)


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
) -> ReportRows:
    """Rows of a cost report over a ledger file (SQLite or JSONL) or an iterable of records.

    `by`: group keys (`GROUP_KEYS` or `metadata.<key>`), a sequence or "a,b". `since`/`until`: unix
    seconds, `7d`-style durations, ISO dates or datetimes. `reprice`: a platform kind (optionally
    `kind:region`) to price the same traffic at. `rates`: to add reporting-currency figures (default:
    the price book's config, if it sets them). Amounts are exact Decimals.
    """
    by_keys = _check_by(by.split(",") if isinstance(by, str) else list(by))
    t_since, t_until = parse_time(since, now=now), parse_time(until, now=now, what="--until")
    if price_book is None and reprice is not None:
        price_book = PriceBook()
    if rates is None and price_book is not None:
        rates = price_book.rates()
    target = _parse_reprice(reprice) if reprice else None
    if target is not None and target[0] not in {p.kind for p in price_book.table.entries}:  # type: ignore[union-attr]
        raise ValueError(f"--reprice: no shipped prices for platform {target[0]!r}")

    if isinstance(ledger, (str, Path)):
        records: Iterable[LedgerRecord] = read_records(ledger, since=t_since, until=t_until)
    else:
        records = (
            r for r in ledger if (t_since is None or r.ts >= t_since) and (t_until is None or r.ts < t_until)
        )

    groups: dict[tuple, _Group] = defaultdict(_Group)
    totals: dict[str | None, _Group] = defaultdict(_Group)
    class_cache: dict[tuple[str | None, str | None], Any] = {}
    for rec in records:
        key = tuple(_key_value(rec, k) for k in by_keys) + (rec.currency if rec.cost is not None else None,)
        g = groups[key]
        g.add(rec)
        totals[key[-1]].add(rec)
        if target is not None:
            ck = (rec.provider, rec.model)
            if ck not in class_cache:
                cls = price_book.class_of(rec.model or "", rec.provider)  # type: ignore[union-attr]
                class_cache[ck] = cls and price_book.price_for_class(target[0], cls, target[1])  # type: ignore[union-attr]
            tp = class_cache[ck]
            if tp:
                c = compute_cost(
                    tp, prompt_tokens=rec.input_tokens, completion_tokens=rec.output_tokens, cached_tokens=rec.cached_tokens
                )
                for gg in (g, totals[key[-1]]):
                    gg.reprice_cost += c.amount  # type: ignore[operator]
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
        cost_per_request=(cost / requests) if (cost is not None and requests) else None,
        unpriced_attempts=g.unpriced,
        estimated_attempts=g.estimated,
        latency_p50_ms=_ms(percentile(g.latency, 50)),
        latency_p95_ms=_ms(percentile(g.latency, 95)),
        ttft_p50_ms=_ms(percentile(g.ttft, 50)),
        ttft_p95_ms=_ms(percentile(g.ttft, 95)),
    )
    if rates is not None:
        row["reporting_currency"] = rates.reporting_currency
        row["cost_in_reporting_currency"] = rates.convert(cost, currency) if cost is not None else None
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
        "unpriced_attempts": totals[None].unpriced if None in totals else 0,
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
        return "-"
    if isinstance(v, Decimal):
        return f"{v:.6f}" if "cost" in key else f"{v.normalize():f}"
    if isinstance(v, float):
        return f"{v:.1%}" if key == "error_rate" else f"{v:.1f}"
    if isinstance(v, list):
        return ",".join(map(str, v)) or "-"
    return str(v)


_TABLE_COLS = [
    "requests", "attempts", "error_rate", "input_tokens", "cached_tokens", "output_tokens", "cost", "currency",
    "cost_per_request", "latency_p50_ms", "latency_p95_ms", "ttft_p50_ms", "ttft_p95_ms",
]  # fmt: skip


def _columns(rows: ReportRows, by_keys: Sequence[str]) -> list[str]:
    cols = list(by_keys) + _TABLE_COLS
    if rows and "cost_in_reporting_currency" in rows[0]:
        cols.append("cost_in_reporting_currency")
    if rows and "reprice_cost" in rows[0]:
        cols += ["reprice_cost", "reprice_currency", "reprice_unpriced"]
    if any(r.get("unpriced_attempts") for r in rows):
        cols.append("unpriced_attempts")
    if any(r.get("estimated_attempts") for r in rows):
        cols.append("estimated_attempts")
    return cols


def to_table(rows: ReportRows, by_keys: Sequence[str]) -> str:
    cols = _columns(rows, by_keys)
    body = [[_fmt(r.get(c), c) for c in cols] for r in rows]
    tcols = ["currency", "requests", "attempts", "input_tokens", "cached_tokens", "output_tokens", "cost"]
    tbody = [
        [("in " if t.get("in_reporting_currency") else "") + _fmt(t.get("currency"))] + [_fmt(t.get(c), c) for c in tcols[1:]]
        for t in rows.totals
    ]
    out = io.StringIO()
    for header, data in ((cols, body), (["total " + tcols[0], *tcols[1:]], tbody)):
        widths = [max([len(h)] + [len(d[i]) for d in data]) for i, h in enumerate(header)]
        out.write("  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip() + "\n")
        out.write("  ".join("-" * w for w in widths) + "\n")
        for d in data:
            out.write("  ".join(x.rjust(w) if x[:1].isdigit() or x[:1] == "-" else x.ljust(w) for x, w in zip(d, widths)).rstrip() + "\n")
        out.write("\n")
    if not rows:
        out.write("(no records in range)\n")
    return out.getvalue()


def to_csv(rows: ReportRows, by_keys: Sequence[str]) -> str:
    cols = list(by_keys) + [c for c in (rows[0].keys() if rows else _TABLE_COLS) if c not in by_keys]
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(cols)
    for r in rows:
        w.writerow(["" if r.get(c) is None else str(r.get(c)) for c in cols])
    return out.getvalue()


# --------------------------------------------------------------------------------------- HTML
_PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"]


def _chart_data(records: Iterable[LedgerRecord], rates: ExchangeRates | None):
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
    exp = 10 ** math.floor(math.log10(x))
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
    per_day, per_tier = _chart_data(records, rates)
    e = html.escape
    cols = _columns(rows, by_keys)
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
table {{ border-collapse: collapse; font-size: 12px; margin-bottom: 24px; }}
th, td {{ border: 1px solid #ccc; padding: 3px 6px; text-align: right; }}
th {{ background: #f3f3f3; }}
h2 {{ font-size: 15px; margin-top: 28px; }}
</style></head><body>
<h1>{e(title)}</h1>
{"".join(charts)}
<h2>Groups</h2>
<table><thead><tr>{head}</tr></thead><tbody>
{body}
</tbody></table>
<h2>Totals</h2>
<table><thead><tr>{thead}</tr></thead><tbody>
{tbody}
</tbody></table>
<p style="color:#777;font-size:11px">input_tokens include cached tokens. Unpriced attempts have no cost (never 0).
Generated {e(datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))} by llmroute.</p>
</body></html>
"""


# ---------------------------------------------------------------------------------------- CLI
def _load_config(path: str) -> tuple[PricingConfig, str | None]:
    import tomllib

    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except OSError as e:
        raise ConfigError(f"cannot read: {e.strerror}", path=path) from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"not valid TOML: {e}", path=path) from None
    try:
        pricing = PricingConfig.model_validate(doc.get("pricing", {}))
    except Exception as e:  # pydantic.ValidationError
        raise ConfigError(str(e), path=path, key="pricing") from None
    ledger = doc.get("ledger", {}).get("path") if isinstance(doc.get("ledger"), dict) else None
    if ledger and not Path(ledger).is_absolute():
        ledger = str(Path(path).parent / ledger)
    return pricing, ledger


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="llmroute report", description="Cost report from an llmroute ledger.")
    p.add_argument("--ledger", help="ledger file (SQLite or JSONL); default: [ledger] path of --config, "
                                    "else llmroute-ledger.db")  # fmt: skip
    p.add_argument("--by", default="feature", help=f"comma-separated group keys: {','.join(GROUP_KEYS)},metadata.<key>")
    p.add_argument("--since", help="7d, 24h, 30m, or an ISO date/datetime (UTC)")
    p.add_argument("--until", help="same forms as --since")
    p.add_argument("--format", default="table", choices=FORMATS)
    p.add_argument("--out", help="write the report here (html default: llmroute-report.html)")
    p.add_argument("--reprice", metavar="KIND[:REGION]", help="price the same traffic at this platform's prices")
    p.add_argument("--config", help="llmroute TOML config, for [pricing] overrides and exchange rates")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        book, ledger = None, args.ledger
        if args.config:
            pricing, cfg_ledger = _load_config(args.config)
            book = PriceBook(pricing)
            ledger = ledger or cfg_ledger
        ledger = ledger or "llmroute-ledger.db"
        if not Path(ledger).exists():
            print(f"llmroute report: no ledger at {ledger}", file=sys.stderr)
            return 2
        from ..cli_paths import check_ledger_input, check_output

        check_ledger_input(ledger, "--ledger")  # every path is checked before the report is built
        check_output(args.out or ("llmroute-report.html" if args.format == "html" else None), "--out")
        by_keys = _check_by(args.by.split(","))
        now = time.time()
        rows = report(ledger, by=by_keys, since=args.since, until=args.until, reprice=args.reprice,
                      price_book=book, now=now)  # fmt: skip
        if args.format == "json":
            text = to_json(rows) + "\n"
        elif args.format == "csv":
            text = to_csv(rows, by_keys)
        elif args.format == "table":
            text = to_table(rows, by_keys)
        else:
            t_since, t_until = parse_time(args.since, now=now), parse_time(args.until, now=now, what="--until")
            title = f"llmroute cost report: {Path(ledger).name}" + (f", since {args.since}" if args.since else "")
            text = to_html(rows, by_keys, read_records(ledger, since=t_since, until=t_until), title=title,
                           rates=(book.rates() if book else None))  # fmt: skip
            out = Path(args.out or "llmroute-report.html")
            out.write_text(text, encoding="utf-8")
            print(f"wrote {out} ({len(rows)} groups)")
            return 0
        if args.out:
            Path(args.out).write_text(text, encoding="utf-8")
        else:
            sys.stdout.write(text)
        return 0
    except (ValueError, LLMRouteError, FileNotFoundError) as e:
        print(f"llmroute report: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
