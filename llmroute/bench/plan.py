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

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from llmroute.errors import ConfigError, LLMRouteError
from llmroute.accounting.prices import load_price_table

__all__ = [
    "main", "LevelChoice", "choose_level", "monthly_costs", "parse_price", "parse_throughput",
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


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="llmroute plan",
        description="GPUs (or instances) needed to hold a peak rate, the monthly cost per billing model, and the "
                    "traffic at which per-token and per-GPU billing cost the same.",
        epilog="field guide example: llmroute plan --tokens-per-s-per-gpu 800-1500 --peak-rps 50 "
               "--mean-output-tokens 200")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--bench", help="a `llmroute bench --out` file measured on one instance")
    src.add_argument("--tokens-per-s-per-gpu", metavar="LOW-HIGH",
                     help="output tokens/s one GPU (or instance) sustains, known already: 1200 or 800-1500")
    p.add_argument("--peak-rps", type=float, help="peak requests per second to hold (or from --ledger)")
    p.add_argument("--mean-output-tokens", type=float, help="mean output tokens per request (or from --ledger)")
    p.add_argument("--mean-input-tokens", type=float,
                   help="mean input tokens per request, cached included (default: the bench level's, or --ledger)")
    p.add_argument("--mean-cached-tokens", type=float, help="mean cached input tokens per request (0)")
    p.add_argument("--mean-rps", type=float, help="mean requests/s over the month, for per-token and autoscaled "
                                                  "costs (default: the peak, an upper bound)")
    p.add_argument("--ledger", help="read the traffic profile from this ledger (SQLite or JSONL)")
    p.add_argument("--days", type=float, default=7.0, help="with --ledger: the last N days (7)")
    p.add_argument("--target", help="which target of the bench result (needed when it holds several)")
    p.add_argument("--level", type=float, help="use this concurrency (or rate) level's throughput")
    p.add_argument("--min-success-rate", type=float, default=0.99,
                   help="levels below this success rate are not trusted (0.99)")
    p.add_argument("--headroom", type=float, default=0.2,
                   help="keep this share of each GPU free for bursts and failover (0.2: plan each at 80%%)")
    p.add_argument("--hours-per-month", type=float, default=730.0, help="hours billed per month (730)")
    p.add_argument("--per-instance", "--per-gpu-hour", action="append", default=[], metavar="NAME=USD_PER_HOUR",
                   help="an on-demand GPU (instance) price, repeatable: l4=0.8")
    p.add_argument("--reserved-discount", default="{}-{}".format(*GUIDE_RESERVED_DISCOUNT), metavar="LOW-HIGH",
                   help="reserved/committed discount off the on-demand price (the guide's 30-50%%: 0.3-0.5; 0 to omit)")
    p.add_argument("--per-token", action="append", default=[], metavar="PRICE",
                   help="a per-token price, repeatable: NAME=IN/OUT or NAME=IN/CACHED/OUT (USD per million), or "
                        "KIND[@REGION]:MODEL from the shipped catalogue (together:openai/gpt-oss-120b)")
    p.add_argument("--exchange-rate", action="append", default=[], metavar="CUR=USD",
                   help="convert a catalogue price in CUR to USD: CNY=0.14")
    p.add_argument("--json", dest="json_out", help="write the plan as JSON here")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    ns = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        from llmroute.cli.paths import check_input, check_output  # loaded when the command runs, not at import

        check_input(ns.bench, "--bench")
        check_output(ns.json_out, "--json")
        return _plan(ns)
    except LLMRouteError as exc:
        print(f"llmroute plan: {exc}", file=sys.stderr)
        return 2


def _n(x: float) -> str:
    """A count the way the guide writes it: 10,000 / 6.7 / 12.5."""
    return f"{x:,.0f}" if abs(x - round(x)) < 1e-9 else f"{x:,.1f}"


def _money(x: float) -> str:
    return f"${x:,.0f}" if x >= 100 else f"${x:,.2f}"


def _span(a: float, b: float, fmt: Any = _money) -> str:
    return fmt(a) if abs(a - b) < 1e-9 else f"{fmt(a)}-{fmt(b)}"


