"""`llmroute plan`: instances and monthly cost needed to hold a peak rate, from bench results or a ledger."""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Sequence
from llmroute.errors import ConfigError, LLMRouteError
from llmroute._runtime.cli_help import with_defaults
from llmroute.bench.plan import GUIDE_RESERVED_DISCOUNT, LevelChoice, Traffic, _token_price, break_even_rps, choose_level, gpu_range, monthly_costs, parse_price, parse_throughput, traffic_from_records, _n, _span


def _finite(text: str) -> float:
    """A float option's value: a finite number (argparse's `float` takes 'inf' and 'nan', which no
    rate, token count or hour count can be and which crashed the GPU count's rounding)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="llmroute plan",
        description="GPUs (or instances) needed to hold a peak rate, the monthly cost per billing model, and the "
                    "traffic at which per-token and per-GPU billing cost the same.",
        epilog="field guide example: llmroute plan --tokens-per-s-per-gpu 800-1500 --peak-rps 50 "
               "--mean-output-tokens 200 (or --peak-tokens-per-s 10000)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--bench", help="a `llmroute bench --out` file measured on one instance")
    src.add_argument("--tokens-per-s-per-gpu", metavar="LOW-HIGH",
                     help="output tokens/s one GPU (or instance) sustains, known already: 1200 or 800-1500")
    p.add_argument("--peak-rps", type=_finite, help="peak requests per second to hold (or from --ledger)")
    p.add_argument("--peak-tokens-per-s", type=_finite, metavar="TOKENS_PER_S",
                   help="the peak as output tokens per second (the field guide's 10,000 tokens/s), instead of "
                        "--peak-rps; with --mean-output-tokens it is also read as requests/s")
    p.add_argument("--mean-output-tokens", type=_finite, help="mean output tokens per request (or from --ledger)")
    p.add_argument("--mean-input-tokens", type=_finite,
                   help="mean input tokens per request, cached included (default: the bench level's, or --ledger)")
    p.add_argument("--mean-cached-tokens", type=_finite, help="mean cached input tokens per request (0)")
    p.add_argument("--mean-rps", type=_finite, help="mean requests/s over the month, for per-token and autoscaled "
                                                  "costs (default: the peak, an upper bound)")
    p.add_argument("--ledger", help="read the traffic profile from this ledger (SQLite or JSONL)")
    p.add_argument("--days", type=_finite, default=7.0, help="with --ledger: the last N days (7)")
    p.add_argument("--target", help="which target of the bench result (needed when it holds several)")
    p.add_argument("--level", type=_finite, help="use this concurrency (or rate) level's throughput")
    p.add_argument("--min-success-rate", type=_finite, default=0.99,
                   help="levels below this success rate are not trusted (0.99)")
    p.add_argument("--headroom", type=_finite, default=0.2,
                   help="keep this share of each GPU free for bursts and failover (0.2: plan each at 80%%)")
    p.add_argument("--hours-per-month", type=_finite, default=730.0, help="hours billed per month (730)")
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
    ns = with_defaults(_parser()).parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        from llmroute.cli.paths import check_input, check_output  # loaded when the command runs, not at import

        check_input(ns.bench, "--bench")
        check_output(ns.json_out, "--json")
        return _plan(ns)
    except LLMRouteError as exc:
        print(f"llmroute plan: {exc}", file=sys.stderr)
        return 2


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
        if ns.peak_tokens_per_s is not None:  # the peak given in tokens/s, the mix read from the ledger
            if ns.mean_output_tokens is None:
                ns.mean_output_tokens = t.mean_output_tokens
            _peak_from_tokens(ns)
        return Traffic(peak_rps=ns.peak_rps or t.peak_rps, mean_rps=ns.mean_rps or t.mean_rps,
                       mean_input_tokens=ns.mean_input_tokens if ns.mean_input_tokens is not None else t.mean_input_tokens,
                       mean_cached_tokens=ns.mean_cached_tokens if ns.mean_cached_tokens is not None
                       else t.mean_cached_tokens,
                       mean_output_tokens=ns.mean_output_tokens or t.mean_output_tokens, calls=t.calls, days=t.days)
    if ns.peak_tokens_per_s is not None:
        _peak_from_tokens(ns)
    if ns.peak_rps is None or ns.mean_output_tokens is None:
        raise ConfigError("give --peak-rps and --mean-output-tokens (or --peak-tokens-per-s), or --ledger FILE to "
                          "read them", key="--peak-rps/--mean-output-tokens")
    mean_rps = ns.mean_rps if ns.mean_rps is not None else ns.peak_rps
    return Traffic(peak_rps=ns.peak_rps, mean_rps=mean_rps,
                   mean_input_tokens=ns.mean_input_tokens if ns.mean_input_tokens is not None else float("nan"),
                   mean_cached_tokens=ns.mean_cached_tokens or 0.0, mean_output_tokens=ns.mean_output_tokens)


def _peak_from_tokens(ns: argparse.Namespace) -> None:
    """`--peak-tokens-per-s`: the peak as output tokens/s. With `--mean-output-tokens` it is that many
    requests/s; without, the plan counts in output tokens (a "request" of one output token)."""
    if ns.peak_rps is not None:
        raise ConfigError("give the peak once: --peak-rps or --peak-tokens-per-s", key="--peak-tokens-per-s")
    if not ns.peak_tokens_per_s > 0:
        raise ConfigError("must be positive", key="--peak-tokens-per-s")
    if ns.mean_output_tokens is None:
        ns.mean_output_tokens = 1.0
        if ns.mean_rps is not None:
            raise ConfigError("--mean-rps needs --mean-output-tokens when the peak is given in tokens/s",
                              key="--mean-rps")
    if not ns.mean_output_tokens > 0:
        raise ConfigError("mean output tokens must be positive to read a peak in tokens/s (the ledger holds no "
                          "successful calls?)", key="--peak-tokens-per-s")
    ns.peak_rps = ns.peak_tokens_per_s / ns.mean_output_tokens


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
    if getattr(ns, "peak_tokens_per_s", None) is not None:
        out.append(f"peak output: {_n(needed)} tokens/s (given)")
    else:
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
