"""`llmroute bench`, `llmroute bench smoke` and `llmroute bench compare`: argument parsing and files.

The shell around the bench: it parses the command line, builds the client from the config,
runs `runner.run_bench`, writes the JSON and HTML, prints the summary and applies `--fail-if`.
Exit codes: 0 done (and every rule held), 1 a `--fail-if` rule broke, no request succeeded, or a smoke
request failed,
2 bad input (a typed `LLMRouteError` naming what is wrong), 130 interrupted (the levels that had
finished are still reported and written).
"""

from __future__ import annotations

import argparse
import contextlib
import asyncio
import json
import platform
import sys
from pathlib import Path
from typing import Any, Iterator, Sequence

from llmroute.errors import ConfigError, LLMRouteError
from llmroute.bench.document import load_report
from llmroute.bench.units import format_ms, parse_duration_s, parse_levels, parse_rates
from llmroute.client import AsyncClient
from llmroute.bench.document import build_report, summary_text
from llmroute.bench.runner import BenchRun, LoadPlan, client_send, run_bench
from llmroute.bench.stats import parse_slo
from llmroute.bench.workload import Prompt, load_prompts, synthetic_prompts
from llmroute._runtime.cli_help import with_defaults

__all__ = ["main", "build_parser"]

DEFAULT_REQUESTS = 100
HTTPX_CROWDED = 32  # concurrent streams from which the CLI suggests the aiohttp transport

_DEFINITIONS = """\
definitions (client side; see docs/bench.md):
  TTFT   from just before the request is sent to the first chunk with non-empty content
         (or reasoning) text
  ITL    the gaps between successive content chunks, pooled over all requests
  E2E    from just before the request is sent to the end of the stream
  TPOT   (E2E - TTFT) / (output tokens - 1), for answers of more than one token
  output tokens: usage.completion_tokens; else counted with the cl100k tokenizer and flagged
  goodput: successful requests/s meeting every --slo (a 1-token answer meets tpot)
  requests/s and output tokens/s are both reported: either can mislead alone.
  Percentiles (p50 p90 p95 p99 max, linear interpolation) leave out warm-up requests and the
  first request to each target, which is reported on its own (a cold start shows there).
  Figures include what llmroute does for a call (retries, failover); records list attempts.

examples:
  llmroute bench --config llmroute.toml --target small --concurrency 5,20,50 --duration 10m \\
      --prompts prompts.jsonl --max-tokens 200 --slo ttft=1s,tpot=50ms,e2e=8s \\
      --out results.json --html report.html
  llmroute bench --config llmroute.toml --target auto --rate 10 --max-concurrency 64 --requests 500
  llmroute bench ... --baseline old.json --fail-if "p95_ttft>+20%" --fail-if "success_rate<0.99"
  llmroute bench smoke --config llmroute.toml
  llmroute bench compare results.json --baseline old.json --fail-if "p95_e2e>+15%"
"""

