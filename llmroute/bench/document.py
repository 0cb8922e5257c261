"""The bench result document (the `--out` JSON) and the summary table printed at the end.

`build_report` turns a `BenchRun` into one JSON-ready dict: `results` (one object per target and
level, every figure of stats.level_figures plus per-interval figures), `first_requests`,
`knees`, `definitions` and the per-request `records`. `summary_text` renders it for a terminal.

`load_report` reads a saved one back (for baselines and plans), checking it is one.
Otherwise pure: no clock, and the caller writes the files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from llmroute.errors import ConfigError

from llmroute.bench.runner import BenchRun
from llmroute.bench.stats import (
    RequestRecord,
    distribution_ms,
    early_vs_rest,
    find_knees,
    interval_figures,
    level_figures,
)
from llmroute.bench.units import format_ms

__all__ = ["DEFINITIONS", "REPORT_VERSION", "build_report", "summary_text", "level_key", "load_report"]

REPORT_VERSION = 1

DEFINITIONS = {
    "start": "just before the request is handed to the client",
    "ttft": "start -> first chunk whose delta has non-empty content (or reasoning) text",
    "itl": "gaps between successive content chunks, pooled over all requests (a chunk may hold several tokens)",
    "e2e": "start -> end of the stream (last chunk read, trailing usage chunk included)",
    "tpot": "(E2E - TTFT) / (output tokens - 1), requests with more than one output token only",
    "output_tokens": "usage.completion_tokens; else the streamed text counted with cl100k (flagged in tokens_source)",
    "goodput_per_s": "successful requests per second meeting every SLO set (a <=1-token answer meets TPOT)",
    "requests_per_s": "successful requests / measurement window",
    "window": "from the start of the measured phase (after warm-up) to the end of its last request",
    "percentiles": "linear interpolation between closest ranks; the first request and warm-up are excluded",
    "intervals": "requests placed by the time they ended",
}


def load_report(path: str, *, option: str) -> dict[str, Any]:
    """A saved `--out` file; a missing file or one that is not a bench result names `option`."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror or exc}", path=path, key=option) from None
    except ValueError as exc:
        raise ConfigError(f"not JSON: {exc}", path=path, key=option) from None
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        raise ConfigError("not a bench result (no 'results' list)", path=path, key=option)
    return data


def level_key(result: Mapping[str, Any]) -> tuple[str, str, float]:
    """How a result is matched across runs: (target, "concurrency" | "rate", level)."""
    mode = "concurrency" if result.get("concurrency") is not None else "rate"
    return (result["target"], mode, float(result[mode]))


def build_report(
    run: BenchRun,
    *,
    slos: Mapping[str, float] | None = None,
    interval_s: float = 60.0,
    knee_factor: float = 2.0,
    meta: Mapping[str, Any] | None = None,
    include_records: bool = True,
) -> dict[str, Any]:
    origin = min((r.start_s for r in run.records), default=0.0)
    results = []
    for lv in run.levels:
        rows = [r for r in run.records if r.target == lv.target and r.level == lv.level and r.phase == "measured"]
        figures = level_figures(rows, slos=slos, window_s=max(lv.window_end_s - lv.window_start_s, 0.0))
        res: dict[str, Any] = {"target": lv.target}
        if lv.mode == "concurrency":
            res["concurrency"] = int(lv.level)
        else:
            res["rate"] = lv.level
            res["max_concurrency"] = run.plan.max_concurrency
        res.update(figures)
        res["warmup_requests"] = sum(1 for r in run.records if r.target == lv.target and r.level == lv.level
                                     and r.phase == "warmup")
        res["cancelled_at_deadline"] = lv.cancelled
        res["stopped_by"] = lv.stopped_by
        res["started_s"] = round(lv.window_start_s - origin, 3)
        res["intervals"] = interval_figures(rows, interval_s=interval_s, origin_s=lv.window_start_s,
                                            end_s=lv.window_end_s)
        res["early_vs_rest"] = early_vs_rest(rows, split_s=interval_s, origin_s=lv.window_start_s)
        if lv.mode == "rate":
            res["dispatch_lag_ms"] = distribution_ms(lv.dispatch_lag_s)
            res["queued_requests"] = sum(1 for r in rows if (r.queue_s or 0) > 0.001)
        results.append(res)
    report: dict[str, Any] = {
        "tool": "llmroute bench",
        "version": REPORT_VERSION,
        "started_at_unix": round(run.started_at, 3),
        "mode": run.plan.mode,
        "targets": list(run.plan.targets),
        "slo_ms": {k: v * 1000.0 for k, v in (slos or {}).items()},
        "interval_s": interval_s,
        "definitions": DEFINITIONS,
        **dict(meta or {}),
        "results": results,
        "first_requests": [_first(r, results) for r in run.records if r.phase == "first"],
        "knees": find_knees(results, factor=knee_factor),
    }
    if include_records:
        report["records"] = [_record_json(r, origin) for r in run.records]
    return report


