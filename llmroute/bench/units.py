"""Parsing of the bench command line's small values: durations (`10m`, `30s`, `1h`, `50ms`) and
level lists (`5,20,50`).

Pure functions over strings. Every bad value raises `ConfigError` naming the option at fault;
nothing here reads files, clocks or the network.
"""

from __future__ import annotations

import math
import re

from llmroute.errors import ConfigError

__all__ = ["parse_duration_s", "parse_levels", "parse_rates", "format_ms"]

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration_s(text: str, *, option: str = "duration", default_unit: str = "s") -> float:
    """`"10m"` -> 600.0. Units: ms, s, m, h; a bare number is in `default_unit`."""
    match = _DURATION.match(str(text))
    if not match:
        raise ConfigError(f"{text!r} is not a duration (examples: 50ms, 30s, 10m, 1h)", key=option)
    value = float(match.group(1)) * _UNIT_S[match.group(2) or default_unit]
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{text!r} must be a positive duration", key=option)
    return value


def parse_levels(text: str, *, option: str = "--concurrency") -> list[int]:
    """`"5,20,50"` -> [5, 20, 50]: positive integers, run in the order given, no repeats."""
    levels: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        if not part.isdigit() or int(part) <= 0:
            raise ConfigError(f"{part!r} in {text!r} is not a positive integer", key=option)
        if int(part) in levels:
            raise ConfigError(f"{part} appears twice in {text!r}", key=option)
        levels.append(int(part))
    return levels


def parse_rates(text: str, *, option: str = "--rate") -> list[float]:
    """`"2,10.5"` -> [2.0, 10.5]: positive request rates per second."""
    rates: list[float] = []
    for part in str(text).split(","):
        try:
            rate = float(part)
        except ValueError:
            raise ConfigError(f"{part.strip()!r} in {text!r} is not a number", key=option) from None
        if not math.isfinite(rate) or rate <= 0:
            raise ConfigError(f"{part.strip()!r} in {text!r} must be a positive rate", key=option)
        if rate in rates:
            raise ConfigError(f"{part.strip()} appears twice in {text!r}", key=option)
        rates.append(rate)
    return rates


def format_ms(value_ms: float | None) -> str:
    """A latency in milliseconds for a table cell: `2290`, `412`, `3.1`, or `-` when there is none."""
    if value_ms is None:
        return "-"
    if value_ms >= 10:
        return f"{value_ms:.0f}"
    return f"{value_ms:.1f}"
