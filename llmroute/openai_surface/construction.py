"""What a client is built from, as openai-python's constructor takes it.

`Client(api_key=..., base_url=...)` builds a one-provider config (an OpenAI-compatible server whose
`model=` is the server's own id); `Client()` finds a config file (`LLMROUTE_CONFIG`, then
`./llmroute.toml`), else calls the server `OPENAI_BASE_URL` names, as `OpenAI()` would;
`Client(config=...)` takes a Config, a dict or a path. `timeout`, `max_retries` and `default_headers`
become the client's call options (`CallOptions`), which `with_options()` changes.

This module reads the environment and checks that a config file exists; it never opens a connection
and never prints (the unpriced warning goes through `warnings`, once per process).
"""

from __future__ import annotations

import math
import os
import threading
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Dict, Mapping, Union

from llmroute.config import Config, load_config, redact_url
from llmroute._call.validate import MAX_TIMEOUT_S
from llmroute.resilience.policy import MAX_DEADLINE_S
from llmroute.errors import ConfigError, InvalidRequestError

__all__ = ["CallOptions", "DIRECT_PROVIDER", "CONFIG_ENV", "DEFAULT_CONFIG_FILE", "build_config", "call_options",
           "timeout_seconds", "per_call_timeout", "as_config", "find_config_file"]

CONFIG_ENV = "LLMROUTE_CONFIG"
DEFAULT_CONFIG_FILE = "llmroute.toml"
DIRECT_PROVIDER = "default"  # the provider's name (ledger rows, `route.provider`) in a one-provider client

ConfigLike = Union[Config, Mapping[str, Any], str, "os.PathLike[str]", None]

_warned_unpriced: set[str] = set()
_warn_lock = threading.Lock()


@dataclass(frozen=True)
class CallOptions:
    """A client's defaults for each call: what openai-python's constructor and `with_options()` set.

    `timeout_s`: the whole call, in seconds (a call's own `timeout=` wins); `max_retries`: retries per
    deployment (overrides `[resilience] max_retries`); `headers`: sent with every call (a call's
    `extra_headers` win)."""

    timeout_s: float | None = None
    max_retries: int | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    # A `Client(base_url=..., timeout=...)`: each attempt's limit, held in its config (not a call budget).
    attempt_timeout_s: float | None = None

    def merged(self, other: "CallOptions") -> "CallOptions":
        return CallOptions(
            timeout_s=other.timeout_s if other.timeout_s is not None else self.timeout_s,
            max_retries=other.max_retries if other.max_retries is not None else self.max_retries,
            headers={**self.headers, **other.headers},
            attempt_timeout_s=self.attempt_timeout_s,
        )

    def for_config(self, config: Config) -> "CallOptions":
        """A one-server client's constructor timeout is each attempt's, set in its config (openai-python's
        meaning: retries get their own time); it is not also a budget for the whole call."""
        if config.default_provider is None or self.timeout_s is None:
            return self
        return replace(self, timeout_s=None, attempt_timeout_s=self.timeout_s)

    def apply(self, kwargs: Dict[str, Any]) -> int | None:
        """Fill a call's arguments with these defaults (in place); returns the call's max_retries."""
        if self.timeout_s is not None and kwargs.get("timeout") is None:
            kwargs["timeout"] = self.timeout_s
        if self.headers:
            kwargs["extra_headers"] = {**self.headers, **(kwargs.get("extra_headers") or {})}
        return self.max_retries


def timeout_seconds(timeout: Any, *, name: str = "timeout") -> float | None:
    """A timeout as openai-python takes it: seconds (int or float), an `httpx.Timeout` (its largest set
    part: llmroute's timeout is the whole call's), or None. Anything else is a ConfigError naming it."""
    if timeout is None:
        return None
    if isinstance(timeout, bool):
        raise ConfigError(f"must be a number of seconds or an httpx.Timeout, not {timeout!r}", key=name)
    if isinstance(timeout, (int, float)):
        value = float(timeout)
    elif all(hasattr(timeout, part) for part in ("connect", "read", "write", "pool")):
        parts = [getattr(timeout, part) for part in ("connect", "read", "write", "pool")]
        set_parts = [float(p) for p in parts if p is not None]
        if not set_parts:
            return None  # httpx.Timeout(None): no limit of the caller's own
        value = max(set_parts)
    else:
        raise ConfigError(f"must be a number of seconds or an httpx.Timeout, not {type(timeout).__name__}", key=name)
    if not math.isfinite(value) or not 0 < value <= MAX_TIMEOUT_S:
        raise ConfigError(f"must be a finite number of seconds above 0, at most {MAX_TIMEOUT_S:g}; got {value!r}",
                          key=name)
    return value


def per_call_timeout(timeout: Any) -> Any:
    """A call's `timeout=`: an `httpx.Timeout` read as seconds (its largest set part); anything else is
    left for the call's own check (`validate.check_timeout`), which names the argument."""
    if timeout is None or isinstance(timeout, (int, float)):
        return timeout
    try:
        return timeout_seconds(timeout)
    except ConfigError as exc:
        raise InvalidRequestError(exc.detail, field="timeout") from None


def _connect_seconds(timeout: Any) -> float | None:
    connect = getattr(timeout, "connect", None)
    return float(connect) if isinstance(connect, (int, float)) and connect > 0 else None