def _first(record: RequestRecord, results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    steady = next((r for r in results if r["target"] == record.target), None)
    steady_ttft = (steady or {}).get("ttft_ms", {}).get("p50")
    ttft_ms = None if record.ttft_s is None else round(record.ttft_s * 1000, 3)
    return {
        "target": record.target,
        "ok": record.ok,
        "ttft_ms": ttft_ms,
        "e2e_ms": None if record.e2e_s is None else round(record.e2e_s * 1000, 3),
        "connect_ms": None if record.connect_s is None else round(record.connect_s * 1000, 3),
        # TTFT with the connection set-up taken out, when the transport reported it
        "ttft_after_connect_ms": (None if ttft_ms is None or record.connect_s is None
                                  else round(ttft_ms - record.connect_s * 1000, 3)),
        "steady_ttft_p50_ms": steady_ttft,
        "deployment": record.deployment,
        "error_type": record.error_type,
        "error_message": record.error_message,
    }


def _record_json(record: RequestRecord, origin: float) -> dict[str, Any]:
    data = record.to_json()
    data["start_s"] = round(record.start_s - origin, 6)
    for key in ("e2e_s", "ttft_s", "tpot_s", "connect_s", "queue_s"):
        if data[key] is not None:
            data[key] = round(data[key], 6)
    data["itl_s"] = [round(g, 6) for g in record.itl_s]
    return data


def _level_label(res: Mapping[str, Any]) -> str:
    return f"c={res['concurrency']}" if res.get("concurrency") is not None else f"{res['rate']:g}/s"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}" if value < 100 else f"{value:.0f}"


def summary_text(report: Mapping[str, Any]) -> str:
    """The end-of-run table, then first requests, errors, knees, drift and flags."""
    head = ["target", "load", "req", "ok %", "req/s", "out tok/s", "good/s",
            "TTFT p50", "p95", "p99", "TPOT p50", "p95", "ITL p95", "E2E p50", "p95", "p99"]
    rows = []
    for res in report["results"]:
        ok = res["success_rate"]
        rows.append([
            res["target"], _level_label(res), str(res["requests"]),
            "-" if ok is None else f"{ok * 100:.1f}",
            _rate(res["requests_per_s"]), _rate(res["output_tokens_per_s"]),
            _rate(res["goodput_per_s"]) if res.get("slo") else "-",
            format_ms(res["ttft_ms"]["p50"]), format_ms(res["ttft_ms"]["p95"]), format_ms(res["ttft_ms"]["p99"]),
            format_ms(res["tpot_ms"]["p50"]), format_ms(res["tpot_ms"]["p95"]), format_ms(res["itl_ms"]["p95"]),
            format_ms(res["e2e_ms"]["p50"]), format_ms(res["e2e_ms"]["p95"]), format_ms(res["e2e_ms"]["p99"]),
        ])
    widths = [max(len(str(c)) for c in col) for col in zip(head, *rows)]

    def fmt(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    lines = ["latencies in ms; good/s = goodput under the SLOs set", fmt(head), fmt(["-" * w for w in widths])]
    lines += [fmt(r) for r in rows]
    firsts = report.get("first_requests") or []
    if firsts:
        lines.append("")
        lines.append("first request to each target (kept out of the percentiles):")
        for f in firsts:
            if not f["ok"]:
                lines.append(f"  {f['target']}: failed: {f['error_type']}: {f['error_message']}")
                continue
            parts = [f"TTFT {format_ms(f['ttft_ms'])} ms", f"E2E {format_ms(f['e2e_ms'])} ms"]
            if f["connect_ms"] is not None:
                parts.append(f"connect {format_ms(f['connect_ms'])} ms")
            if f["steady_ttft_p50_ms"]:
                parts.append(f"steady TTFT p50 {format_ms(f['steady_ttft_p50_ms'])} ms")
            lines.append(f"  {f['target']}: " + ", ".join(parts))
    for res in report["results"]:
        if res["error_breakdown"]:
            errs = ", ".join(f"{k} x{v}" for k, v in res["error_breakdown"].items())
            lines.append(f"errors {res['target']} {_level_label(res)}: {errs}")
        if res["output_tokens_estimated"]:
            lines.append(f"note {res['target']} {_level_label(res)}: output tokens of {res['output_tokens_estimated']}"
                         " requests were estimated (no usage from the server)")
        if res.get("queued_requests"):
            wait = (res.get("client_queue_ms") or {}).get("p95")
            lines.append(f"note {res['target']} {_level_label(res)}: {res['queued_requests']} arrivals waited for a slot"
                         f" under the concurrency cap ({res['max_concurrency']}; p95 wait {format_ms(wait)} ms, not in"
                         " the latencies); raise --max-concurrency if the cap should not shape the load")
        drift = res.get("early_vs_rest")
        if drift and drift["first"]["ttft_p95_ms"] and drift["rest"]["ttft_p95_ms"]:
            a, b = drift["first"]["ttft_p95_ms"], drift["rest"]["ttft_p95_ms"]
            if max(a, b) >= 1.5 * min(a, b):
                lines.append(f"drift {res['target']} {_level_label(res)}: P95 TTFT {format_ms(a)} ms in the first"
                             f" {drift['split_s']:g} s against {format_ms(b)} ms after")
        if res.get("cancelled_at_deadline"):
            lines.append(f"note {res['target']} {_level_label(res)}: {res['cancelled_at_deadline']} requests were"
                         " still running after the grace period and were cut off (not counted)")
    for knee in report.get("knees") or []:
        lines.append("knee: " + knee["message"])
    return "\n".join(lines)