_RULES_HELP = ("a regression rule, repeatable: METRIC>VALUE or METRIC<VALUE; METRIC is success_rate, "
               "requests_per_s, output_tokens_per_s, total_tokens_per_s, goodput_per_s or "
               "pNN_X or max_X (NN: 50, 90, 95, 99; X: ttft, tpot, itl, e2e), e.g. p95_ttft; VALUE is relative to --baseline (+20%%, -10%%) "
               "or absolute (0.99, 2s, 500ms)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="llmroute bench", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=_DEFINITIONS,
        description="Load-test tiers, deployments or the router: latency percentiles, throughput, goodput. "
                    "Subcommands: 'llmroute bench smoke' (one tiny request to every deployment), "
                    "'llmroute bench compare' (apply --fail-if to a saved result).")
    p.add_argument("--config", help="llmroute TOML config (required unless --local)")
    p.add_argument("--local", action="store_true",
                   help="start the embedded llama.cpp servers (tiers small and large, as in `llmroute demo`) "
                        "and bench them: no config or key needed")
    p.add_argument("--target", action="append", required=True,
                   help="tier name, 'auto' (through the router) or provider:model-id; repeatable")
    load = p.add_mutually_exclusive_group()
    load.add_argument("--concurrency", help="closed loop: levels run one after another, e.g. 5,20,50 (default 1)")
    load.add_argument("--rate", help="open loop: Poisson arrivals per second, e.g. 10 (or a list 5,10,20)")
    p.add_argument("--max-concurrency", type=int, default=100, help="open loop: cap on requests in flight (100)")
    p.add_argument("--requests", type=int, help=f"measured requests per level (default {DEFAULT_REQUESTS} "
                                                "when --duration is not given either)")
    p.add_argument("--duration", help="measured time per level: 30s, 10m, 1h; the first bound reached stops a level")
    p.add_argument("--warmup", type=int, help="warm-up requests per level, excluded from the figures "
                                              "(default: one per concurrency slot; open loop: ~1 s of arrivals)")
    p.add_argument("--prompts", help="JSONL, one {\"prompt\": ...} or {\"messages\": [...]} a line, "
                                     "optional \"max_tokens\"; without it a synthetic set is used")
    p.add_argument("--input-tokens", type=int, default=256, help="synthetic set: prompt length in tokens (256)")
    p.add_argument("--synthetic-count", type=int, default=256, help="synthetic set: distinct prompts (256)")
    p.add_argument("--max-tokens", type=int, default=200, help="max_tokens of each request, unless the prompt "
                                                               "line sets its own; synthetic output length (200)")
    p.add_argument("--no-stream", action="store_true", help="non-streamed calls (no TTFT, TPOT or ITL)")
    p.add_argument("--slo", help="SLOs for goodput, e.g. ttft=1s,tpot=50ms,e2e=8s (bare numbers are ms)")
    p.add_argument("--interval", default="1m", help="length of the per-interval figures (1m)")
    p.add_argument("--knee-factor", type=float, default=2.0,
                   help="flag a knee when P95 TTFT or E2E grows this many times faster than the load (2)")
    p.add_argument("--seed", type=int, default=0, help="seed of the arrival times and synthetic prompts (0)")
    p.add_argument("--grace", default="60s", help="after --duration, how long in-flight requests may finish (60s)")
    p.add_argument("--no-first-request", action="store_true", help="skip the separate cold first request")
    p.add_argument("--feature", default="bench", help="feature tag of the bench's calls (bench)")
    p.add_argument("--transport", choices=("auto", "httpx", "aiohttp"), default="auto",
                   help="client transport (auto: aiohttp)")
    p.add_argument("--out", help="write the JSON result (every figure and per-request records) here")
    p.add_argument("--no-records", action="store_true", help="leave the per-request records out of --out")
    p.add_argument("--html", help="write the HTML report (inline SVG charts, works offline) here")
    p.add_argument("--baseline", help="an earlier --out file for relative --fail-if rules")
    p.add_argument("--fail-if", action="append", default=[], metavar="RULE", help=_RULES_HELP)
    p.add_argument("--quiet", action="store_true", help="no live progress on stderr")
    return p


def _smoke_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="llmroute bench smoke",
        description="One tiny streamed request to every deployment in the config (primary and backups): "
                    "which answer, how fast, and which fail. Exits 1 if any fails.")
    p.add_argument("--config", help="llmroute TOML config (required unless --local)")
    p.add_argument("--local", action="store_true", help="start the embedded llama.cpp servers and check them")
    p.add_argument("--max-tokens", type=int, default=8, help="max_tokens of each request (8)")
    p.add_argument("--prompt", default="Reply with the single word OK.", help="the prompt sent")
    p.add_argument("--timeout", default="60s", help="give up on one deployment after this long (60s)")
    p.add_argument("--parallel", type=int, default=1, help="deployments tried at once (1: one after another)")
    p.add_argument("--transport", choices=("auto", "httpx", "aiohttp"), default="auto",
                   help="HTTP library of the async client")
    p.add_argument("--json", dest="json_out", help="write the results as JSON here")
    return p


def _compare_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="llmroute bench compare",
                                description="Apply --fail-if rules to a saved bench result. Exits 1 on a regression.")
    p.add_argument("result", help="a bench --out file")
    p.add_argument("--baseline", help="an earlier --out file, for relative rules")
    p.add_argument("--fail-if", action="append", required=True, metavar="RULE", help=_RULES_HELP)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        from llmroute.cli.paths import check_input, check_output  # loaded when the command runs, not at import

        if args[:1] == ["smoke"]:
            ns = with_defaults(_smoke_parser()).parse_args(args[1:])
            check_output(ns.json_out, "--json")  # paths are checked before the work, not after it
            with _config_source(ns):
                return _smoke(ns)
        if args[:1] == ["compare"]:
            return _compare(with_defaults(_compare_parser()).parse_args(args[1:]))
        ns = with_defaults(build_parser()).parse_args(args)
        for path, option in ((ns.out, "--out"), (ns.html, "--html")):
            check_output(path, option)
        for path, option in ((ns.prompts, "--prompts"), (ns.baseline, "--baseline")):
            check_input(path, option)
        with _config_source(ns):
            return _bench(ns, args)
    except LLMRouteError as exc:
        print(f"llmroute bench: {exc}", file=sys.stderr)
        return 2