def _traffic(ns: argparse.Namespace) -> Traffic:
    if ns.ledger:
        import time

        from llmroute.accounting.sinks import read_records  # loaded when the command runs, not at import

        if ns.days <= 0:
            raise ConfigError("must be positive", key="--days")
        now = time.time()
        try:
            records = list(read_records(ns.ledger, since=now - ns.days * 86400))
        except (OSError, ValueError) as exc:
            raise ConfigError(str(exc), key="--ledger") from None
        t = traffic_from_records(records, since=now - ns.days * 86400, until=now)
        return Traffic(peak_rps=ns.peak_rps or t.peak_rps, mean_rps=ns.mean_rps or t.mean_rps,
                       mean_input_tokens=ns.mean_input_tokens if ns.mean_input_tokens is not None else t.mean_input_tokens,
                       mean_cached_tokens=ns.mean_cached_tokens if ns.mean_cached_tokens is not None
                       else t.mean_cached_tokens,
                       mean_output_tokens=ns.mean_output_tokens or t.mean_output_tokens, calls=t.calls, days=t.days)
    if ns.peak_rps is None or ns.mean_output_tokens is None:
        raise ConfigError("give --peak-rps and --mean-output-tokens, or --ledger FILE to read them",
                          key="--peak-rps/--mean-output-tokens")
    mean_rps = ns.mean_rps if ns.mean_rps is not None else ns.peak_rps
    return Traffic(peak_rps=ns.peak_rps, mean_rps=mean_rps,
                   mean_input_tokens=ns.mean_input_tokens if ns.mean_input_tokens is not None else float("nan"),
                   mean_cached_tokens=ns.mean_cached_tokens or 0.0, mean_output_tokens=ns.mean_output_tokens)


