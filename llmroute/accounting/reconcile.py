"""Reconciliation: the ledger's tokens and cost per day and model beside what a platform billed.

`llmroute report --reconcile FILE` reads a platform's usage or billing export and prints, per day and
model, the ledger's requests, tokens and cost next to the platform's tokens and amount, the
difference, and its likely cause:

  * unpriced traffic     the ledger holds attempts with no price (`pricing.strict = false`);
  * estimated usage      the platform sent no usage for some attempts: llmroute counted the tokens;
  * outside llmroute     the bill counts more tokens than the ledger (another client, the console,
                         a key shared with something else);
  * not on the bill      the ledger counts more tokens than the bill (an export that is partial or
                         per another timezone, a model billed under another name);
  * tier or thinking     the same tokens, a different amount: a long prompt billed at a higher
                         input-length tier, thinking output at its own rate, or a price change the
                         catalogue does not have yet (`price_version` says which figures priced it).

The export format (docs/pricing.md): CSV with a header row, or JSON (a list of objects, or an object
holding one under `data`, `rows`, `items` or `usage`). Columns are matched by name, case and spaces not
mattering: `date`, `model`, `input_tokens`, `output_tokens`, `cached_tokens`, `amount`, optional
`currency`, with the spellings platforms' consoles use as aliases (see `_ALIASES`), so Fireworks'
documented billing-metrics CSV (`start_time`, `base_model_name`, `prompt_tokens`, `completion_tokens`,
no amount: tokens are compared alone) reads as it is. Rows of the same day
and model add up. A bad row is a ValueError naming the file, the line (CSV) or index (JSON) and the column.

Pure functions over text and ledger records: this module opens no file and keeps no clock.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import Decimal, InvalidOperation
from typing import Any, Iterable, Mapping, Sequence

from llmroute.accounting.ledger import LedgerRecord

__all__ = ["ExportRow", "ReconRow", "read_export", "reconcile", "parse_offset", "to_text", "to_rows"]

# Column names per field, normalised (lower case, no spaces, `-` and `_` dropped).
_ALIASES: dict[str, tuple[str, ...]] = {
    "date": ("date", "day", "usagedate", "billingdate", "billdate", "time", "starttime", "日期", "时间", "账单日期",
             "消费时间"),
    "model": ("model", "modelname", "modelid", "modelcode", "basemodelname", "模型", "模型名称", "模型名"),
    "input": ("inputtokens", "input", "prompttokens", "inputtokencount", "输入token", "输入tokens", "输入token数",
              "输入"),
    "output": ("outputtokens", "output", "completiontokens", "outputtokencount", "输出token", "输出tokens",
               "输出token数", "输出"),
    "cached": ("cachedtokens", "cached", "cachedinputtokens", "cachehittokens", "cachedprompttokens", "缓存命中token",
               "命中缓存token", "缓存token"),
    "amount": ("amount", "cost", "totalcost", "charge", "billedamount", "amountdue", "金额", "费用", "应付金额",
               "消费金额"),
    "currency": ("currency", "subtotalcurrencycode", "币种", "货币"),
    # Fireworks' usage-cost rows give the amount as units + nanos (`subtotal_units`, `subtotal_nanos`).
    "units": ("subtotalunits",),
    "nanos": ("subtotalnanos",),
}
_REQUIRED = ("date", "model")


@dataclass
class ExportRow:
    """One day and model of a platform's export (rows of the same day and model summed)."""

    day: str
    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    # None: the export has token counts only (Fireworks' billing-metrics CSV has no dollars).
    amount: Decimal | None = None
    currency: str | None = None