def _apply_rules(report: dict[str, Any], rule_texts: Sequence[str], baseline_path: str | None) -> int:
    from llmroute.bench.regress import check, parse_rule  # loaded when the command runs, not at import

    rules = [parse_rule(t) for t in rule_texts]
    baseline = load_report(baseline_path, option="--baseline") if baseline_path else None
    verdict = check(report, rules, baseline)
    for note in verdict.notes:
        print(f"note: {note}", file=sys.stderr)
    for failure in verdict.failures:
        print(f"REGRESSION {failure}", file=sys.stderr)
    if verdict.ok:
        print(f"all {len(rules)} --fail-if rules held", file=sys.stderr)
        return 0
    return 1


def _compare(ns: argparse.Namespace) -> int:
    return _apply_rules(load_report(ns.result, option="result"), ns.fail_if, ns.baseline)


def _check_positive(value: int | None, option: str) -> None:
    if value is not None and value <= 0:
        raise ConfigError("must be positive", key=option)


def _bench(ns: argparse.Namespace, argv: Sequence[str]) -> int:
    for value, option in ((ns.max_tokens, "--max-tokens"), (ns.input_tokens, "--input-tokens"),
                          (ns.synthetic_count, "--synthetic-count"), (ns.max_concurrency, "--max-concurrency")):
        _check_positive(value, option)
    if not 0 < ns.knee_factor < float("inf"):  # nan fails both comparisons
        raise ConfigError(f"{ns.knee_factor!r} must be a positive number", key="--knee-factor")
    slos = parse_slo(ns.slo)
    if ns.no_stream and ({"ttft", "tpot"} & set(slos)):
        raise ConfigError("ttft and tpot SLOs need streaming (drop --no-stream)", key="--slo")
    if ns.fail_if:  # parse the rules before a long run, not after it
        from llmroute.bench.regress import parse_rule  # loaded when the command runs, not at import

        rules = [parse_rule(t) for t in ns.fail_if]
        if any(r.relative for r in rules) and not ns.baseline:
            raise ConfigError("relative rules (with %) need --baseline", key="--fail-if")
        if ns.baseline:
            load_report(ns.baseline, option="--baseline")
    duration_s = parse_duration_s(ns.duration, option="--duration") if ns.duration else None
    requests = ns.requests if ns.requests is not None or duration_s is not None else DEFAULT_REQUESTS
    plan = LoadPlan(
        targets=ns.target,
        concurrency=parse_levels(ns.concurrency or "1") if ns.rate is None else None,
        rates=parse_rates(ns.rate) if ns.rate is not None else None,
        max_concurrency=ns.max_concurrency,
        requests=requests,
        duration_s=duration_s,
        warmup=ns.warmup,
        max_tokens=ns.max_tokens,
        seed=ns.seed,
        first_request=not ns.no_first_request,
        grace_s=parse_duration_s(ns.grace, option="--grace"),
    )
    interval_s = parse_duration_s(ns.interval, option="--interval")
    peak_slots = max(plan.levels()) if plan.mode == "concurrency" else plan.max_concurrency
    if ns.transport == "httpx" and peak_slots >= HTTPX_CROWDED and not ns.quiet:
        # measured in benchmarks/RESULTS.md: at 64 streams httpx alone adds seconds to TTFT on 2 cores
        print(f"note: {peak_slots:g} concurrent streams on httpx; httpx slows down under many concurrent "
              "streams and would inflate the latencies: consider --transport aiohttp", file=sys.stderr)
    if ns.prompts:
        prompts = load_prompts(ns.prompts)
        workload = {"prompts": ns.prompts, "count": len(prompts)}
    else:
        prompts = synthetic_prompts(ns.synthetic_count, input_tokens=ns.input_tokens, output_tokens=ns.max_tokens,
                                    seed=ns.seed)
        workload = {"synthetic": True, "count": len(prompts), "input_tokens": ns.input_tokens,
                    "output_tokens": ns.max_tokens}

    run = BenchRun(plan=plan)
    interrupted = False
    try:
        asyncio.run(_run(ns, plan, prompts, run))
    except KeyboardInterrupt:  # keep what finished: a long run stopped by hand still leaves its figures
        interrupted = True
        print("\ninterrupted: reporting the levels that finished", file=sys.stderr)

    meta = {
        "config": ns.config if isinstance(ns.config, str) else "--local (embedded llama.cpp servers)",
        "command": ["llmroute", "bench", *argv],
        "stream": not ns.no_stream,
        "max_tokens": ns.max_tokens,
        "warmup": ns.warmup,
        "requests_bound": plan.requests,
        "duration_bound_s": plan.duration_s,
        "seed": ns.seed,
        "workload": workload,
        "environment": _environment(ns.transport),
        "interrupted": interrupted,
    }
    report = build_report(run, slos=slos, interval_s=interval_s, knee_factor=ns.knee_factor, meta=meta,
                          include_records=not ns.no_records)
    print(summary_text(report))
    if ns.out:
        Path(ns.out).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {ns.out}", file=sys.stderr)
    if ns.html:
        from llmroute.bench.html import render_html  # loaded when the command runs, not at import

        html_report = report if not ns.no_records else build_report(run, slos=slos, interval_s=interval_s,
                                                                    knee_factor=ns.knee_factor, meta=meta)
        Path(ns.html).write_text(render_html(html_report), encoding="utf-8")
        print(f"wrote {ns.html}", file=sys.stderr)
    if interrupted:
        return 130
    if report["results"] and not any(res["success_rate"] for res in report["results"]):
        print("no request succeeded: these figures measure failures (the errors are listed above)", file=sys.stderr)
        return 1
    if ns.fail_if:
        return _apply_rules(report, ns.fail_if, ns.baseline)
    return 0


