"""The bench's arithmetic: one record per request, and every figure computed from those records.

Definitions (also in `llmroute bench --help` and docs/bench.md), all measured on the client:
- start: just before the request is handed to the client (`create()` is called).
- TTFT: start -> the first chunk whose delta carries non-empty content (or reasoning) text.
- ITL: the gaps between successive content chunks (a chunk may carry several tokens);
  every request's gaps are pooled before percentiles are taken.
- E2E: start -> the end of the stream (the last chunk read, a trailing usage chunk included),
  or -> the return of a non-streamed call.
- TPOT: (E2E - TTFT) / (output tokens - 1), only for requests with more than one output token.
- output tokens: the response's `usage.completion_tokens`; else the streamed text counted with
  the cl100k tokenizer, and the record is flagged (`tokens_source`).
- goodput: successful requests per second that meet every SLO set; a request with at most one
  output token meets a TPOT SLO by definition (vLLM's rule).
- percentiles: linear interpolation between closest ranks (numpy's default method).

Pure functions and dataclasses only: no clock (times come in as floats), no I/O, no numpy.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from llmroute._runtime.percentile import percentile
from llmroute.errors import ConfigError, current_error_name
from llmroute.bench.units import parse_duration_s

__all__ = [
    "PERCENTILES",
    "SLO_METRICS",
    "RequestRecord",
    "StreamTiming",
    "percentile",
    "distribution_ms",
    "parse_slo",
    "meets_slo",
    "level_figures",
    "interval_figures",
    "early_vs_rest",
    "find_knees",
]

PERCENTILES = (50, 90, 95, 99)
SLO_METRICS = ("ttft", "tpot", "e2e")


@dataclass
class RequestRecord:
    """One request as the bench saw it. Times are seconds; `start_s` is on the run's own clock."""

    target: str
    level: float
    phase: str  # "first" (the cold request, on its own), "warmup" (excluded), "measured"
    index: int
    start_s: float
    ok: bool
    e2e_s: float | None = None
    ttft_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    output_tokens: int | None = None
    input_tokens: int | None = None
    tokens_source: str = "none"  # "usage" | "client_estimate" | "tokenizer" | "none"
    error_type: str | None = None
    error_message: str | None = None
    status: int | None = None
    deployment: str | None = None
    attempts: int | None = None
    connect_s: float | None = None  # connection set-up, when the transport reports it
    queue_s: float | None = None  # open loop: time an arrival waited for a slot under the concurrency cap
    text: str | None = None  # the answer, only when the sender was asked to keep it (smoke)

    @property
    def end_s(self) -> float:
        return self.start_s + (self.e2e_s or 0.0)

    @property
    def tpot_s(self) -> float | None:
        if not self.ok or self.ttft_s is None or self.e2e_s is None:
            return None
        if self.output_tokens is None or self.output_tokens <= 1:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)

    @property
    def tokens_estimated(self) -> bool:
        return self.tokens_source not in ("usage", "none")

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["tpot_s"] = self.tpot_s
        return data


class StreamTiming:
    """Turns the arrival times of one stream's chunks into TTFT, ITL and E2E.

    Sans-I/O: the shell reads the clock and passes `now` in; this class only does arithmetic.
    """

    def __init__(self, start: float) -> None:
        self.start = start
        self.first_content: float | None = None
        self.last_content: float | None = None
        self.end: float | None = None
        self.itl_s: list[float] = []
        self.parts: list[str] = []

    def on_chunk(self, now: float, text: str | None) -> None:
        """A chunk arrived at `now`; `text` is its content (or reasoning) text, if any."""
        if not text:  # role-only, usage-only and empty chunks carry no token
            return
        if self.first_content is None:
            self.first_content = now
        elif self.last_content is not None:  # (set with first_content)
            self.itl_s.append(now - self.last_content)
        self.last_content = now
        self.parts.append(text)

    def on_end(self, now: float) -> None:
        self.end = now

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_content is None else self.first_content - self.start

    @property
    def e2e_s(self) -> float | None:
        return None if self.end is None else self.end - self.start

    @property
    def text(self) -> str:
        return "".join(self.parts)


def distribution_ms(values_s: Iterable[float | None]) -> dict[str, float | int | None]:
    """p50, p90, p95, p99, max, min, mean (milliseconds) and count of the non-None values."""
    values = sorted(v * 1000.0 for v in values_s if v is not None)
    out: dict[str, float | int | None] = {}
    for p in PERCENTILES:
        out[f"p{p}"] = _round(percentile(values, p))
    out["max"] = _round(values[-1]) if values else None
    out["min"] = _round(values[0]) if values else None
    out["mean"] = _round(sum(values) / len(values)) if values else None
    out["count"] = len(values)
    return out


