"""`llmroute plan`: GPUs (or instances) needed to hold a peak, the monthly cost of each billing model,
and the traffic at which per-token and per-GPU billing cost the same.

Throughput per GPU comes either from a bench result (one self-hosted instance measured at several
load levels: the best level that stayed healthy) or from a figure the team already knows
(`--tokens-per-s-per-gpu 800-1500`, a range or one number). Then

    GPUs = ceil(peak_rps * mean_output_tokens / (output_tokens_per_s_per_gpu * (1 - headroom)))

printed before headroom (the field guide's arithmetic: 50 req/s x 200 tokens = 10,000 tokens/s;
10,000 / 1,500 = 6.7 -> 7 to 10,000 / 800 = 12.5 -> 13 GPUs) and with it. The month is priced per
option: GPUs on demand sized for the peak; the lower bound of an autoscaler following the mean;
reserved GPUs at the guide's 30-50% discount (`--reserved-discount`); and per-token billing at a
price given as NAME=IN/OUT or looked up in the shipped catalogue (`together:openai/gpt-oss-120b`,
`bailian@singapore:qwen-plus`), with cached input tokens at the cached rate. The break-even is the
mean request rate at which per-token billing costs as much as the fleet sized for the peak.

The traffic profile is given (`--peak-rps`, `--mean-rps`, `--mean-input-tokens`,
`--mean-cached-tokens`, `--mean-output-tokens`) or read from the ledger's last N days (`--ledger
FILE --days N`: successful calls, mean tokens per call, the busiest minute as the peak).

`gpu_range`, `monthly_costs`, `break_even_rps` and `traffic_from_records` are pure;
`main(argv)` is the command-line shell.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from llmroute.errors import ConfigError
from llmroute.accounting.prices import load_price_table

__all__ = [
    "LevelChoice", "choose_level", "monthly_costs", "parse_price", "parse_throughput",
    "gpu_range", "TokenPrice", "catalogue_price", "break_even_rps", "Traffic", "traffic_from_records",
]

SECONDS_PER_HOUR = 3600.0
# Field guide, section 2.5: moving stable traffic to reserved instances cuts the cost by 30% to 50%.
GUIDE_RESERVED_DISCOUNT = (0.3, 0.5)


@dataclass(frozen=True)
class LevelChoice:
    target: str
    load: str  # "concurrency" | "rate"
    level: float
    output_tokens_per_s: float  # per instance, counting only requests that met the SLOs when set
    success_rate: float | None
    mean_input_tokens: float | None
    mean_output_tokens: float | None
    reason: str


def _level(res: Mapping[str, Any]) -> tuple[str, float]:
    key = "concurrency" if res.get("concurrency") is not None else "rate"
    return key, float(res[key])


def _usable_tokens_per_s(res: Mapping[str, Any]) -> float:
    """Output tokens/s, scaled down to the share of requests that met the SLOs when SLOs were set."""
    tok = res.get("output_tokens_per_s") or 0.0
    rps = res.get("requests_per_s") or 0.0
    if res.get("slo") and rps > 0:
        return tok * min((res.get("goodput_per_s") or 0.0) / rps, 1.0)
    return tok


def choose_level(report: Mapping[str, Any], *, target: str | None = None, level: float | None = None,
                 min_success_rate: float = 0.99) -> LevelChoice:
    """The bench level whose throughput the plan trusts: `level` if given, else the best healthy one."""
    results = list(report.get("results") or [])
    targets = list(dict.fromkeys(r["target"] for r in results))
    if target is None:
        if len(targets) != 1:
            raise ConfigError(f"the bench result holds {len(targets)} targets ({', '.join(targets)}); pick one",
                              key="--target")
        target = targets[0]
    mine = [r for r in results if r["target"] == target]
    if not mine:
        raise ConfigError(f"no results for target {target!r} (has: {', '.join(targets)})", key="--target")
    if level is not None:
        picked = [r for r in mine if _level(r)[1] == level]
        if not picked:
            raise ConfigError(f"no level {level:g} for {target!r} (has: "
                              f"{', '.join(format(_level(r)[1], 'g') for r in mine)})", key="--level")
        best, reason = picked[0], "the level asked for"
    else:
        healthy = [r for r in mine if (r.get("success_rate") or 0.0) >= min_success_rate and _usable_tokens_per_s(r) > 0]
        if not healthy:
            raise ConfigError(f"no level of {target!r} reached success rate {min_success_rate:g} with output",
                              key="--bench")
        best = max(healthy, key=_usable_tokens_per_s)
        reason = (f"the highest output tokens/s among levels with success rate >= {min_success_rate:g}"
                  + (" (only requests meeting the SLOs counted)" if best.get("slo") else ""))
    load, value = _level(best)
    return LevelChoice(target=target, load=load, level=value, output_tokens_per_s=_usable_tokens_per_s(best),
                       success_rate=best.get("success_rate"), mean_input_tokens=best.get("mean_input_tokens"),
                       mean_output_tokens=best.get("mean_output_tokens"), reason=reason)


def parse_price(text: str, *, option: str, pair: bool) -> tuple[str, tuple[float, ...]]:
    """`"together=0.88/0.88"` (pair: input/output per million) or `"h100=2.49"` -> (name, prices)."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise ConfigError(f"{text!r} is not NAME={'IN/OUT' if pair else 'PRICE'}", key=option)
    parts = value.split("/")
    if len(parts) != (2 if pair else 1):
        raise ConfigError(f"{text!r}: expected {'two prices IN/OUT' if pair else 'one price'}", key=option)
    try:
        prices = tuple(float(p) for p in parts)
    except ValueError:
        raise ConfigError(f"{text!r}: prices must be numbers (USD)", key=option) from None
    if any(not math.isfinite(p) or p < 0 for p in prices):
        raise ConfigError(f"{text!r}: prices must be zero or more", key=option)
    return name.strip(), prices


