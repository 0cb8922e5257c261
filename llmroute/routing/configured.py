"""The fitted model and threshold a config's `[routing]` section names, read without validating
the rest of the config (for `llmroute calibrate` and `llmroute router eval`)."""

from __future__ import annotations

import sys
from pathlib import Path

from llmroute.errors import ConfigError
from llmroute.routing.fitted import FittedRouter, load_model

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

__all__ = ["scorer_from_config"]


def scorer_from_config(config_path: str | Path) -> tuple[FittedRouter | None, float | None]:
    """(the fitted model `[routing] model` names or None, `[routing] threshold` or None) of a TOML
    config, read without validating the rest of it."""
    path = Path(config_path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read config: {exc.strerror}", path=str(path)) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"invalid TOML: {exc}", path=str(path)) from None
    routing = data.get("routing") if isinstance(data.get("routing"), dict) else {}
    model = routing.get("model")
    threshold = routing.get("threshold")
    scorer = load_model(model, base=path.resolve().parent) if isinstance(model, str) else None
    return scorer, float(threshold) if isinstance(threshold, (int, float)) else None