def _environment(transport: str) -> dict[str, Any]:
    import os

    from llmroute import __version__  # loaded when the command runs, not at import

    return {"llmroute": __version__, "python": platform.python_version(), "platform": platform.platform(),
            "cpus": os.cpu_count(), "transport": transport}


@contextlib.contextmanager
def _config_source(ns: argparse.Namespace) -> Iterator[None]:
    """`--config FILE`, or with `--local` the embedded servers' config (servers stopped at the end)."""
    if not ns.local:
        if not ns.config:
            raise ConfigError("give --config FILE, or --local to bench the embedded llama.cpp servers",
                              key="--config")
        yield
        return
    if ns.config:
        raise ConfigError("--local and --config exclude each other", key="--local")
    from llmroute.cli.demo import demo_config  # loaded when the command runs, not at import
    from llmroute.cli.local import LocalServer  # loaded when the command runs, not at import

    servers = []
    try:
        for tier in ("small", "large"):
            print(f"starting the local llama.cpp server for the {tier} tier ...", file=sys.stderr, flush=True)
            servers.append(LocalServer().start())
        ns.config = demo_config(servers[0].base_url, servers[1].base_url)
        yield
    finally:
        for server in servers:
            server.stop()


def _client(config: Any, transport: str) -> AsyncClient:  # config: a dict (--local) or a config path
    if isinstance(config, dict):  # --local
        return AsyncClient(config=config, transport=transport)
    return AsyncClient.from_config(config, transport=transport)


def _check_targets(config: Any, targets: Sequence[str]) -> None:
    """Every `--target` resolves (a tier, 'auto', a deployment or a served model id) before the first
    request: a misspelt second target would otherwise fail only after the first one's whole run."""
    from llmroute._call.prepared import prepare_call  # loaded when the command runs, not at import
    from llmroute._call.targets import resolve_target

    for target in targets:
        if target != "auto":  # the router picks per prompt; its tiers were checked with the config
            resolve_target(config, prepare_call(config, {"model": target, "messages": [{"role": "user", "content": "."}]}))


async def _run(ns: argparse.Namespace, plan: Any, prompts: Any, into: Any) -> Any:
    client = _client(ns.config, ns.transport)
    try:
        _check_targets(client.config, plan.targets)
        send = client_send(client, stream=not ns.no_stream, feature=ns.feature)
        return await run_bench(send, prompts, plan, progress=None if ns.quiet else sys.stderr, into=into)
    finally:
        await client.aclose()


