"""Set-up prints no setuptools deprecation warning: `project.license` is an SPDX string, which setuptools 77+
accepts silently, where the table form `{text = ...}` printed "`project.license` as a TOML table is
deprecated" three times per `scripts/setup.sh` run (benchmarks/RESULTS.md, "Day-one output")."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_license_is_an_spdx_string_built_by_a_setuptools_that_takes_it():
    doc = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    license_ = doc["project"]["license"]
    assert isinstance(license_, str) and re.fullmatch(r"[A-Za-z0-9.+-]+( (AND|OR|WITH) [A-Za-z0-9.+-]+)*", license_)
    # setuptools before 77 rejects a string license outright; 77+ warns on the table form.
    (requirement,) = [r for r in doc["build-system"]["requires"] if r.startswith("setuptools")]
    floor = re.search(r">=\s*(\d+)", requirement)
    assert floor is not None and int(floor.group(1)) >= 77, requirement
    assert not any("License ::" in c for c in doc["project"].get("classifiers", []))  # 77+ refuses both at once