@dataclass
class _LedgerSide:
    requests: set[str] = field(default_factory=set)
    attempts: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    by_currency: dict[str, Decimal] = field(default_factory=dict)
    unpriced: int = 0
    estimated: int = 0
    long_prompts: int = 0
    tiered: int = 0
    thinking: int = 0
    versions: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class ReconRow:
    """One day and model: the ledger's side, the platform's, the difference (platform - ledger) and why."""

    day: str
    model: str
    ledger_requests: int
    ledger_input: int
    ledger_output: int
    ledger_cached: int
    ledger_cost: Decimal | None
    platform_input: int | None
    platform_output: int | None
    platform_cached: int | None
    platform_amount: Decimal | None
    currency: str | None
    difference: Decimal | None
    cause: str
    price_versions: str = ""

    @property
    def matches(self) -> bool:
        return self.cause == "matches"


def _norm(name: str) -> str:
    return re.sub(r"[\s_\-()（）]", "", str(name)).lower()


def _columns(header: Iterable[str], where: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for col in header:
        n = _norm(col)
        for key, names in _ALIASES.items():
            if key not in found and n in names:
                found[key] = col
    missing = [k for k in _REQUIRED if k not in found]
    if not ({"amount", "input", "output", "units"} & set(found)):
        missing.append("amount")
    if missing:
        raise ValueError(f"{where}: no {', '.join(missing)} column (found: {', '.join(map(str, header))}); "
                         "the export needs date, model, and amount or token counts (input_tokens, output_tokens, "
                         "cached_tokens) (docs/pricing.md)")
    return found


def _day(value: Any, where: str, offset: timedelta) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (datetime.fromtimestamp(float(value), timezone.utc) + offset).date().isoformat()
    text = str(value).strip().replace("/", "-")
    m = re.match(r"(\d{4})-(\d{1,2})-(\d{1,2})", text) or re.match(r"(\d{4})(\d{2})(\d{2})$", text)
    if not m:
        raise ValueError(f"{where}: date {value!r} is not a date (YYYY-MM-DD)")
    return f"{int(m.group(1)):04d}-{int(m.group(2)):02d}-{int(m.group(3)):02d}"


def _int(value: Any, what: str, where: str) -> int:
    if value is None or (isinstance(value, str) and not value.strip()):
        return 0
    try:
        d = Decimal(str(value).replace(",", "").strip())
    except InvalidOperation:
        raise ValueError(f"{where}: {what} {value!r} is not a number") from None
    if d < 0 or d != d.to_integral_value():
        raise ValueError(f"{where}: {what} {value!r} must be a whole number >= 0")
    return int(d)


def _amount(value: Any, where: str) -> tuple[Decimal, str | None]:
    text = str(value).replace(",", "").strip()
    currency = None
    for sign, cur in (("$", "USD"), ("¥", "CNY"), ("￥", "CNY"), ("元", "CNY")):
        if sign in text:
            currency, text = cur, text.replace(sign, "").strip()
    m = re.fullmatch(r"(-?[\d.]+)\s*([A-Za-z]{3})?", text)
    if not m:
        raise ValueError(f"{where}: amount {value!r} is not a number")
    try:
        amount = Decimal(m.group(1))
    except InvalidOperation:
        raise ValueError(f"{where}: amount {value!r} is not a number") from None
    return amount, (m.group(2).upper() if m.group(2) else currency)


def parse_offset(text: str | None) -> timedelta:
    """A timezone offset ("+08:00", "-5", "UTC") as a timedelta; the days of the bill are in it."""
    if not text or text.upper() in ("UTC", "Z"):
        return timedelta(0)
    m = re.fullmatch(r"([+-])?(\d{1,2})(?::?(\d{2}))?", text.strip())
    if not m or int(m.group(2)) > 14:
        raise ValueError(f"--bill-tz must be an offset like +08:00 or UTC, got {text!r}")
    sign = -1 if m.group(1) == "-" else 1
    return sign * timedelta(hours=int(m.group(2)), minutes=int(m.group(3) or 0))


def read_export(text: str, *, name: str = "export", offset: timedelta = timedelta(0)) -> list[ExportRow]:
    """A platform export (CSV or JSON text) as rows per day and model. Raises ValueError naming the file
    and the line or index at fault."""
    stripped = text.lstrip("\ufeff").lstrip()
    records: list[tuple[str, Mapping[str, Any]]] = []
    if stripped.startswith(("[", "{")):
        try:
            doc = json.loads(stripped)
        except json.JSONDecodeError as e:
            raise ValueError(f"{name}:{e.lineno}: not valid JSON: {e.msg}") from None
        if isinstance(doc, Mapping):
            doc = next((doc[k] for k in ("data", "rows", "items", "usage") if isinstance(doc.get(k), list)), None)
        if not isinstance(doc, list) or not all(isinstance(r, Mapping) for r in doc):
            raise ValueError(f"{name}: a JSON export is a list of objects (or holds one under data, rows, items "
                             "or usage)")
        records = [(f"{name}: [{i}]", r) for i, r in enumerate(doc)]
        header: list[str] = sorted({k for _, r in records for k in r})
    else:
        reader = csv.DictReader(io.StringIO(stripped))
        header = list(reader.fieldnames or [])
        records = [(f"{name}:{reader.line_num}", row) for row in reader]
    if not records:
        return []
    cols = _columns(header, name)
    out: dict[tuple[str, str], ExportRow] = {}
    for where, raw in records:
        model = str(raw.get(cols["model"]) or "").strip()
        if not model:
            raise ValueError(f"{where}: the model is empty")
        day = _day(raw.get(cols["date"]), where, offset)
        amount: Decimal | None = None
        currency: str | None = None
        if "amount" in cols:
            amount, currency = _amount(raw.get(cols["amount"]), where)
        elif "units" in cols:
            units, _ = _amount(raw.get(cols["units"]) or 0, where)
            nanos, _ = _amount(raw.get(cols["nanos"]) or 0, where) if "nanos" in cols else (Decimal(0), None)
            amount = units + nanos / Decimal(1_000_000_000)
        if "currency" in cols and str(raw.get(cols["currency"]) or "").strip():
            currency = str(raw.get(cols["currency"])).strip().upper()
        row = out.setdefault((day, model), ExportRow(day=day, model=model, currency=currency))
        row.input_tokens += _int(raw.get(cols["input"]) if "input" in cols else 0, "input_tokens", where)
        row.output_tokens += _int(raw.get(cols["output"]) if "output" in cols else 0, "output_tokens", where)
        row.cached_tokens += _int(raw.get(cols["cached"]) if "cached" in cols else 0, "cached_tokens", where)
        if amount is not None:
            row.amount = amount if row.amount is None else row.amount + amount
        if currency and row.currency and currency != row.currency:
            raise ValueError(f"{where}: {day} {model} is billed in both {row.currency} and {currency}")
        row.currency = row.currency or currency
    return list(out.values())


def _match_model(ledger_model: str, export_models: set[str]) -> str | None:
    if ledger_model in export_models:
        return ledger_model
    short = ledger_model.rsplit("/", 1)[-1]
    for m in export_models:
        if m.rsplit("/", 1)[-1].lower() == short.lower():
            return m
    return None


def _close(a: int, b: int, rel: Decimal) -> bool:
    return abs(a - b) <= max(Decimal(0), rel * max(a, b))


def _cause(side: _LedgerSide, exp: ExportRow | None, cost: Decimal | None, tolerance: Decimal,
           token_tolerance: Decimal, long_prompt: int) -> str:
    if exp is None:
        return "not on the bill: the platform's export has no row for this day and model"
    if not side.attempts:
        return "requests made outside llmroute: the ledger has no call of this model on this day"
    reasons: list[str] = []
    diff = None if cost is None or exp.amount is None else exp.amount - cost
    led_tokens = side.input_tokens + side.output_tokens
    bill_tokens = exp.input_tokens + exp.output_tokens
    has_tokens = bill_tokens > 0
    if side.unpriced:
        reasons.append(f"unpriced traffic: {side.unpriced} attempt(s) with no price")
    if side.estimated:
        reasons.append(f"estimated usage: {side.estimated} attempt(s) counted by llmroute, not by the platform")
    if has_tokens and not _close(led_tokens, bill_tokens, token_tolerance):
        extra = bill_tokens - led_tokens
        if extra > 0 and not side.estimated:
            reasons.append(f"requests made outside llmroute: the bill counts {extra} more tokens "
                           f"({exp.input_tokens - side.input_tokens} input, {exp.output_tokens - side.output_tokens} output)")
        elif extra < 0 and not side.estimated:
            reasons.append(f"not on the bill: the ledger counts {-extra} more tokens (a partial export, another "
                           "timezone's days, or a model billed under another name)")
    elif diff is not None and abs(diff) > tolerance and not side.unpriced:
        why = []
        if side.long_prompts:
            why.append(f"{side.long_prompts} request(s) with prompts over {long_prompt} tokens")
        if side.reasoning_tokens:
            why.append(f"{side.reasoning_tokens} reasoning tokens")
        if exp.cached_tokens != side.cached_tokens:
            why.append(f"cached tokens {side.cached_tokens} here, {exp.cached_tokens} on the bill")
        priced_as = []
        if side.tiered:
            priced_as.append(f"{side.tiered} priced at a higher tier")
        if side.thinking:
            priced_as.append(f"{side.thinking} at the thinking rate")
        reasons.append("tier or thinking rates: the same tokens cost "
                       f"{'more' if diff > 0 else 'less'} on the bill"
                       + (f" ({'; '.join(why)})" if why else "")
                       + (f"; the ledger priced {', '.join(priced_as)}" if priced_as else "")
                       + "; check the catalogue's tiers, thinking and cache rates (`llmroute prices diff`)")
    if not reasons:
        if diff is not None and abs(diff) > tolerance:
            reasons.append("amounts differ beyond the tolerance")
        else:
            return "matches"
    return "; ".join(reasons)


def reconcile(records: Iterable[LedgerRecord], export: Sequence[ExportRow], *, platform: str | None = None,
              offset: timedelta = timedelta(0), tolerance: Decimal = Decimal("0.01"),
              token_tolerance: Decimal = Decimal("0.001"), long_prompt: int = 131072) -> list[ReconRow]:
    """Per day and model, the ledger beside the export. Ledger records are taken on the export's days
    (in the bill's timezone, `offset`) and, with `platform`, only those of that provider name or kind;
    without it, only the models the export names. `tolerance`: the amount difference (in the bill's
    currency) still called a match; `token_tolerance`: the relative token difference still called equal."""
    models = {r.model for r in export}
    days = {r.day for r in export}
    sides: dict[tuple[str, str], _LedgerSide] = defaultdict(_LedgerSide)
    for rec in records:
        if platform is not None and platform not in (rec.provider, rec.provider_kind):
            continue
        day = (datetime.fromtimestamp(rec.ts, timezone.utc) + offset).date().isoformat()
        if day not in days:
            continue
        model = _match_model(rec.model or "", models)
        if model is None:
            if platform is None:
                continue
            model = rec.model or "(none)"
        side = sides[(day, model)]
        side.requests.add(rec.request_id)
        side.attempts += 1
        side.input_tokens += rec.input_tokens
        side.output_tokens += rec.output_tokens
        side.cached_tokens += rec.cached_tokens
        side.reasoning_tokens += rec.reasoning_tokens
        if rec.price_version:
            side.versions.add(rec.price_version)
        if not rec.priced and rec.cache not in ("hit", "semantic-hit"):
            side.unpriced += 1
        elif rec.cost is not None and rec.currency:
            side.by_currency[rec.currency] = side.by_currency.get(rec.currency, Decimal(0)) + rec.cost
        if rec.usage_estimated or rec.estimated:
            side.estimated += 1
        if rec.input_tokens > long_prompt:
            side.long_prompts += 1
        detail = rec.price_detail or ""
        side.tiered += "tier>" in detail
        side.thinking += "thinking" in detail
    by_key = {(r.day, r.model): r for r in export}
    rows: list[ReconRow] = []
    for key in sorted(set(by_key) | set(sides)):
        exp = by_key.get(key)
        side = sides.get(key) or _LedgerSide()
        # The bill's currency, else (an export without one) the ledger's.
        currency = exp.currency if exp and exp.currency else next(iter(side.by_currency), None)
        if len(side.by_currency) > 1 or (currency and side.by_currency and currency not in side.by_currency):
            cost = None
            cause = f"currencies differ: the ledger holds {', '.join(sorted(side.by_currency))}, the bill {currency}"
        else:
            cost = side.by_currency.get(currency or "", Decimal(0)) if (side.attempts or exp) else None
            cause = _cause(side, exp, cost, tolerance, token_tolerance, long_prompt)
        rows.append(ReconRow(
            day=key[0], model=key[1], ledger_requests=len(side.requests), ledger_input=side.input_tokens,
            ledger_output=side.output_tokens, ledger_cached=side.cached_tokens, ledger_cost=cost,
            platform_input=exp.input_tokens if exp else None, platform_output=exp.output_tokens if exp else None,
            platform_cached=exp.cached_tokens if exp else None, platform_amount=exp.amount if exp else None,
            currency=currency,
            difference=(exp.amount - cost) if exp is not None and exp.amount is not None and cost is not None else None,
            cause=cause, price_versions="+".join(sorted(side.versions)),
        ))
    return rows


def _money(v: Decimal | None) -> str:
    return "-" if v is None else format(v.quantize(Decimal("0.000001")).normalize(), "f")


def to_rows(rows: Sequence[ReconRow]) -> list[dict[str, Any]]:
    """JSON-ready dicts (amounts as exact decimal strings)."""
    out = []
    for r in rows:
        d = {k: getattr(r, k) for k in ReconRow.__dataclass_fields__}
        for k in ("ledger_cost", "platform_amount", "difference"):
            d[k] = None if d[k] is None else str(d[k])
        out.append(d)
    return out


def to_text(rows: Sequence[ReconRow]) -> str:
    """A table per day and model, then the totals and the days that do not match with their cause."""
    head = ("day", "model", "reqs", "ledger in/out/cached", "ledger cost", "bill in/out/cached", "bill amount",
            "diff", "cur")
    body = []
    for r in rows:
        bill_tokens = ("-" if r.platform_input is None
                       else f"{r.platform_input}/{r.platform_output}/{r.platform_cached}")
        body.append((r.day, r.model, str(r.ledger_requests), f"{r.ledger_input}/{r.ledger_output}/{r.ledger_cached}",
                     _money(r.ledger_cost), bill_tokens, _money(r.platform_amount), _money(r.difference),
                     r.currency or ""))
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)]
    widths[1] = min(widths[1], 40)
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths)).rstrip()]
    for b in body:
        lines.append("  ".join((c if len(c) <= w else c[: w - 1] + "…").ljust(w) for c, w in zip(b, widths)).rstrip())
    totals: dict[str, list[Decimal]] = {}
    for r in rows:
        if r.currency and r.ledger_cost is not None and r.platform_amount is not None:
            t = totals.setdefault(r.currency, [Decimal(0), Decimal(0)])
            t[0] += r.ledger_cost
            t[1] += r.platform_amount
    lines.append("")
    for cur, (led, bill) in sorted(totals.items()):
        lines.append(f"total {cur} (days and models on both sides): ledger {_money(led)}, bill {_money(bill)}, "
                     f"difference {_money(bill - led)}")
    off = [r for r in rows if not r.matches]
    lines.append(f"{len(rows) - len(off)} of {len(rows)} day/model rows match"
                 + (":" if off else "."))
    for r in off:
        lines.append(f"  {r.day} {r.model}: {r.cause}")
    return "\n".join(lines) + "\n"
