"""The bench's HTML report: one self-contained file with inline SVG charts and the figure tables.

Charts: TTFT / TPOT / E2E percentiles against the load level per target, throughput against the
load level, and TTFT over time. No JavaScript, no external fonts, styles or scripts, nothing
fetched: the file opens offline. Every piece of text from the run is HTML-escaped.

Pure: `render_html(report) -> str`; the caller writes the file.
"""

from __future__ import annotations

import math
from html import escape
from typing import Any, Mapping, Sequence

from llmroute.bench.units import format_ms

__all__ = ["render_html", "line_chart", "scatter_chart", "nice_ticks"]

_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f")
_W, _H = 460, 280
_PAD_L, _PAD_R, _PAD_T, _PAD_B = 62, 16, 30, 44
_MAX_POINTS = 2500  # per scatter series: beyond this, every k-th point is drawn


def nice_ticks(low: float, high: float, count: int = 5, *, integer: bool = False) -> list[float]:
    """Round tick values covering [low, high]: steps of 1, 2 or 5 times a power of ten (whole steps
    only when `integer`, for axes such as concurrency where 1.2 means nothing)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return [0.0, 1.0]
    if high <= low:
        high = low + (abs(low) or 1.0)
    raw = (high - low) / max(count, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    if integer:
        step = max(1.0, round(step))
    start = math.floor(low / step) * step
    ticks = []
    value = start
    while value <= high + step * 1e-9:
        ticks.append(round(value, 10))
        value += step
    if ticks[-1] < high:
        ticks.append(round(value, 10))
    return ticks


def _fmt_tick(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 10000:
        return f"{value / 1000:g}k"
    return f"{value:g}"


def _frame(title: str, x_label: str, y_label: str, xt: Sequence[float], yt: Sequence[float],
           sx: Any, sy: Any) -> list[str]:
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" viewBox="0 0 {_W} {_H}" '
             f'role="img" aria-label="{escape(title)}">',
             f'<text x="{_W / 2}" y="18" text-anchor="middle" class="t">{escape(title)}</text>']
    for v in yt:
        y = sy(v)
        parts.append(f'<line x1="{_PAD_L}" x2="{_W - _PAD_R}" y1="{y:.1f}" y2="{y:.1f}" class="g"/>')
        parts.append(f'<text x="{_PAD_L - 6}" y="{y + 4:.1f}" text-anchor="end">{_fmt_tick(v)}</text>')
    for v in xt:
        x = sx(v)
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{_H - _PAD_B}" y2="{_H - _PAD_B + 4}" class="a"/>')
        parts.append(f'<text x="{x:.1f}" y="{_H - _PAD_B + 17}" text-anchor="middle">{_fmt_tick(v)}</text>')
    parts.append(f'<line x1="{_PAD_L}" x2="{_W - _PAD_R}" y1="{_H - _PAD_B}" y2="{_H - _PAD_B}" class="a"/>')
    parts.append(f'<line x1="{_PAD_L}" x2="{_PAD_L}" y1="{_PAD_T}" y2="{_H - _PAD_B}" class="a"/>')
    parts.append(f'<text x="{(_PAD_L + _W - _PAD_R) / 2}" y="{_H - 8}" text-anchor="middle">{escape(x_label)}</text>')
    parts.append(f'<text transform="translate(14 {(_PAD_T + _H - _PAD_B) / 2}) rotate(-90)" '
                 f'text-anchor="middle">{escape(y_label)}</text>')
    return parts


def _scales(xs: Sequence[float], ys: Sequence[float]) -> tuple[list[float], list[float], Any, Any]:
    whole = bool(xs) and all(float(x).is_integer() for x in xs)  # concurrency levels: integer ticks
    xt = nice_ticks(min(xs, default=0.0), max(xs, default=1.0), integer=whole)
    yt = nice_ticks(0.0, max(ys, default=1.0))
    x0, x1, y1 = xt[0], xt[-1], yt[-1]
    sx = lambda v: _PAD_L + (v - x0) / ((x1 - x0) or 1) * (_W - _PAD_L - _PAD_R)
    sy = lambda v: _H - _PAD_B - v / (y1 or 1) * (_H - _PAD_T - _PAD_B)
    return xt, yt, sx, sy


def _legend(names: Sequence[str]) -> list[str]:
    parts = []
    for i, name in enumerate(names):
        y = _PAD_T + 4 + 14 * i
        color = _COLORS[i % len(_COLORS)]
        parts.append(f'<rect x="{_PAD_L + 8}" y="{y}" width="10" height="10" fill="{color}"/>')
        parts.append(f'<text x="{_PAD_L + 22}" y="{y + 9}">{escape(name)}</text>')
    return parts


def _open_chart(title: str, x_label: str, y_label: str,
                series: Sequence[tuple[str, Sequence[tuple[float, float]]]]) -> str | tuple[list[str], Any, Any]:
    """Axes and grid for the points of `series`, with their scales; or a "no data" paragraph."""
    xs = [x for _, pts in series for x, _ in pts]
    ys = [y for _, pts in series for _, y in pts]
    if not xs:
        return f'<p class="empty">{escape(title)}: no data</p>'
    xt, yt, sx, sy = _scales(xs, ys)
    return _frame(title, x_label, y_label, xt, yt, sx, sy), sx, sy


def line_chart(title: str, x_label: str, y_label: str,
               series: Sequence[tuple[str, Sequence[tuple[float, float | None]]]]) -> str:
    """An SVG line chart; points whose y is None are skipped."""
    clean = [(name, sorted((x, y) for x, y in pts if y is not None)) for name, pts in series]
    opened = _open_chart(title, x_label, y_label, clean)
    if isinstance(opened, str):
        return opened
    parts, sx, sy = opened
    for i, (_, pts) in enumerate(clean):
        color = _COLORS[i % len(_COLORS)]
        if len(pts) > 1:
            path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
            parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        for x, y in pts:
            parts.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{color}">'
                         f'<title>{_fmt_tick(x)}: {y:.1f}</title></circle>')
    parts += _legend([name for name, _ in clean])
    parts.append("</svg>")
    return "".join(parts)


def scatter_chart(title: str, x_label: str, y_label: str,
                  series: Sequence[tuple[str, Sequence[tuple[float, float]]]]) -> str:
    """An SVG scatter chart; long series are thinned to every k-th point."""
    opened = _open_chart(title, x_label, y_label, series)
    if isinstance(opened, str):
        return opened
    parts, sx, sy = opened
    for i, (_, pts) in enumerate(series):
        color = _COLORS[i % len(_COLORS)]
        step = max(1, math.ceil(len(pts) / _MAX_POINTS))
        for x, y in pts[::step]:
            parts.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="1.8" fill="{color}" fill-opacity="0.55"/>')
    parts += _legend([name for name, _ in series])
    parts.append("</svg>")
    return "".join(parts)


def _load(res: Mapping[str, Any]) -> float:
    return float(res["concurrency"] if res.get("concurrency") is not None else res["rate"])


def _table(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    out = ["<table><thead><tr>", *(f"<th>{escape(str(h))}</th>" for h in head), "</tr></thead><tbody>"]
    for row in rows:
        out.append("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in row) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1500px}
h1{font-size:20px}h2{font-size:17px;margin-top:28px}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}
th{background:#f2f2f2}td:first-child,td:nth-child(2){text-align:left}
svg{margin:4px 8px 4px 0;background:#fff}svg text{font-size:11px;fill:#333}svg .t{font-size:13px;font-weight:600}
svg .g{stroke:#e5e5e5}svg .a{stroke:#555}.charts{display:flex;flex-wrap:wrap}.note{color:#8a4b00}
.empty{color:#888}dl{display:grid;grid-template-columns:max-content auto;gap:2px 12px}dt{font-weight:600}
"""