def parse_throughput(text: str, *, option: str = "--tokens-per-s-per-gpu") -> tuple[float, float]:
    """`"800-1500"` -> (800.0, 1500.0); `"1000"` -> (1000.0, 1000.0). Both must be positive."""
    low_s, sep, high_s = text.partition("-")
    try:
        low = float(low_s.replace(",", "").replace("_", ""))
        high = float(high_s.replace(",", "").replace("_", "")) if sep else low
    except ValueError:
        raise ConfigError(f"{text!r} is not a number or a range LOW-HIGH (e.g. 800-1500)", key=option) from None
    if not (math.isfinite(low) and math.isfinite(high)) or low <= 0 or high < low:
        raise ConfigError(f"{text!r}: need 0 < LOW <= HIGH", key=option)
    return low, high


def _ceil(x: float) -> int:
    return max(1, math.ceil(x - 1e-9))


def gpu_range(*, needed_tokens_per_s: float, low: float, high: float, headroom: float) -> dict[str, Any]:
    """GPUs for `needed_tokens_per_s` at `high` (fewest) and `low` (most) tokens/s per GPU, before and after
    headroom, with the exact ratios so the arithmetic can be printed."""
    if not 0 <= headroom < 1:
        raise ConfigError("must be in [0, 1)", key="--headroom")
    if needed_tokens_per_s <= 0:
        raise ConfigError("peak rate and mean output tokens must be positive", key="--peak-rps/--mean-output-tokens")
    if low <= 0 or high < low:
        raise ConfigError("the throughput per GPU (or the bench level's) must be positive",
                          key="--tokens-per-s-per-gpu/--bench")
    usable = 1 - headroom
    return {
        "ratio_fast": needed_tokens_per_s / high, "ratio_slow": needed_tokens_per_s / low,
        "gpus_fast": _ceil(needed_tokens_per_s / high), "gpus_slow": _ceil(needed_tokens_per_s / low),
        "usable_fast": high * usable, "usable_slow": low * usable,
        "ratio_fast_headroom": needed_tokens_per_s / (high * usable),
        "ratio_slow_headroom": needed_tokens_per_s / (low * usable),
        "gpus_fast_headroom": _ceil(needed_tokens_per_s / (high * usable)),
        "gpus_slow_headroom": _ceil(needed_tokens_per_s / (low * usable)),
    }


