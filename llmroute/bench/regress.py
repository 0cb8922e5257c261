"""Regression mode: `--fail-if` rules checked against a bench result and, optionally, a baseline.

A rule is `METRIC OP VALUE`:
- METRIC: `success_rate`, `requests_per_s`, `output_tokens_per_s`, `total_tokens_per_s`,
  `goodput_per_s`, or `pNN_LATENCY` / `max_LATENCY` with LATENCY one of ttft, tpot, itl, e2e
  (`p95_ttft`, `p99_e2e`, `max_itl`);
- OP: `>` (fail when the figure is above) or `<` (fail when below);
- VALUE: relative to the baseline (`+20%`, `-10%`), or absolute (`0.99`; latencies take `ms`
  or `s`, a bare number being milliseconds).

Results are matched across files by (target, concurrency or rate). A figure with no value (no
successful request at that level) fails its rule: a gate must fail closed. Pure functions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from llmroute.errors import ConfigError
from llmroute.bench.document import level_key
from llmroute.bench.units import parse_duration_s

__all__ = ["Rule", "Verdict", "parse_rule", "check"]

_SCALARS = ("success_rate", "requests_per_s", "output_tokens_per_s", "total_tokens_per_s", "goodput_per_s")
_LATENCIES = ("ttft", "tpot", "itl", "e2e")
_RULE = re.compile(r"^\s*([a-z0-9_]+)\s*([<>])\s*(\S+)\s*$")


@dataclass(frozen=True)
class Rule:
    text: str
    metric: str  # as written: "p95_ttft", "success_rate"
    path: tuple[str, ...]  # where it lives in a result: ("ttft_ms", "p95") or ("success_rate",)
    op: str  # ">" or "<"
    value: float  # a fraction when relative (+20% -> 0.2); else ms for latencies, the figure itself otherwise
    relative: bool

    @property
    def is_latency(self) -> bool:
        return len(self.path) == 2


@dataclass(frozen=True)
class Verdict:
    failures: list[str]
    notes: list[str]

    @property
    def ok(self) -> bool:
        return not self.failures


def parse_rule(text: str) -> Rule:
    match = _RULE.match(text)
    if not match:
        raise ConfigError(f"{text!r} is not METRIC>VALUE or METRIC<VALUE (example: p95_ttft>+20%)", key="--fail-if")
    metric, op, raw = match.groups()
    if metric in _SCALARS:
        path: tuple[str, ...] = (metric,)
    else:
        stat, _, latency = metric.partition("_")
        if latency not in _LATENCIES or not (stat == "max" or re.fullmatch(r"p(50|90|95|99)", stat)):
            raise ConfigError(
                f"unknown figure {metric!r}; use {', '.join(_SCALARS)}, or p50/p90/p95/p99/max_ + "
                f"{'/'.join(_LATENCIES)} (p95_ttft)", key="--fail-if")
        path = (f"{latency}_ms", stat)
    if raw.endswith("%"):
        try:
            value = float(raw[:-1]) / 100
        except ValueError:
            raise ConfigError(f"{raw!r} in {text!r} is not a percentage", key="--fail-if") from None
        return Rule(text, metric, path, op, value, relative=True)
    if len(path) == 2:
        value = parse_duration_s(raw, option="--fail-if", default_unit="ms") * 1000
    else:
        try:
            value = float(raw)
        except ValueError:
            raise ConfigError(f"{raw!r} in {text!r} is not a number", key="--fail-if") from None
    return Rule(text, metric, path, op, value, relative=False)


def _get(result: Mapping[str, Any], path: Sequence[str]) -> float | None:
    value: Any = result
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return float(value) if isinstance(value, (int, float)) else None


def _label(result: Mapping[str, Any]) -> str:
    target, mode, level = level_key(result)
    return f"{target} {'c=' + format(level, 'g') if mode == 'concurrency' else format(level, 'g') + '/s'}"


def _show(rule: Rule, value: float) -> str:
    return f"{value:.1f} ms" if rule.is_latency else f"{value:.4g}"


def check(current: Mapping[str, Any], rules: Sequence[Rule], baseline: Mapping[str, Any] | None = None) -> Verdict:
    """Apply every rule to every result of `current`; relative rules compare with `baseline`."""
    if any(r.relative for r in rules) and baseline is None:
        raise ConfigError("relative rules (with %) need --baseline", key="--fail-if")
    base_by_key = {level_key(r): r for r in (baseline or {}).get("results", [])}
    failures: list[str] = []
    notes: list[str] = []
    results = current.get("results") or []
    if not results:
        failures.append("the result holds no results to check")
    for res in results:
        label = _label(res)
        for rule in rules:
            now = _get(res, rule.path)
            if now is None:
                failures.append(f"{label}: {rule.metric} has no value (no successful requests?), rule {rule.text!r}")
                continue
            if rule.relative:
                base_res = base_by_key.get(level_key(res))
                then = None if base_res is None else _get(base_res, rule.path)
                if then is None:
                    notes.append(f"{label}: no baseline figure for {rule.metric}; rule {rule.text!r} not applied")
                    continue
                limit = then * (1 + rule.value)
                detail = f"baseline {_show(rule, then)} {rule.value * 100:+g}% = {_show(rule, limit)}"
            else:
                limit = rule.value
                detail = _show(rule, limit)
            broken = now > limit if rule.op == ">" else now < limit
            if broken:
                failures.append(f"{label}: {rule.metric} {_show(rule, now)} {rule.op} {detail} (rule {rule.text!r})")
    return Verdict(failures=failures, notes=notes)