def render_html(report: Mapping[str, Any]) -> str:
    results = report.get("results") or []
    targets = list(dict.fromkeys(r["target"] for r in results))
    load_name = "concurrency" if report.get("mode") != "rate" else "request rate (req/s)"
    body: list[str] = [f"<h1>llmroute bench: {escape(', '.join(targets))}</h1>"]
    slo = report.get("slo_ms") or {}
    if slo:
        body.append("<p>SLOs: " + escape(", ".join(f"{k} \u2264 {v:g} ms" for k, v in slo.items())) + "</p>")

    head = ["target", "load", "requests", "success %", "req/s", "out tok/s", "total tok/s", "goodput/s",
            "TTFT p50", "p90", "p95", "p99", "max", "TPOT p50", "p95", "ITL p50", "p95", "E2E p50", "p95", "p99", "max"]
    rows = []
    for r in results:
        rows.append([r["target"], f"{_load(r):g}", r["requests"],
                     _num(None if r["success_rate"] is None else r["success_rate"] * 100, 1),
                     _num(r["requests_per_s"]), _num(r["output_tokens_per_s"], 1), _num(r["total_tokens_per_s"], 1),
                     _num(r["goodput_per_s"]) if r.get("slo") else "-",
                     *(format_ms(r["ttft_ms"][k]) for k in ("p50", "p90", "p95", "p99", "max")),
                     format_ms(r["tpot_ms"]["p50"]), format_ms(r["tpot_ms"]["p95"]),
                     format_ms(r["itl_ms"]["p50"]), format_ms(r["itl_ms"]["p95"]),
                     *(format_ms(r["e2e_ms"][k]) for k in ("p50", "p95", "p99", "max"))])
    body.append("<h2>Summary (latencies in ms)</h2>" + _table(head, rows))
    for knee in report.get("knees") or []:
        body.append(f'<p class="note">Knee: {escape(knee["message"])}</p>')

    body.append("<h2>Latency against load</h2>")
    for target in targets:
        mine = [r for r in results if r["target"] == target]
        charts = []
        for metric, label in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("e2e_ms", "E2E")):
            series = [(f"{label} {p}", [(_load(r), r[metric][p]) for r in mine]) for p in ("p50", "p95", "p99")]
            charts.append(line_chart(f"{target}: {label}", load_name, "ms", series))
        body.append('<div class="charts">' + "".join(charts) + "</div>")

    body.append("<h2>Throughput against load</h2>")
    charts = [
        line_chart("output tokens/s", load_name, "tokens/s",
                   [(t, [(_load(r), r["output_tokens_per_s"]) for r in results if r["target"] == t]) for t in targets]),
        line_chart("requests/s (and goodput)", load_name, "requests/s",
                   [(t, [(_load(r), r["requests_per_s"]) for r in results if r["target"] == t]) for t in targets]
                   + ([(f"{t} goodput", [(_load(r), r["goodput_per_s"]) for r in results if r["target"] == t])
                       for t in targets] if slo else [])),
    ]
    body.append('<div class="charts">' + "".join(charts) + "</div>")

    records = report.get("records") or []
    body.append("<h2>TTFT over time</h2>")
    if records:
        series = []
        for r in results:
            pts = [(rec["start_s"], rec["ttft_s"] * 1000) for rec in records
                   if rec["target"] == r["target"] and rec["level"] == _load(r) and rec["phase"] == "measured"
                   and rec["ok"] and rec["ttft_s"] is not None]
            series.append((f"{r['target']} @ {_load(r):g}", pts))
        body.append(scatter_chart("TTFT of each measured request", "seconds since the run started", "ms", series))
    interval_rows = [[r["target"], f"{_load(r):g}", f"{iv['start_s']:g}", iv["requests"], iv["errors"],
                      _num(iv["requests_per_s"]), _num(iv["output_tokens_per_s"], 1), format_ms(iv["ttft_p50_ms"]),
                      format_ms(iv["ttft_p95_ms"]), format_ms(iv["e2e_p95_ms"])]
                     for r in results for iv in r.get("intervals") or []]
    if interval_rows:
        body.append(f"<h2>Per interval ({report.get('interval_s', 60):g} s)</h2>")
        body.append(_table(["target", "load", "from s", "requests", "errors", "req/s", "out tok/s",
                            "TTFT p50", "TTFT p95", "E2E p95"], interval_rows))

    firsts = report.get("first_requests") or []
    if firsts:
        body.append("<h2>First request to each target (not in the percentiles)</h2>")
        body.append(_table(["target", "ok", "TTFT ms", "connect ms", "E2E ms", "steady TTFT p50", "deployment", "error"],
                           [[f["target"], "yes" if f["ok"] else "no", format_ms(f["ttft_ms"]),
                             format_ms(f["connect_ms"]), format_ms(f["e2e_ms"]), format_ms(f["steady_ttft_p50_ms"]),
                             f["deployment"] or "-", f["error_type"] or ""] for f in firsts]))
    err_rows = [[r["target"], f"{_load(r):g}", kind, n] for r in results for kind, n in r["error_breakdown"].items()]
    if err_rows:
        body.append("<h2>Errors by type</h2>" + _table(["target", "load", "type", "count"], err_rows))
    defs = report.get("definitions") or {}
    if defs:
        body.append("<h2>Definitions</h2><dl>" + "".join(
            f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in defs.items()) + "</dl>")
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>llmroute bench</title>"
            f"<style>{_CSS}</style></head><body>" + "\n".join(body) + "</body></html>\n")