@dataclass(frozen=True)
class TokenPrice:
    """A per-token price per million tokens, and where it came from."""

    name: str
    input: float
    output: float
    cached: float | None = None  # None: cached input costs the input price
    currency: str = "USD"
    source: str = "given"

    def per_request(self, input_tokens: float, cached_tokens: float, output_tokens: float) -> float:
        cached_rate = self.input if self.cached is None else self.cached
        return ((input_tokens - cached_tokens) * self.input + cached_tokens * cached_rate
                + output_tokens * self.output) / 1e6


def catalogue_price(spec: str, *, option: str = "--per-token") -> TokenPrice:
    """`KIND[@REGION]:MODEL` looked up in the shipped price table (llmroute prices lists it)."""
    place, sep, model = spec.partition(":")
    kind, _, region = place.partition("@")
    if not sep or not kind or not model:
        raise ConfigError(f"{spec!r} is not NAME=IN/OUT nor KIND[@REGION]:MODEL", key=option)
    price = load_price_table().get(kind, region or None, model)
    if price is None:
        raise ConfigError(f"{spec!r}: no shipped price for {model!r} on {kind}{'@' + region if region else ''} "
                          f"(`llmroute prices {model}` lists what ships; or give NAME=IN/OUT)", key=option)
    flag = "" if price.confirmed else ", unconfirmed"
    return TokenPrice(name=spec, input=float(price.input_per_million), output=float(price.output_per_million),
                      cached=None if price.cached_input_per_million is None else float(price.cached_input_per_million),
                      currency=price.currency, source=f"catalogue {price.version}{flag}")


def _token_price(text: str) -> TokenPrice:
    """NAME=IN/OUT, NAME=IN/CACHED/OUT (USD per million) or KIND[@REGION]:MODEL from the catalogue."""
    if "=" not in text:
        return catalogue_price(text)
    name, _, value = text.partition("=")
    parts = value.split("/")
    if len(parts) == 3:
        name, (pin, pout) = parse_price(f"{name}={parts[0]}/{parts[2]}", option="--per-token", pair=True)
        _, (pcached,) = parse_price(f"{name}={parts[1]}", option="--per-token", pair=False)
        return TokenPrice(name=name, input=pin, output=pout, cached=pcached)
    name, (pin, pout) = parse_price(text, option="--per-token", pair=True)
    return TokenPrice(name=name, input=pin, output=pout)


def break_even_rps(*, fleet_cost_per_month: float, cost_per_request: float, hours_per_month: float) -> float | None:
    """The mean request rate at which per-token billing costs `fleet_cost_per_month`."""
    if cost_per_request <= 0:
        return None
    return fleet_cost_per_month / (cost_per_request * hours_per_month * SECONDS_PER_HOUR)


@dataclass(frozen=True)
class Traffic:
    """A traffic profile: rates in requests/s, token means per successful call."""

    peak_rps: float
    mean_rps: float
    mean_input_tokens: float
    mean_cached_tokens: float
    mean_output_tokens: float
    calls: int = 0
    days: float = 0.0