def _plan(ns: argparse.Namespace) -> int:
    traffic = _traffic(ns)
    if traffic.peak_rps <= 0 or traffic.mean_output_tokens <= 0:
        raise ConfigError("peak rate and mean output tokens must be positive", key="--peak-rps/--mean-output-tokens")
    if traffic.mean_rps <= 0 or traffic.mean_rps > traffic.peak_rps + 1e-9:
        raise ConfigError("must be positive and at most --peak-rps", key="--mean-rps")
    if ns.hours_per_month <= 0:
        raise ConfigError("must be positive", key="--hours-per-month")
    choice: LevelChoice | None = None
    unit = "GPUs"
    if ns.bench:
        from llmroute.bench.document import load_report  # loaded when the command runs, not at import

        report = load_report(ns.bench, option="--bench")
        choice = choose_level(report, target=ns.target, level=ns.level, min_success_rate=ns.min_success_rate)
        low = high = choice.output_tokens_per_s
        unit = "instances"
    else:
        low, high = parse_throughput(ns.tokens_per_s_per_gpu)
    mean_input = traffic.mean_input_tokens
    if math.isnan(mean_input):
        mean_input = choice.mean_input_tokens if choice and choice.mean_input_tokens is not None else float("nan")
    if traffic.mean_cached_tokens < 0 or (not math.isnan(mean_input) and traffic.mean_cached_tokens > mean_input):
        raise ConfigError("must be between 0 and the mean input tokens", key="--mean-cached-tokens")
    rates = {}
    for text in ns.exchange_rate:
        cur, (rate,) = parse_price(text, option="--exchange-rate", pair=False)
        rates[cur.upper()] = rate
    token_prices = [_token_price(t) for t in ns.per_token]
    if token_prices and math.isnan(mean_input):
        raise ConfigError("per-token costs need the mean input tokens: give --mean-input-tokens", key="--per-token")
    disc_low, disc_high = (0.0, 0.0) if ns.reserved_discount in ("0", "0.0", "") else \
        parse_throughput(ns.reserved_discount, option="--reserved-discount")
    if disc_high >= 1:
        raise ConfigError("a discount is a share below 1 (0.3-0.5 is 30-50%)", key="--reserved-discount")
    per_instance = [(n, p[0]) for n, p in (parse_price(t, option="--per-instance", pair=False) for t in ns.per_instance)]

    needed = traffic.peak_rps * traffic.mean_output_tokens
    g = gpu_range(needed_tokens_per_s=needed, low=low, high=high, headroom=ns.headroom)
    out: list[str] = []
    if ns.ledger:
        out.append(f"traffic from {ns.ledger}, last {ns.days:g} days: {traffic.calls:,} calls, mean "
                   f"{traffic.mean_rps:.3g} req/s, busiest minute {traffic.peak_rps:.3g} req/s, per call "
                   f"{traffic.mean_input_tokens:,.0f} input ({traffic.mean_cached_tokens:,.0f} cached) + "
                   f"{traffic.mean_output_tokens:,.0f} output tokens")
    if choice is not None:
        out.append(f"per-instance throughput: {choice.output_tokens_per_s:.1f} output tokens/s "
                   f"({choice.target} at {choice.load} {choice.level:g}: {choice.reason})")
        if choice.mean_output_tokens and abs(choice.mean_output_tokens - traffic.mean_output_tokens) > \
                0.5 * traffic.mean_output_tokens:
            print(f"note: the bench answers averaged {choice.mean_output_tokens:.0f} output tokens, far from the "
                  f"{traffic.mean_output_tokens:g} planned; token throughput may not carry over", file=sys.stderr)
    else:
        out.append(f"per GPU: {_span(low, high, _n)} output tokens/s (given)")
    out.append(f"peak output: {_n(traffic.peak_rps)} req/s x {_n(traffic.mean_output_tokens)} output tokens = "
               f"{_n(needed)} tokens/s")
    if low == high:
        out.append(f"before headroom: {_n(needed)} / {_n(high)} = {g['ratio_fast']:.1f} -> {g['gpus_fast']} {unit}")
        out.append(f"with {ns.headroom:.0%} headroom (each planned at {1 - ns.headroom:.0%} of its rate; "
                   f"--headroom sets it): {_n(needed)} / {_n(g['usable_fast'])} = {g['ratio_fast_headroom']:.1f} -> "
                   f"{g['gpus_fast_headroom']} {unit}")
    else:
        out.append(f"before headroom: {_n(needed)} / {_n(high)} = {g['ratio_fast']:.1f} -> {g['gpus_fast']} to "
                   f"{_n(needed)} / {_n(low)} = {g['ratio_slow']:.1f} -> {g['gpus_slow']} {unit}")
        out.append(f"with {ns.headroom:.0%} headroom (each planned at {1 - ns.headroom:.0%} of its rate; "
                   f"--headroom sets it): {g['gpus_fast_headroom']} to {g['gpus_slow_headroom']} {unit}")
    fleet = (g["gpus_fast_headroom"], g["gpus_slow_headroom"])
    mean_g = gpu_range(needed_tokens_per_s=traffic.mean_rps * traffic.mean_output_tokens, low=low, high=high,
                       headroom=ns.headroom)
    mean_fleet = (mean_g["gpus_fast_headroom"], mean_g["gpus_slow_headroom"])
    hours = ns.hours_per_month
    rows = monthly_costs(fleet=fleet, mean_fleet=mean_fleet, unit=unit, hours_per_month=hours,
                         per_instance=per_instance, reserved_discount=(disc_low, disc_high),
                         token_prices=token_prices, traffic=traffic, mean_input_tokens=mean_input, rates=rates)
    if rows:
        out.append("")
        if ns.mean_rps is None and not ns.ledger and (token_prices or per_instance):
            out.append(f"monthly cost ({hours:g} h), mean rate = the peak (no --mean-rps: an upper bound):")
        else:
            out.append(f"monthly cost ({hours:g} h), mean {traffic.mean_rps:.3g} req/s:")
        head = ["billing", "option", "price", unit, "USD/month", "basis"]
        table = [[r["billing"], r["name"], r["price"], "-" if r["units"] is None else _span(r["units"][0], r["units"][1], str),
                  _span(*r["usd_per_month"]), r["basis"]] for r in rows]
        widths = [max(len(c) for c in col) for col in zip(head, *table)]
        for line in [head, *table]:
            out.append("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip())
    evens = []
    fleets = [r for r in rows if r["billing"] in ("on-demand", "reserved")]
    token_rows = [r for r in rows if r["billing"] == "per-token"]
    grid: list[list[str]] = []
    for tp_row in token_rows:
        cells = [tp_row["name"]]
        for fleet_row in fleets:
            lo, hi = (break_even_rps(fleet_cost_per_month=cost, cost_per_request=tp_row["usd_per_request"],
                                     hours_per_month=hours) for cost in fleet_row["usd_per_month"])
            if lo is None or hi is None:
                cells.append("-")
                continue
            evens.append({"per_token": tp_row["name"], "fleet": f"{fleet_row['billing']} {fleet_row['name']}",
                          "break_even_rps": (lo, hi)})
            cells.append(_span(lo, hi, lambda x: f"{x:.3g}") + (" (>peak)" if lo > traffic.peak_rps else ""))
        grid.append(cells)
    if evens:
        out.append("")
        out.append("break-even: the mean req/s at which per-token costs as much as the fleet sized for the peak "
                   "(below it, per-token is cheaper)")
        head = ["per-token option"] + [f"vs {r['billing']} {r['name']} ({_span(r['units'][0], r['units'][1], str)})" for r in fleets]
        widths = [max(len(c) for c in col) for col in zip(head, *grid)]
        for line in [head, *grid]:
            out.append("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip())
        out.append("the guide: start per-token while traffic is uncertain; once it is stable, reserved "
                   "instances cut the cost by 30-50%.")
    print("\n".join(out))
    if ns.json_out:
        Path(ns.json_out).write_text(json.dumps({
            "tool": "llmroute plan", "level": asdict(choice) if choice else None,
            "tokens_per_s_per_gpu": [low, high], "needed_output_tokens_per_s": needed, **g,
            "instances": g["gpus_slow_headroom"], "headroom": ns.headroom, "traffic": asdict(traffic),
            "peak_rps": traffic.peak_rps, "mean_rps": traffic.mean_rps,
            "costs": [{**r, "usd_per_month": [round(x, 2) for x in r["usd_per_month"]]} for r in rows],
            "break_even": evens}, indent=1, default=str) + "\n", encoding="utf-8")
    return 0
