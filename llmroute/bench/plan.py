"""`llmroute plan`: instances needed to hold a peak, and the monthly cost of each billing model.

From a peak request rate, the mean output tokens per request and a bench result (one
self-hosted instance measured at several load levels), it takes the per-instance output
throughput of the best level that stayed healthy and computes

    instances = ceil(peak_rps * mean_output_tokens / (per_instance_output_tokens_per_s * (1 - headroom)))

then prices the month: per-instance billing (instances * hourly price * hours, sized for the peak
all month; and the lower bound of an autoscaler that follows the mean rate), against per-token
billing (mean_rps * seconds in the month * (input * in price + output * out price) / 1e6).

`capacity_plan` and `monthly_costs` are pure; `main(argv)` is the command-line shell.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..errors import ConfigError, LLMRouteError

__all__ = ["main", "LevelChoice", "choose_level", "capacity_plan", "monthly_costs", "parse_price"]

SECONDS_PER_HOUR = 3600.0


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


def capacity_plan(*, peak_rps: float, mean_output_tokens: float, per_instance_tokens_per_s: float,
                  headroom: float) -> dict[str, float | int]:
    """Instances needed to serve `peak_rps` with `headroom` (0.2 = run each at 80% of measured)."""
    if peak_rps <= 0 or mean_output_tokens <= 0:
        raise ConfigError("peak rate and mean output tokens must be positive", key="--peak-rps/--mean-output-tokens")
    if not 0 <= headroom < 1:
        raise ConfigError("must be in [0, 1)", key="--headroom")
    if per_instance_tokens_per_s <= 0:
        raise ConfigError("the bench level has no output throughput", key="--bench")
    needed = peak_rps * mean_output_tokens
    usable = per_instance_tokens_per_s * (1 - headroom)
    return {"needed_output_tokens_per_s": needed, "usable_tokens_per_s_per_instance": usable,
            "instances": max(1, math.ceil(needed / usable - 1e-9))}


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


def monthly_costs(*, peak_rps: float, mean_rps: float, mean_input_tokens: float, mean_output_tokens: float,
                  per_instance_tokens_per_s: float, headroom: float, hours_per_month: float,
                  per_instance: Sequence[tuple[str, float]], per_token: Sequence[tuple[str, float, float]]
                  ) -> list[dict[str, Any]]:
    """One row per price: USD per month, with the assumption each row rests on."""
    rows = []
    peak = capacity_plan(peak_rps=peak_rps, mean_output_tokens=mean_output_tokens,
                         per_instance_tokens_per_s=per_instance_tokens_per_s, headroom=headroom)["instances"]
    mean = capacity_plan(peak_rps=mean_rps, mean_output_tokens=mean_output_tokens,
                         per_instance_tokens_per_s=per_instance_tokens_per_s, headroom=headroom)["instances"]
    for name, hourly in per_instance:
        rows.append({"billing": "per-instance", "name": name, "price": f"${hourly:g}/instance-hour",
                     "instances": peak, "usd_per_month": round(peak * hourly * hours_per_month, 2),
                     "basis": f"{peak} instances for the peak, all month"})
        if mean < peak:
            rows.append({"billing": "per-instance, autoscaled", "name": name, "price": f"${hourly:g}/instance-hour",
                         "instances": mean, "usd_per_month": round(mean * hourly * hours_per_month, 2),
                         "basis": f"lower bound: {mean} instances for the mean rate, all month"})
    requests = mean_rps * SECONDS_PER_HOUR * hours_per_month
    for name, price_in, price_out in per_token:
        cost = requests * (mean_input_tokens * price_in + mean_output_tokens * price_out) / 1e6
        rows.append({"billing": "per-token", "name": name, "price": f"${price_in:g}/${price_out:g} per M in/out",
                     "instances": None, "usd_per_month": round(cost, 2),
                     "basis": f"{requests:,.0f} requests of {mean_input_tokens:g} in + {mean_output_tokens:g} out tokens"})
    return rows


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="llmroute plan",
        description="Instances a self-hosted deployment needs to hold a peak rate at the per-instance throughput "
                    "a bench measured, and the monthly cost per billing model.",
        epilog="example: llmroute plan --bench results.json --peak-rps 20 --mean-output-tokens 300 "
               "--per-instance h100=2.49 --per-token together=0.88/0.88")
    p.add_argument("--bench", required=True, help="a `llmroute bench --out` file measured on one instance")
    p.add_argument("--peak-rps", type=float, required=True, help="peak requests per second to hold")
    p.add_argument("--mean-output-tokens", type=float, required=True, help="mean output tokens per request")
    p.add_argument("--mean-input-tokens", type=float,
                   help="mean input tokens per request (default: the bench level's mean)")
    p.add_argument("--mean-rps", type=float, help="mean requests/s over the month, for per-token and autoscaled "
                                                  "costs (default: the peak, an upper bound)")
    p.add_argument("--target", help="which target of the bench result (needed when it holds several)")
    p.add_argument("--level", type=float, help="use this concurrency (or rate) level's throughput")
    p.add_argument("--min-success-rate", type=float, default=0.99,
                   help="levels below this success rate are not trusted (0.99)")
    p.add_argument("--headroom", type=float, default=0.2, help="keep this share of each instance free (0.2)")
    p.add_argument("--hours-per-month", type=float, default=730.0, help="hours billed per month (730)")
    p.add_argument("--per-instance", action="append", default=[], metavar="NAME=USD_PER_HOUR",
                   help="an instance price, repeatable: h100=2.49")
    p.add_argument("--per-token", action="append", default=[], metavar="NAME=IN/OUT",
                   help="a per-token price in USD per million input/output tokens, repeatable: together=0.88/0.88")
    p.add_argument("--json", dest="json_out", help="write the plan as JSON here")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    ns = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        from ..cli_paths import check_input, check_output

        check_input(ns.bench, "--bench")
        check_output(ns.json_out, "--json")
        return _plan(ns)
    except LLMRouteError as exc:
        print(f"llmroute plan: {exc}", file=sys.stderr)
        return 2


def _plan(ns: argparse.Namespace) -> int:
    from .report import load_report

    report = load_report(ns.bench, option="--bench")
    choice = choose_level(report, target=ns.target, level=ns.level, min_success_rate=ns.min_success_rate)
    mean_rps = ns.mean_rps if ns.mean_rps is not None else ns.peak_rps
    if mean_rps <= 0 or mean_rps > ns.peak_rps:
        raise ConfigError("must be positive and at most --peak-rps", key="--mean-rps")
    if ns.hours_per_month <= 0:
        raise ConfigError("must be positive", key="--hours-per-month")
    mean_input = ns.mean_input_tokens if ns.mean_input_tokens is not None else choice.mean_input_tokens
    if mean_input is None and ns.per_token:
        raise ConfigError("the bench result has no mean input tokens; give --mean-input-tokens", key="--per-token")
    per_instance = [(n, p[0]) for n, p in (parse_price(t, option="--per-instance", pair=False) for t in ns.per_instance)]
    per_token = [(n, p[0], p[1]) for n, p in (parse_price(t, option="--per-token", pair=True) for t in ns.per_token)]
    capacity = capacity_plan(peak_rps=ns.peak_rps, mean_output_tokens=ns.mean_output_tokens,
                             per_instance_tokens_per_s=choice.output_tokens_per_s, headroom=ns.headroom)
    rows = monthly_costs(peak_rps=ns.peak_rps, mean_rps=mean_rps, mean_input_tokens=mean_input or 0.0,
                         mean_output_tokens=ns.mean_output_tokens, per_instance_tokens_per_s=choice.output_tokens_per_s,
                         headroom=ns.headroom, hours_per_month=ns.hours_per_month,
                         per_instance=per_instance, per_token=per_token)
    level = f"{choice.load} {choice.level:g}"
    print(f"per-instance throughput: {choice.output_tokens_per_s:.1f} output tokens/s "
          f"({choice.target} at {level}: {choice.reason})")
    if choice.mean_output_tokens and abs(choice.mean_output_tokens - ns.mean_output_tokens) > 0.5 * ns.mean_output_tokens:
        print(f"note: the bench answers averaged {choice.mean_output_tokens:.0f} output tokens, far from the "
              f"{ns.mean_output_tokens:g} planned; token throughput may not carry over", file=sys.stderr)
    print(f"peak {ns.peak_rps:g} req/s x {ns.mean_output_tokens:g} tokens = {capacity['needed_output_tokens_per_s']:.0f} "
          f"output tokens/s; with {ns.headroom:.0%} headroom each instance carries "
          f"{capacity['usable_tokens_per_s_per_instance']:.1f}: {capacity['instances']} instances")
    if ns.mean_rps is None and (per_token or per_instance):
        print("note: no --mean-rps; costs assume the peak holds all month (an upper bound)", file=sys.stderr)
    if rows:
        head = ["billing", "name", "price", "instances", "USD/month", "basis"]
        table = [[r["billing"], r["name"], r["price"], "-" if r["instances"] is None else str(r["instances"]),
                  f"{r['usd_per_month']:,.2f}", r["basis"]] for r in rows]
        widths = [max(len(c) for c in col) for col in zip(head, *table)]
        for line in [head, ["-" * w for w in widths], *table]:
            print("  ".join(c.ljust(w) for c, w in zip(line, widths)))
    if ns.json_out:
        Path(ns.json_out).write_text(json.dumps({"tool": "llmroute plan", "level": asdict(choice), **capacity,
                                                 "peak_rps": ns.peak_rps, "mean_rps": mean_rps,
                                                 "headroom": ns.headroom, "costs": rows}, indent=1) + "\n",
                                     encoding="utf-8")
    return 0