# -- smoke -----------------------------------------------------------------------------------------

def _smoke(ns: argparse.Namespace) -> int:
    _check_positive(ns.max_tokens, "--max-tokens")
    _check_positive(ns.parallel, "--parallel")
    timeout_s = parse_duration_s(ns.timeout, option="--timeout")
    rows = asyncio.run(_smoke_run(ns, timeout_s))
    failed = [r for r in rows if not r["ok"]]
    head = ["deployment", "tiers", "ok", "TTFT ms", "E2E ms", "tokens", "answered by", "error / answer"]
    table = [[r["deployment"], ",".join(f"{t}#{i}" for t, i in r["tiers"]), "yes" if r["ok"] else "NO",
              format_ms(r["ttft_ms"]), format_ms(r["e2e_ms"]), "-" if r["output_tokens"] is None else str(r["output_tokens"]),
              r["answered_by"] or "-", (r["error"] or repr(r["answer"]))[:70]] for r in rows]
    widths = [max(len(c) for c in col) for col in zip(head, *table)]
    for line in [head, ["-" * w for w in widths], *table]:
        print("  ".join(c.ljust(w) for c, w in zip(line, widths)))
    print(f"{len(rows) - len(failed)} of {len(rows)} deployments answered"
          + (f"; failed: {', '.join(r['deployment'] for r in failed)}" if failed else ""))
    if ns.json_out:
        Path(ns.json_out).write_text(json.dumps({"tool": "llmroute bench smoke", "results": rows}, indent=1) + "\n",
                                     encoding="utf-8")
    return 1 if failed else 0


async def _smoke_run(ns: argparse.Namespace, timeout_s: float) -> list[dict[str, Any]]:
    client = _client(ns.config, ns.transport)
    tiers_of: dict[str, list[tuple[str, int]]] = {}
    for tier_name, tier in client.config.tiers.items():
        if tier.kind != "chat":  # embedding deployments answer no chat prompt: `llmroute health` probes them
            continue
        for position, dep in enumerate(tier.deployments):
            tiers_of.setdefault(dep.id, []).append((tier_name, position))  # position 0 is the primary
    prompt = Prompt(messages=({"role": "user", "content": ns.prompt},), source="smoke")
    # Probe calls: tagged, attributed to no feature, left out of reports by default (ledger.PROBE_METADATA_KEY).
    send = client_send(client, stream=True, feature=None, keep_text=True, metadata={"llmroute_probe": "bench-smoke"})
    gate = asyncio.Semaphore(ns.parallel)

    async def one(deployment: str) -> dict[str, Any]:
        async with gate:
            try:
                record = await asyncio.wait_for(send(deployment, prompt, ns.max_tokens), timeout_s)
            except asyncio.TimeoutError:
                record = None
            except LLMRouteError as exc:  # a fatal one (the config names something unusable)
                return _smoke_row(deployment, tiers_of[deployment], None, f"{type(exc).__name__}: {exc}")
        if record is None:
            return _smoke_row(deployment, tiers_of[deployment], None, f"no answer within {timeout_s:g}s")
        return _smoke_row(deployment, tiers_of[deployment], record, None)

    try:
        return list(await asyncio.gather(*(one(d) for d in tiers_of)))
    finally:
        await client.aclose()


def _smoke_row(deployment: str, tiers: list[tuple[str, int]], record: Any, error: str | None) -> dict[str, Any]:
    if record is not None and not record.ok:
        error = f"{record.error_type}: {record.error_message}"
    ok = error is None
    answered_by = record.deployment if record is not None else None
    if ok and answered_by and answered_by != deployment:
        ok, error = False, f"answered by {answered_by} instead (failover)"
    return {
        "deployment": deployment,
        "tiers": tiers,
        "ok": ok,
        "ttft_ms": None if record is None or record.ttft_s is None else round(record.ttft_s * 1000, 3),
        "e2e_ms": None if record is None or record.e2e_s is None else round(record.e2e_s * 1000, 3),
        "output_tokens": None if record is None else record.output_tokens,
        "answered_by": answered_by,
        "answer": (record.text or "") if record is not None else "",
        "error": error,
    }