def parse_slo(text: str | None) -> dict[str, float]:
    """`"ttft=1s,tpot=50ms,e2e=8s"` -> {"ttft": 1.0, "tpot": 0.05, "e2e": 8.0} (seconds).

    A bare number is milliseconds. Keys: ttft, tpot, e2e.
    """
    slos: dict[str, float] = {}
    if not text:
        return slos
    for part in text.split(","):
        name, sep, value = part.partition("=")
        name = name.strip().lower()
        if not sep or not value.strip():
            raise ConfigError(f"{part.strip()!r} is not NAME=LIMIT (example: ttft=1s,tpot=50ms,e2e=8s)", key="--slo")
        if name not in SLO_METRICS:
            raise ConfigError(f"unknown SLO {name!r}; use one of {', '.join(SLO_METRICS)}", key="--slo")
        if name in slos:
            raise ConfigError(f"SLO {name!r} is given twice", key="--slo")
        slos[name] = parse_duration_s(value.strip(), option=f"--slo {name}", default_unit="ms")
    return slos


def meets_slo(record: RequestRecord, slos: Mapping[str, float]) -> bool:
    """True when the request succeeded and every SLO that was set holds for it."""
    if not record.ok:
        return False
    for name, limit in slos.items():
        if name == "ttft":
            if record.ttft_s is None or record.ttft_s > limit:
                return False
        elif name == "e2e":
            if record.e2e_s is None or record.e2e_s > limit:
                return False
        elif name == "tpot":
            tpot = record.tpot_s
            if tpot is not None and tpot > limit:  # one token or fewer: no TPOT, so it holds
                return False
    return True


def error_label(record: RequestRecord) -> str:
    return current_error_name(record.error_type) if record.error_type else "UnknownError"


def level_figures(
    records: Sequence[RequestRecord],
    *,
    slos: Mapping[str, float] | None = None,
    window_s: float | None = None,
    window_start_s: float | None = None,
) -> dict[str, Any]:
    """Every figure for one target at one load level, from its measured records.

    `window_s` is the measurement window the rates divide by; by default it runs from
    `window_start_s` (or the first start) to the last end.
    """
    slos = dict(slos or {})
    ok = [r for r in records if r.ok]
    failed = [r for r in records if not r.ok]
    if window_s is None:
        if records:
            begin = min(r.start_s for r in records) if window_start_s is None else window_start_s
            window_s = max(r.end_s for r in records) - begin
        else:
            window_s = 0.0
    per_s = (lambda n: n / window_s) if window_s > 0 else (lambda n: None)
    out_tokens = sum(r.output_tokens or 0 for r in ok)
    in_tokens = sum(r.input_tokens or 0 for r in ok)
    good = sum(1 for r in ok if meets_slo(r, slos))
    itl = [gap for r in ok for gap in r.itl_s]
    queued = [r.queue_s for r in records if r.queue_s is not None]
    return {
        "requests": len(records),
        "successes": len(ok),
        "errors": len(failed),
        "success_rate": _round(len(ok) / len(records), 6) if records else None,
        "error_breakdown": dict(Counter(error_label(r) for r in failed).most_common()),
        "duration_s": _round(window_s, 6),
        "requests_per_s": _round(per_s(len(ok)), 6),
        "output_tokens_per_s": _round(per_s(out_tokens), 6),
        "total_tokens_per_s": _round(per_s(out_tokens + in_tokens), 6),
        "goodput_per_s": _round(per_s(good), 6),
        "good_requests": good,
        "slo": {k: v * 1000.0 for k, v in slos.items()} or None,
        "ttft_ms": distribution_ms(r.ttft_s for r in ok),
        "tpot_ms": distribution_ms(r.tpot_s for r in ok),
        "itl_ms": distribution_ms(itl),
        "e2e_ms": distribution_ms(r.e2e_s for r in ok),
        "input_tokens": in_tokens,
        "output_tokens": out_tokens,
        "mean_output_tokens": _round(out_tokens / len(ok), 3) if ok else None,
        "mean_input_tokens": _round(in_tokens / len(ok), 3) if ok else None,
        "output_tokens_estimated": sum(1 for r in ok if r.tokens_estimated),
        # Little's law: the concurrency actually held, worth comparing with the one asked for.
        "mean_concurrency": _round(per_s(sum(r.e2e_s or 0.0 for r in records)), 3),
        "client_queue_ms": distribution_ms(queued) if queued else None,
        "deployments": dict(Counter(r.deployment for r in ok if r.deployment).most_common()),
    }


