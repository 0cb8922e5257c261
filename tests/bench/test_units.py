"""Durations and level lists from the command line."""

from __future__ import annotations

import pytest

from llmroute.bench.units import format_ms, parse_duration_s, parse_levels, parse_rates
from llmroute.errors import ConfigError


@pytest.mark.parametrize("text, seconds", [("10m", 600), ("30s", 30), ("1h", 3600), ("50ms", 0.05),
                                           ("1.5m", 90), ("45", 45), (" 2 s ", 2)])
def test_durations(text, seconds):
    assert parse_duration_s(text) == pytest.approx(seconds)


def test_bare_number_takes_the_default_unit():
    assert parse_duration_s("200", default_unit="ms") == pytest.approx(0.2)


@pytest.mark.parametrize("bad", ["", "ten minutes", "5d", "0s", "-1m", "1m30s"])
def test_bad_durations_name_the_option(bad):
    with pytest.raises(ConfigError) as err:
        parse_duration_s(bad, option="--duration")
    assert "--duration" in str(err.value)


def test_levels_and_rates():
    assert parse_levels("5,20,50") == [5, 20, 50]
    assert parse_rates("0.5, 10") == [0.5, 10.0]
    for bad in ("5,,20", "0", "5,5", "a", "-3"):
        with pytest.raises(ConfigError):
            parse_levels(bad)
    for bad in ("0", "x", "1,1", "inf"):
        with pytest.raises(ConfigError):
            parse_rates(bad)


def test_format_ms():
    assert format_ms(None) == "-"
    assert format_ms(3.14159) == "3.1"
    assert format_ms(412.4) == "412"
    assert format_ms(1250.4) == "1250"
    assert format_ms(9.96) == "10.0"