def traffic_from_records(records: Sequence[Any], *, since: float, until: float) -> Traffic:
    """The profile of ledger records in [since, until): successful calls (one per request id, its ok
    attempt), mean tokens per call, mean rate over the window and the busiest minute as the peak."""
    ok: dict[str, Any] = {}
    for rec in records:
        if rec.status == "ok" and since <= rec.ts < until:
            ok.setdefault(rec.request_id, rec)
    if not ok:
        raise ConfigError("no successful calls in the ledger over that window", key="--ledger")
    calls = list(ok.values())
    n = len(calls)
    per_minute: dict[int, int] = {}
    for rec in calls:
        per_minute[int(rec.ts // 60)] = per_minute.get(int(rec.ts // 60), 0) + 1
    window = until - since
    return Traffic(
        peak_rps=max(per_minute.values()) / 60.0, mean_rps=n / window,
        mean_input_tokens=sum(r.input_tokens for r in calls) / n,
        mean_cached_tokens=sum(r.cached_tokens for r in calls) / n,
        mean_output_tokens=sum(r.output_tokens for r in calls) / n, calls=n, days=window / 86400.0)


def monthly_costs(*, fleet: tuple[int, int], mean_fleet: tuple[int, int], unit: str, hours_per_month: float,
                  per_instance: Sequence[tuple[str, float]], reserved_discount: tuple[float, float],
                  token_prices: Sequence[TokenPrice], traffic: Traffic, mean_input_tokens: float,
                  rates: Mapping[str, float]) -> list[dict[str, Any]]:
    """One row per option, USD per month as (low, high): on demand for the peak, autoscaled to the mean
    (a lower bound), reserved at the discount range, and per token at the mean rate."""
    disc_low, disc_high = reserved_discount
    hours = hours_per_month
    rows: list[dict[str, Any]] = []
    for name, hourly in per_instance:
        rows.append({"billing": "on-demand", "name": name, "price": f"${hourly:g}/{unit[:-1]}-hour",
                     "units": fleet, "usd_per_month": (fleet[0] * hourly * hours, fleet[1] * hourly * hours),
                     "basis": "sized for the peak, all month"})
        if mean_fleet[1] < fleet[1] or mean_fleet[0] < fleet[0]:
            rows.append({"billing": "autoscaled", "name": name, "price": f"${hourly:g}/{unit[:-1]}-hour",
                         "units": mean_fleet,
                         "usd_per_month": (mean_fleet[0] * hourly * hours, mean_fleet[1] * hourly * hours),
                         "basis": "lower bound: sized for the mean, all month"})
        if disc_high > 0:
            rows.append({"billing": "reserved", "name": name,
                         "price": f"{_span(disc_low * 100, disc_high * 100, lambda x: f'{x:.0f}')}% off",
                         "units": fleet, "usd_per_month": (fleet[0] * hourly * hours * (1 - disc_high),
                                                           fleet[1] * hourly * hours * (1 - disc_low)),
                         "basis": "sized for the peak, committed"})
    for tp in token_prices:
        rate = 1.0 if tp.currency == "USD" else rates.get(tp.currency)
        if rate is None:
            raise ConfigError(f"{tp.name!r} is priced in {tp.currency}: give --exchange-rate {tp.currency}=USD_VALUE",
                              key="--exchange-rate")
        per_req = tp.per_request(mean_input_tokens, traffic.mean_cached_tokens, traffic.mean_output_tokens) * rate
        monthly = per_req * traffic.mean_rps * SECONDS_PER_HOUR * hours
        rows.append({"billing": "per-token", "name": tp.name,
                     "price": f"${tp.input * rate:g}/{'' if tp.cached is None else f'${tp.cached * rate:g}/'}"
                              f"${tp.output * rate:g} per M",
                     "units": None, "usd_per_month": (monthly, monthly), "usd_per_request": per_req,
                     "basis": f"{traffic.mean_rps * SECONDS_PER_HOUR * hours:,.0f} requests ({tp.source})"})
    return rows


def _n(x: float) -> str:
    """A count the way the guide writes it: 10,000 / 6.7 / 12.5."""
    return f"{x:,.0f}" if abs(x - round(x)) < 1e-9 else f"{x:,.1f}"


def _money(x: float) -> str:
    return f"${x:,.0f}" if x >= 100 else f"${x:,.2f}"


def _span(a: float, b: float, fmt: Any = _money) -> str:
    return fmt(a) if abs(a - b) < 1e-9 else f"{fmt(a)}-{fmt(b)}"