def call_options(*, timeout: Any = None, max_retries: Any = None,
                 default_headers: Mapping[str, str] | None = None) -> CallOptions:
    """Check and hold `timeout`, `max_retries` and `default_headers` (ConfigError naming the argument)."""
    if max_retries is not None and (isinstance(max_retries, bool) or not isinstance(max_retries, int)
                                    or max_retries < 0):
        raise ConfigError(f"must be a whole number of retries, 0 or more, not {max_retries!r}", key="max_retries")
    headers: Dict[str, str] = {}
    for name, value in (default_headers or {}).items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise ConfigError(f"header {name!r}: names and values must be strings", key="default_headers")
        headers[name] = value
    return CallOptions(timeout_seconds(timeout), max_retries, headers)


def build_config(config: ConfigLike, *, api_key: str | None, base_url: str | None, timeout: Any,
                 max_retries: int | None, prices: Mapping[str, Mapping[str, Any]] | None,
                 organization: str | None = None, project: str | None = None) -> Config:
    """The client's Config from what its constructor was given (see the module docstring)."""
    direct = api_key is not None or base_url is not None
    if config is not None and direct:
        raise ConfigError("pass either config=... or api_key=/base_url= (one server), not both", key="config")
    if prices is not None and not direct and config is not None:
        raise ConfigError("prices= prices the one server of Client(base_url=...); with a config, set [pricing]",
                          key="prices")
    if direct:
        return _direct_config(api_key=api_key, base_url=base_url, timeout=timeout, max_retries=max_retries,
                              prices=prices, organization=organization, project=project)
    if config is None:
        try:
            found = find_config_file()
        except ConfigError:
            if not os.environ.get("OPENAI_BASE_URL"):
                raise
            # No llmroute config, and openai-python's variable names a server: `OpenAI()` would call it.
            return _direct_config(api_key=None, base_url=None, timeout=timeout, max_retries=max_retries,
                                  prices=prices, organization=organization, project=project)
        return load_config(found)
    return as_config(config)


def as_config(config: ConfigLike) -> Config:
    if isinstance(config, Config):
        return config
    if isinstance(config, (str, os.PathLike)):
        return load_config(config)
    if isinstance(config, Mapping):
        return Config.from_dict(config)
    raise ConfigError(f"config must be a dict, a Config or a path, not {type(config).__name__}")


def find_config_file() -> Path:
    """`$LLMROUTE_CONFIG`, else `./llmroute.toml`; a ConfigError naming both when neither is there."""
    named = os.environ.get(CONFIG_ENV)
    if named:
        return Path(named)  # load_config says "not found" with the path when it is missing
    here = Path.cwd() / DEFAULT_CONFIG_FILE
    if here.is_file():
        return here
    raise ConfigError(
        f"no config found: environment variable {CONFIG_ENV} is not set and there is no {DEFAULT_CONFIG_FILE} in "
        f"{Path.cwd()}. Set {CONFIG_ENV}=/path/to/llmroute.toml, write ./{DEFAULT_CONFIG_FILE}, pass "
        "config=<path, dict or Config>, or name one OpenAI-compatible server: Client(base_url=..., api_key=...) "
        "or OPENAI_BASE_URL")


def _direct_config(*, api_key: str | None, base_url: str | None, timeout: Any, max_retries: int | None,
                   prices: Mapping[str, Mapping[str, Any]] | None, organization: str | None,
                   project: str | None) -> Config:
    if base_url is None:
        base_url = os.environ.get("OPENAI_BASE_URL")  # openai-python's variable, read as it reads it
    if not base_url:
        raise ConfigError("llmroute has no default platform: pass base_url='http://host:port/v1' (an "
                          "OpenAI-compatible server), set OPENAI_BASE_URL, or pass a config", key="base_url")
    if api_key is None:
        api_key = os.environ.get("OPENAI_API_KEY")  # as openai-python reads it; None: a server without auth
    provider: Dict[str, Any] = {"kind": "openai-compatible", "base_url": str(base_url), "api_key": api_key or ""}
    headers = {name: value for name, value in (("OpenAI-Organization", organization), ("OpenAI-Project", project))
               if value}
    if headers:
        provider["headers"] = headers
    resilience: Dict[str, Any] = {}
    seconds = timeout_seconds(timeout)
    if seconds is not None:
        # openai-python's timeout is per request: each attempt's limit here, and the call's deadline
        # leaves room for the retries.
        provider["timeout_s"] = seconds
        provider["ttft_timeout_s"] = seconds
        connect = _connect_seconds(timeout)
        provider["connect_timeout_s"] = min(connect, seconds) if connect else min(5.0, seconds)
        resilience["deadline_s"] = min(seconds * ((max_retries if max_retries is not None else 2) + 1), MAX_DEADLINE_S)
    if max_retries is not None:
        resilience["max_retries"] = max_retries
        resilience["max_retries_with_backup"] = max_retries
    pricing: Dict[str, Any] = {"strict": prices is not None}
    for model, price in (prices or {}).items():
        pricing[f"{DIRECT_PROVIDER}:{model}"] = dict(price)
    data = {"providers": {DIRECT_PROVIDER: provider}, "resilience": resilience, "pricing": pricing}
    built = Config.from_dict(data, source=f"Client(base_url={redact_url(str(base_url))!r})")
    built = replace(built, default_provider=DIRECT_PROVIDER)
    if prices is None:
        _warn_unpriced(built.providers[DIRECT_PROVIDER].base_url)
    return built


def _warn_unpriced(base_url: str) -> None:
    with _warn_lock:
        if base_url in _warned_unpriced:
            return
        _warned_unpriced.add(base_url)
    warnings.warn(
        f"llmroute.Client(base_url={base_url!r}) has no prices: its calls are recorded in the ledger with cost "
        "None (pricing.strict = false). Pass prices={'<model id>': {'input_per_million': ..., "
        "'output_per_million': ...}} (0 for hardware you already pay for) to price them. This warning is given "
        "once per server.", UserWarning, stacklevel=5)