def interval_figures(
    records: Sequence[RequestRecord], *, interval_s: float, origin_s: float, end_s: float | None = None
) -> list[dict[str, Any]]:
    """Figures per interval of `interval_s`, each request placed by the time it ended.

    The last interval may be shorter; its rates divide by its own length.
    """
    if interval_s <= 0:
        raise ValueError("interval_s must be positive")
    if not records:
        return []
    stop = max(r.end_s for r in records) if end_s is None else end_s
    buckets: dict[int, list[RequestRecord]] = {}
    for r in records:
        buckets.setdefault(max(0, int((r.end_s - origin_s) // interval_s)), []).append(r)
    out = []
    for i in range(max(buckets) + 1):
        rows = buckets.get(i, [])
        begin = origin_s + i * interval_s
        width = min(interval_s, max(stop - begin, 0.0))
        ok = [r for r in rows if r.ok]
        rate = (lambda n: n / width) if width > 0 else (lambda n: None)
        ttft = [r.ttft_s * 1000 for r in ok if r.ttft_s is not None]
        e2e = [r.e2e_s * 1000 for r in ok if r.e2e_s is not None]
        out.append({
            "start_s": _round(begin - origin_s, 3),
            "length_s": _round(width, 3),
            "requests": len(rows),
            "errors": len(rows) - len(ok),
            "requests_per_s": _round(rate(len(ok)), 6),
            "output_tokens_per_s": _round(rate(sum(r.output_tokens or 0 for r in ok)), 6),
            "ttft_p50_ms": _round(percentile(ttft, 50)),
            "ttft_p95_ms": _round(percentile(ttft, 95)),
            "e2e_p95_ms": _round(percentile(e2e, 95)),
        })
    return out


def early_vs_rest(records: Sequence[RequestRecord], *, split_s: float, origin_s: float) -> dict[str, Any] | None:
    """P50/P95 TTFT and E2E of requests started in the first `split_s` against the rest.

    Drift, a slow warm-up or an autoscaler catching up shows as a gap between the two.
    None when one side is empty.
    """
    early = [r for r in records if r.ok and r.start_s - origin_s < split_s]
    rest = [r for r in records if r.ok and r.start_s - origin_s >= split_s]
    if not early or not rest:
        return None

    def side(rows: list[RequestRecord]) -> dict[str, Any]:
        ttft = distribution_ms(r.ttft_s for r in rows)
        e2e = distribution_ms(r.e2e_s for r in rows)
        return {"requests": len(rows), "ttft_p50_ms": ttft["p50"], "ttft_p95_ms": ttft["p95"],
                "e2e_p50_ms": e2e["p50"], "e2e_p95_ms": e2e["p95"]}

    return {"split_s": split_s, "first": side(early), "rest": side(rest)}


def find_knees(results: Sequence[Mapping[str, Any]], *, factor: float = 2.0) -> list[dict[str, Any]]:
    """Where P95 TTFT or E2E grows `factor` times faster than the load between two levels.

    `results` are level figures with `target` and `concurrency` (or `rate`). Levels of one
    target are compared in increasing order; 20 -> 50 (2.5x) with factor 2 flags growth >= 5x.
    """
    by_target: dict[str, list[Mapping[str, Any]]] = {}
    for res in results:
        by_target.setdefault(res["target"], []).append(res)
    knees = []
    for target, rows in by_target.items():
        key = "concurrency" if rows[0].get("concurrency") is not None else "rate"
        rows = sorted((r for r in rows if r.get(key)), key=lambda r: r[key])
        for low, high in zip(rows, rows[1:]):
            load_ratio = high[key] / low[key]
            for metric, label in (("ttft_ms", "TTFT"), ("e2e_ms", "E2E")):
                a = (low.get(metric) or {}).get("p95")
                b = (high.get(metric) or {}).get("p95")
                if not a or b is None or a <= 0:
                    continue
                growth = b / a
                if growth >= factor * load_ratio:
                    knees.append({
                        "target": target,
                        "metric": f"p95_{metric[:-3]}",
                        "load": key,
                        "from_level": low[key],
                        "to_level": high[key],
                        "from_ms": a,
                        "to_ms": b,
                        "growth": _round(growth, 3),
                        "load_ratio": _round(load_ratio, 3),
                        "message": (
                            f"{target}: P95 {label} grew {growth:.1f}x ({a:.0f} ms -> {b:.0f} ms) while {key} "
                            f"grew {load_ratio:.1f}x ({_num(low[key])} -> {_num(high[key])}): the knee lies between them"
                        ),
                    })
    return knees


def _num(value: float) -> str:
    return f"{value:g}"


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)
