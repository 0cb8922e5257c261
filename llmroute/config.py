"""TOML (or dict) -> a validated `Config`, with the file and key path in every error.

Every mistake is found here, at load, never at the first call: unknown keys, unknown provider kinds,
a tier that names an unknown provider, a `${VAR}` that is not set, a cloud provider with no key.
One section per concept: `providers`, `tiers`, `routing`, `resilience`, `pricing`, `ledger`,
`budgets`, `guards`, `telemetry`, `state`. This module reads the config file and the environment, nothing else.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit
from typing import TYPE_CHECKING, Any, Dict, FrozenSet, List, Literal, Mapping, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_serializer, field_validator
from llmroute._runtime.config_model import ConfigModel

from llmroute.errors import ConfigError
from llmroute._runtime.suggest import did_you_mean
from llmroute.providers.registry import KINDS, KindSpec
from llmroute._runtime.secrets import MASK, SecretStr, is_secret_header
from llmroute._runtime.text_files import not_utf8
from llmroute.cache.cache_policy import CacheConfig, CacheSettings, TierCacheConfig

if TYPE_CHECKING:
    from llmroute.accounting.budgets import BudgetConfig, GuardConfig
    from llmroute.accounting.ledger import LedgerConfig
    from llmroute.accounting.prices import PriceBook, PricingConfig
    from llmroute.resilience.policy import ResiliencePolicy
    from llmroute.routing.rules import RoutingConfig
    from llmroute.state.backend import StateConfig
    from llmroute._runtime.telemetry import TelemetryConfig

__all__ = [
    "Config",
    "ProviderConfig",
    "DeploymentConfig",
    "TierConfig",
    "Deployment",
    "load_config",
    "parse_deployment_id",
]

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_ENV_ANY = re.compile(r"\$\{([^}]*)\}?")  # anything `${...}`-shaped, to refuse malformed references
_HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")  # RFC 9110 token
# A deployment's `weight` is its share of first choices among the weighted: (0, MAX_WEIGHT].
MAX_WEIGHT = 1e6


class _Section(ConfigModel):
    # Schemas are built on first use, not at import: `import llmroute` stays light.
    model_config = ConfigDict(extra="forbid", defer_build=True, allow_inf_nan=False)


class ProviderConfig(_Section):
    kind: str
    api_key: SecretStr | None = None  # masked in repr, str, model_dump and pickles
    base_url: str | None = None
    region: str | None = None
    protocol: Literal["compatible", "native"] = "compatible"
    headers: Dict[str, Any] = Field(default_factory=dict)  # auth-like values held as SecretStr
    include_usage: bool | None = None  # None: the kind's default (docs/platforms.md §11.1)
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] | None = None
    split_think_tags: bool = True
    # Queue gauges (Prometheus `/metrics`) read off the request path for load balancing
    # (llmroute/resilience/gauges.py): None = on for vllm, sglang and tgi, off otherwise.
    queue_gauges: bool | None = None
    metrics_url: str | None = None  # default: the base URL's origin + "/metrics"
    metrics_interval_s: float = Field(default=1.0, ge=0.1, le=300)
    connect_timeout_s: float | None = Field(default=None, gt=0)
    ttft_timeout_s: float | None = Field(default=None, gt=0)
    timeout_s: float | None = Field(default=None, gt=0)
    max_connections: int = Field(default=100, ge=1)

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, value: str) -> str:
        if value not in KINDS:
            raise ValueError(f"unknown provider kind {value!r}; expected one of: {', '.join(KINDS)}")
        return value

    @field_validator("headers", mode="before")
    @classmethod
    def _headers(cls, value: Any) -> Dict[str, Any]:
        if not isinstance(value, Mapping):
            raise ValueError("headers must be a table of name = \"value\"")
        out: Dict[str, Any] = {}
        for name, v in value.items():
            if not isinstance(name, str) or not _HEADER_NAME.match(name):
                raise ValueError(f"header name {name!r} is not a valid HTTP header name")
            if isinstance(v, SecretStr):
                v = v.get()
            if not isinstance(v, str):
                raise ValueError(f"header {name}: the value must be a string, not {type(v).__name__}")
            if any(c in v for c in "\r\n\x00"):
                raise ValueError(f"header {name}: the value holds a line break or NUL")
            out[name] = SecretStr(v) if is_secret_header(name) else v
        return out

    @field_serializer("headers")
    def _mask_headers(self, value: Dict[str, Any]) -> Dict[str, str]:
        return {name: MASK if isinstance(v, SecretStr) else v for name, v in value.items()}


class _Overridable(ConfigModel):
    # Any `[resilience]` key may be set inline on a tier or a deployment; `_build` checks the names.
    model_config = ConfigDict(extra="allow", defer_build=True, allow_inf_nan=False)


class DeploymentConfig(_Overridable):
    id: str
    weight: float | None = Field(default=None, gt=0, le=MAX_WEIGHT)  # a share: 1e308 would take every request
    connect_timeout_s: float | None = Field(default=None, gt=0)
    ttft_timeout_s: float | None = Field(default=None, gt=0)
    timeout_s: float | None = Field(default=None, gt=0)
    context_window: int | None = Field(default=None, gt=0)
    extra_body: Dict[str, Any] = Field(default_factory=dict)
    resilience: Dict[str, Any] = Field(default_factory=dict)


class TierConfig(_Overridable):
    deployments: List[Union[str, DeploymentConfig]] = Field(min_length=1)
    # "embedding": the tier serves `client.embeddings.create`, never chat (docs/embeddings.md).
    kind: Literal["chat", "embedding"] = "chat"
    fallback_tier: str | None = None
    sticky_key: str | None = None
    # How the first choice is made (llmroute/resilience/balance.py): "load" (lowest expected delay;
    # the default when a deployment carries a weight), "weighted" (weights share the first place,
    # then list order: the default otherwise) or "order" (list order: a failover chain).
    balance: Literal["load", "weighted", "order"] | None = None
    # Traffic pools with deployments of their own: `pools = { batch = ["sf:...", ...] }`.
    pools: Dict[str, List[Union[str, DeploymentConfig]]] = Field(default_factory=dict)
    resilience: Dict[str, Any] = Field(default_factory=dict)
    cache: Dict[str, Any] | None = None  # `cache = { ttl_s = 3600 }`: see llmroute/cache/cache_policy.py


class _RawConfig(_Section):
    providers: Dict[str, ProviderConfig] = Field(default_factory=dict)
    tiers: Dict[str, TierConfig] = Field(default_factory=dict)
    # Sections owned by other modules: validated by their own models in `_sections`.
    routing: Dict[str, Any] = Field(default_factory=dict)
    resilience: Dict[str, Any] = Field(default_factory=dict)
    pricing: Dict[str, Any] = Field(default_factory=dict)
    ledger: Dict[str, Any] = Field(default_factory=dict)
    budgets: List[Dict[str, Any]] = Field(default_factory=list)
    guards: Dict[str, Any] = Field(default_factory=dict)
    telemetry: Dict[str, Any] = Field(default_factory=dict)
    # `[pools.<name>]`: client-side limits for that pool's traffic (any limit key of [resilience]).
    pools: Dict[str, Dict[str, Any]] = Field(default_factory=dict)
    cache: Dict[str, Any] = Field(default_factory=dict)

    # `[batch]`: batch jobs (job store, polling, Fireworks accounts); validated by llmroute.batch.settings.
    batch: Dict[str, Any] = Field(default_factory=dict)

    # `[state]`: where limits, budgets and breakers live (state/config.py).
    state: Dict[str, Any] = Field(default_factory=dict)


POOL_LIMIT_KEYS = frozenset({"max_concurrency", "rpm", "tpm", "queue_timeout_s", "queue_poll_s"})
DEFAULT_POOLS = ("interactive", "batch")


# Timeouts when neither the deployment nor its provider sets one: connect, first token, whole call.
# A silent deployment is abandoned after the first-token limit and the call moves on to its backup:
# 10 s (plus resilience.ttft_per_1k_tokens_s per 1,000 prompt tokens) is far beyond a healthy
# platform's time to first token on an ordinary prompt (README: "Timeouts and defaults").
DEFAULT_CONNECT_TIMEOUT_S = 5.0
DEFAULT_TTFT_TIMEOUT_S = 10.0
DEFAULT_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Provider:
    """A configured provider, resolved: its base URL, its key (masked in reprs), its kind's quirks."""

    name: str
    kind: str
    spec: KindSpec
    base_url: str
    api_key: SecretStr | None
    region: str | None
    protocol: str
    headers: Mapping[str, Any]  # auth-like values are SecretStr
    include_usage: bool
    max_tokens_field: str
    split_think_tags: bool
    max_connections: int
    config: ProviderConfig = field(repr=False)


@dataclass(frozen=True)
class Deployment:
    """One model on one provider, as a tier lists it: the unit of routing, failover and pricing."""

    id: str  # "provider:model"
    provider: Provider
    model: str
    tier: str | None = None
    weight: float | None = None
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    ttft_timeout_s: float = DEFAULT_TTFT_TIMEOUT_S
    timeout_s: float = DEFAULT_TIMEOUT_S
    context_window: int | None = None
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    resilience: Mapping[str, Any] = field(default_factory=dict)
    key_path: str = ""
    explicit_timeouts: FrozenSet[str] = field(default=frozenset(), repr=False)  # timeout names the config set


@dataclass
class Tier:
    name: str
    deployments: List[Deployment]
    fallback_tier: str | None = None
    sticky_key: str | None = None
    resilience: Mapping[str, Any] = field(default_factory=dict)
    pools: Dict[str, List[Deployment]] = field(default_factory=dict)  # pool -> its own deployments
    kind: str = "chat"  # "chat" or "embedding"
    balance: str = "weighted"  # "load" | "weighted" | "order" (TierConfig.balance, resolved)

    def deployments_for(self, pool: str) -> List[Deployment]:
        return self.pools.get(pool) or self.deployments


@dataclass
class Sections:
    """The validated sections other modules own (their models live beside their code)."""

    routing: RoutingConfig
    resilience: ResiliencePolicy  # the [resilience] defaults
    policies: Dict[str, ResiliencePolicy]  # deployment id -> its policy, with tier and deployment overrides
    pools: Dict[str, Dict[str, Any]]  # pool name -> its limit overrides
    pool_names: FrozenSet[str]  # every pool a call may name
    pricing: PricingConfig
    prices: PriceBook
    ledger: LedgerConfig
    budgets: List[BudgetConfig]
    guards: Dict[str, GuardConfig]
    telemetry: TelemetryConfig
    cache: CacheSettings | None = None  # [cache] and the tiers' `cache` tables
    state: StateConfig | None = None  # backend "local" (per process) or "redis"


@dataclass
class Config:
    """The whole validated configuration. Build it with `load_config(path)` or `Config.from_dict(d)`."""

    providers: Dict[str, Provider]
    tiers: Dict[str, Tier]
    raw: _RawConfig
    sections: Sections
    source: str = "<dict>"
    base_dir: Path = field(default_factory=Path.cwd)
    # The provider a bare model id goes to when no tier or deployment names it: set by
    # `Client(base_url=...)` (llmroute/openai_surface/construction.py), whose model= is the server's own id.
    default_provider: str | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "<dict>", base_dir: Path | None = None) -> "Config":
        return _build(data, source=source, base_dir=base_dir or Path.cwd())

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> "Config":
        return load_config(path)

    def deployment(self, deployment_id: str) -> Deployment | None:
        """A deployment by its "provider:model" id, from a tier if one lists it, else built on demand."""
        for dep in self.all_deployments():
            if dep.id == deployment_id:
                return dep
        provider_name, _, model = deployment_id.partition(":")
        provider = self.providers.get(provider_name)
        if provider is None or not model:
            return None
        from llmroute.accounting.prices import DeploymentRef  # keeps `import llmroute` from loading accounting

        # Not in any tier, so load-time pricing never saw it: the same strictness applies here.
        self.sections.prices.check_call_priced(
            DeploymentRef(deployment_id, provider.name, provider.kind, provider.region, model, ""))
        return _make_deployment(provider, model, DeploymentConfig(id=deployment_id), None, "")

    def all_deployments(self) -> List[Deployment]:
        seen: Dict[str, Deployment] = {}
        for tier in self.tiers.values():
            for dep in [*tier.deployments, *(d for pool in tier.pools.values() for d in pool)]:
                seen.setdefault(dep.id, dep)
        return list(seen.values())


def load_config(path: str | os.PathLike[str]) -> Config:
    """Read and validate a TOML config file. Raises `ConfigError` naming the file and key path."""
    file = Path(path)
    source = str(file)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("config file not found", path=source) from None
    except IsADirectoryError:
        raise ConfigError("is a directory, not a config file", path=source) from None
    except UnicodeDecodeError as exc:
        raise not_utf8(exc, source) from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file: {exc.strerror or exc}", path=source) from None
    if sys.version_info >= (3, 11):
        import tomllib  # the parser loads with the first file read: `Client(config={...})` never needs it
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib
    try:
        data = _hide_keys(tomllib.loads(text))
    except tomllib.TOMLDecodeError as exc:
        del text  # as below
        raise ConfigError(f"invalid TOML: {exc}", path=source) from None
    del text  # the file may hold keys: out of this frame's locals before anything can fail
    return _build(data, source=source, base_dir=file.resolve().parent)


def parse_deployment_id(value: str) -> tuple[str, str]:
    """Split "provider:model" at the first colon (model ids may hold colons, e.g. "qwen2.5:7b")."""
    provider, sep, model = value.partition(":")
    if not sep or not provider or not model:
        raise ValueError(f"deployment id {value!r} is not of the form 'provider:model-id'")
    return provider, model


def redact_url(url: str) -> str:
    """`url` without its user:password@ part, query and fragment, for messages."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "<unparseable URL>"
    return f"{parts.scheme}://{host}{port}{parts.path}" + ("?..." if parts.query else "")


def check_base_url(url: str, *, source: str, key: str) -> str:
    """A provider's base URL, refused (ConfigError naming `key`) unless it is a plain http(s) URL with a
    host. Credentials in it (`user:key@`, `?key=`) are refused without echoing them: keys go in
    `api_key` or an auth header, where they are masked."""
    if not isinstance(url, str) or not url.strip():
        raise ConfigError("base_url is empty", path=source, key=key)
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        raise ConfigError(f"base_url {redact_url(url)!r} holds whitespace or a control character",
                          path=source, key=key)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"base_url is not a valid URL ({exc})", path=source, key=key) from None
    if parts.scheme not in ("http", "https"):
        shown = url if "@" not in url and "?" not in url else "<redacted>"
        raise ConfigError(f"base_url {shown!r} is not an http(s) URL (it must start with http:// or https://)",
                          path=source, key=key)
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise ConfigError("base_url holds credentials (user:key@); put the key in api_key (sent as a Bearer "
                          "token) or in headers", path=source, key=key)
    if not parts.hostname:
        raise ConfigError(f"base_url {url!r} has no host", path=source, key=key)
    if parts.query:
        raise ConfigError(f"base_url {redact_url(url)!r} has a query string; put a key in api_key or headers "
                          "and other parameters in extra_body", path=source, key=key)
    if parts.fragment or url.endswith("#"):
        raise ConfigError(f"base_url {redact_url(url)!r} has a #fragment", path=source, key=key)
    if port == 0:
        raise ConfigError(f"base_url {redact_url(url)!r} has port 0", path=source, key=key)
    return url


def _key_path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("str", "DeploymentConfig", "function-after[_known_kind(), str]"):
            continue  # pydantic's union-branch labels are noise to a user
        else:
            out += ("." if out else "") + str(part)
    return out


def _raise_validation(exc: ValidationError, source: str, prefix: str = "", model: Any = None) -> None:
    # Report the most specific error: a union (a string or a table) fails once per branch, and the
    # branch that got deepest into the value is the one the user meant.
    errors = exc.errors(include_url=False)
    first = max(errors, key=lambda e: len(e["loc"]))
    errors = [e for e in errors if e is first or e["loc"][:2] != first["loc"][:2]]
    loc = tuple(first["loc"])
    msg = first["msg"]
    if first["type"] == "extra_forbidden":
        msg = _unknown_key_message(loc, prefix, model)
    elif first["type"] == "missing" and isinstance(first.get("input"), Mapping):
        msg = _missing_key_message(loc, first["input"], model if (model is not None or not prefix) else False)
    elif msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    key = _key_path(loc)
    if prefix:
        key = f"{prefix}.{key}" if key else prefix
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    raise ConfigError(msg + more, path=source, key=key or None) from None


def _fields_at(loc: tuple[Any, ...], root: Any = None) -> List[str] | None:
    """The keys the config's model (`root`, the whole config by default) takes at `loc`, read from the
    models' types; None when `loc` leads somewhere they do not describe."""
    tp: Any = root or _RawConfig
    for part in loc:
        tp = _model_of(tp, part)
        if tp is None:
            return None
    tp = _model_of(tp, None)
    return list(tp.model_fields) if isinstance(tp, type) and issubclass(tp, BaseModel) else None


def _model_of(tp: Any, part: Any) -> Any:
    """One step down a type along a validation error's location (`part` None: unwrap only)."""
    import typing

    origin = typing.get_origin(tp)
    if origin is Union or (origin is not None and str(origin) == "types.UnionType"):
        members = [a for a in typing.get_args(tp) if a is not type(None)]
        named = [a for a in members if getattr(a, "__name__", None) == part]
        if named:
            return named[0]
        models = [a for a in members if isinstance(a, type) and issubclass(a, BaseModel)]
        containers = [a for a in members if typing.get_origin(a) in (dict, list)]
        tp = (models or containers or members or [None])[0]
        origin = typing.get_origin(tp)
    if part is None:
        return tp
    if origin is dict:
        return typing.get_args(tp)[1]
    if origin is list:
        return typing.get_args(tp)[0] if isinstance(part, int) else None
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        field_info = tp.model_fields.get(str(part))
        return field_info.annotation if field_info is not None else None
    return None


def _unknown_key_message(loc: tuple[Any, ...], prefix: str, model: Any = None) -> str:
    name = str(loc[-1]) if loc else ""
    known = _fields_at(loc[:-1], model) if (model is not None or not prefix) else None
    if not prefix and len(loc) == 1:  # a section of its own: say which exist
        return (f"unknown key: there is no section [{name}]{did_you_mean(name, _RawConfig.model_fields)}; known sections: "
                + ", ".join(f"[{k}]" for k in _RawConfig.model_fields))
    if known is None:
        return "unknown key"
    hint = did_you_mean(name, known)
    return f"unknown key{hint}" if hint else f"unknown key (known: {', '.join(known)})"


def _missing_key_message(loc: tuple[Any, ...], table: Mapping[str, Any], model: Any = None) -> str:
    """A required key is missing: name it, and the table's key that looks like a misspelling of it
    (`model` False: the keys at `loc` are not known here)."""
    wanted = str(loc[-1])
    known = (_fields_at(loc[:-1], model) if model is not False else None) or [wanted]
    strays = [str(k) for k in table if str(k) not in known]
    close = [k for k in strays if did_you_mean(k, [wanted])]
    if close:
        return f"required key `{wanted}` is missing; unknown key `{close[0]}` (did you mean `{wanted}`?)"
    return f"required key `{wanted}` is missing"


def _expand_env(value: str, *, source: str, key: str) -> str:
    def repl(match: re.Match[str]) -> str:
        name = match.group(1)
        if not _ENV_REF.fullmatch(match.group(0)):
            raise ConfigError(f"malformed environment reference {match.group(0)!r}; write ${{NAME}}",
                              path=source, key=key)
        found = os.environ.get(name)
        if found is None or found == "":
            raise ConfigError(f"environment variable {name} is not set", path=source, key=key)
        return found

    return _ENV_ANY.sub(repl, value) if "${" in value else value


def _hide_keys(data: Any) -> Any:
    """The config with every provider's `api_key` and auth-like header values as `SecretStr`, before
    anything else reads it: no frame of the loading code holds a plain key afterwards (an error
    tracker printing the locals of a config error shows masks). Other values are shared, not copied."""
    providers = data.get("providers") if isinstance(data, Mapping) else None
    if not isinstance(providers, Mapping):
        return data
    hidden = {}
    for name, cfg in providers.items():
        if isinstance(cfg, Mapping):
            cfg = dict(cfg)
            if isinstance(cfg.get("api_key"), str):
                cfg["api_key"] = SecretStr(cfg["api_key"])
            if isinstance(cfg.get("headers"), Mapping):
                cfg["headers"] = {h: SecretStr(v) if isinstance(v, str) and is_secret_header(str(h)) else v
                                  for h, v in cfg["headers"].items()}
        hidden[name] = cfg
    return {**data, "providers": hidden}


def _expand_all(value: Any, *, source: str, key: str) -> Any:
    """Every string value of the config with its `${VAR}` references expanded (keys are left as is);
    a `SecretStr` stays one."""
    if isinstance(value, SecretStr):
        return SecretStr(_expand_env(value.get(), source=source, key=key)) if "${" in value.get() else value
    if isinstance(value, str):
        return _expand_env(value, source=source, key=key)
    if isinstance(value, Mapping):
        return {k: _expand_all(v, source=source, key=f"{key}.{k}" if key else str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_expand_all(v, source=source, key=f"{key}[{i}]") for i, v in enumerate(value)]
    return value


def _build(data: Mapping[str, Any], *, source: str, base_dir: Path) -> Config:
    if not isinstance(data, Mapping):
        raise ConfigError("the config must be a table (dict) at the top level", path=source)
    data = _expand_all(_hide_keys(data), source=source, key="")
    try:
        raw = _RawConfig.model_validate(dict(data))
    except ValidationError as exc:
        _raise_validation(exc, source)
        raise  # unreachable

    providers = {name: _resolve_provider(name, cfg, source) for name, cfg in raw.providers.items()}

    tiers: Dict[str, Tier] = {}
    for tier_name, tier_cfg in raw.tiers.items():
        deps = _tier_deployments(tier_cfg.deployments, providers, tier_name, f"tiers.{tier_name}.deployments", source)
        pools = {
            pool: _tier_deployments(entries, providers, tier_name, f"tiers.{tier_name}.pools.{pool}", source)
            for pool, entries in tier_cfg.pools.items()
        }
        for pool, entries in pools.items():
            if not entries:
                raise ConfigError("a pool needs at least one deployment", path=source,
                                  key=f"tiers.{tier_name}.pools.{pool}")
        tiers[tier_name] = Tier(
            name=tier_name,
            deployments=deps,
            fallback_tier=tier_cfg.fallback_tier,
            sticky_key=tier_cfg.sticky_key,
            resilience=_check_overrides(tier_cfg, source, f"tiers.{tier_name}"),
            pools=pools,
            kind=tier_cfg.kind,
            balance=tier_cfg.balance or (
                "load" if any(d.weight for d in [*deps, *(d for e in pools.values() for d in e)]) else "weighted"),
        )
    for tier in tiers.values():
        if tier.fallback_tier is not None and tier.fallback_tier not in tiers:
            raise ConfigError(
                f"unknown tier {tier.fallback_tier!r}", path=source, key=f"tiers.{tier.name}.fallback_tier"
            )
        if tier.fallback_tier == tier.name:
            raise ConfigError("a tier cannot fall back to itself", path=source, key=f"tiers.{tier.name}.fallback_tier")
        if tier.fallback_tier is not None and tiers[tier.fallback_tier].kind != tier.kind:
            raise ConfigError(f"a {tier.kind} tier cannot fall back to the {tiers[tier.fallback_tier].kind} tier "
                              f"{tier.fallback_tier!r}", path=source, key=f"tiers.{tier.name}.fallback_tier")
    reserved = {"auto"}
    for name in tiers:
        if name in reserved or ":" in name:
            raise ConfigError(f"tier name {name!r} is reserved or contains ':'", path=source, key=f"tiers.{name}")

    _check_same_settings(tiers, source)
    sections = _sections(raw, providers, tiers, source, base_dir)
    sections.routing.load_model(base_dir, source)  # [routing] model: a fitted router file
    return Config(providers=providers, tiers=tiers, raw=raw, sections=sections, source=source, base_dir=base_dir)


def _tier_deployments(entries: List[Any], providers: Dict[str, Provider], tier_name: str, key_prefix: str,
                      source: str) -> List[Deployment]:
    deps: List[Deployment] = []
    for i, entry in enumerate(entries):
        key = f"{key_prefix}[{i}]"
        dep_cfg = DeploymentConfig(id=entry) if isinstance(entry, str) else entry
        try:
            provider_name, model = parse_deployment_id(dep_cfg.id)
        except ValueError as exc:
            raise ConfigError(str(exc), path=source, key=key) from None
        provider = providers.get(provider_name)
        if provider is None:
            known = ", ".join(sorted(providers)) or "none configured"
            raise ConfigError(f"unknown provider {provider_name!r} (known providers: {known})", path=source, key=key)
        _check_overrides(dep_cfg, source, key)  # before the copy: inline keys must reach the policy
        deps.append(_make_deployment(provider, model, dep_cfg, tier_name, key))
    ids = [d.id for d in deps]
    dup = next((d for d in ids if ids.count(d) > 1), None)
    if dup:
        raise ConfigError(f"deployment {dup!r} is listed twice", path=source, key=key_prefix)
    return deps


def _check_same_settings(tiers: Dict[str, Tier], source: str) -> None:
    """A deployment listed in several tiers or pools must have the same settings everywhere (only its
    weight may differ): one breaker, one policy and one timeout set serve it, whichever tier calls it."""
    first: Dict[str, Deployment] = {}
    for tier in tiers.values():
        for dep in [*tier.deployments, *(d for pool in tier.pools.values() for d in pool)]:
            seen = first.setdefault(dep.id, dep)
            if seen is dep:
                continue
            differ = [name for name in _SHARED_SETTINGS if getattr(seen, name) != getattr(dep, name)]
            if differ:
                raise ConfigError(
                    f"deployment {dep.id!r} has other settings ({', '.join(differ)}) than at {seen.key_path}; "
                    "a deployment has one set of settings wherever it is listed", path=source, key=dep.key_path)


_SHARED_SETTINGS = ("connect_timeout_s", "ttft_timeout_s", "timeout_s", "context_window", "extra_body", "resilience")


def _check_overrides(cfg: BaseModel, source: str, key: str) -> Dict[str, Any]:
    """Inline resilience keys on a tier or deployment table, merged with its `resilience` subtable."""
    from llmroute.resilience.policy import ResiliencePolicy  # the resilience package loads with the first client, not at import

    extras = dict(cfg.model_extra or {})
    for name in extras:
        if name not in ResiliencePolicy.model_fields:
            known = [*type(cfg).model_fields, *ResiliencePolicy.model_fields]
            raise ConfigError(f"unknown key{did_you_mean(name, known) or ' (a ' + type(cfg).__name__.removesuffix('Config').lower() + ' takes: ' + ', '.join(type(cfg).model_fields) + ', and any [resilience] key)'}",
                              path=source, key=f"{key}.{name}")
    merged = {**getattr(cfg, "resilience", {}), **extras}
    if isinstance(cfg, DeploymentConfig):
        object.__setattr__(cfg, "resilience", merged)
    return merged


# Sections whose empty table means their defaults, which are valid (tests/test_config_cold.py checks each
# against a validated `Model.model_validate({})`): a config that leaves one out gets its defaults without
# building the section's validator (a pydantic schema build each, plus pydantic's plugin scan on the first).
EMPTY_IS_DEFAULTS = frozenset({
    "llmroute.routing.rules.RoutingConfig", "llmroute.state.backend.StateConfig",
    "llmroute._runtime.telemetry.TelemetryConfig", "llmroute.cache.cache_policy.CacheConfig",
    "llmroute.cache.cache_policy.TierCacheConfig", "llmroute.accounting.ledger.LedgerConfig"})


def _validated(model: Any, data: Any, source: str, key: str) -> Any:
    if isinstance(data, Mapping) and not data and f"{model.__module__}.{model.__qualname__}" in EMPTY_IS_DEFAULTS:
        return model.model_construct()
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        _raise_validation(exc, source, key, model)


def _with_path(source: str, check: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a section's cross-check; its ConfigError names the key, we add the file."""
    try:
        return check(*args, **kwargs)
    except ConfigError as exc:
        if exc.path is None:
            raise ConfigError(exc.detail, path=source, key=exc.key) from None
        raise


def _sections(raw: _RawConfig, providers: Dict[str, Provider], tiers: Dict[str, Tier], source: str,
              base_dir: Path) -> Sections:
    # Imported here, at load, so that `import llmroute` stays light.
    from llmroute.accounting.budgets import BudgetConfig, GuardConfig, check_budget_config
    from llmroute.accounting.ledger import LedgerConfig, check_ledger_path
    from llmroute.accounting.prices import DeploymentRef, PriceBook, PricingConfig
    from llmroute.resilience.policy import merge, policy_from_config
    from llmroute.routing.rules import RoutingConfig, check_routing
    from llmroute._runtime.telemetry import TelemetryConfig

    routing = _validated(RoutingConfig, raw.routing, source, "routing")
    if raw.routing:  # without a [routing] section, model="auto" says so at the call
        chat_tiers = {name: t for name, t in tiers.items() if t.kind == "chat"}  # routing never picks embeddings
        deployment_ids = {d.id for t in chat_tiers.values() for d in t.deployments}
        _with_path(source, check_routing, routing, set(chat_tiers), deployment_ids)
    base = _with_path(source, policy_from_config, raw.resilience, key="resilience")
    policies: Dict[str, Any] = {}
    for tier in tiers.values():
        tier_policy = _with_path(source, merge, base, tier.resilience, key=f"tiers.{tier.name}")
        for dep in [*tier.deployments, *(d for pool in tier.pools.values() for d in pool)]:
            if dep.id not in policies:
                policies[dep.id] = _with_path(source, merge, tier_policy, dep.resilience, key=dep.key_path)
                _check_timeouts(dep, policies[dep.id].deadline_s, source)

    pricing = _validated(PricingConfig, raw.pricing, source, "pricing")
    prices = _with_path(source, PriceBook, pricing, base_dir=str(base_dir))
    refs = []
    for tier in tiers.values():
        for dep in [*tier.deployments, *(d for pool in tier.pools.values() for d in pool)]:
            p = dep.provider
            refs.append(DeploymentRef(dep.id, p.name, p.kind, p.region, dep.model, dep.key_path))
    _with_path(source, prices.check_priced, refs, providers=set(providers))

    ledger = _validated(LedgerConfig, raw.ledger, source, "ledger")
    _with_path(source, check_ledger_path, ledger, base_dir)
    if ledger.url:
        ledger.url = _expand_env(ledger.url, source=source, key="ledger.url")
    from llmroute.state.backend import StateConfig  # loaded at config load / client build, not at `import llmroute`

    state = _validated(StateConfig, raw.state, source, "state")
    if state.url:
        state.url = _expand_env(state.url, source=source, key="state.url")
    budgets = [_validated(BudgetConfig, b, source, f"budgets[{i}]") for i, b in enumerate(raw.budgets)]
    currencies = set()
    for ref in refs:
        price = prices.lookup(ref.provider, ref.kind, ref.region, ref.model)
        if price is not None:
            currencies.add(price.currency)
    chat_tier_names = {name for name, t in tiers.items() if t.kind == "chat"}  # a downgrade goes to a chat tier
    _with_path(source, check_budget_config, budgets, tiers=chat_tier_names, currencies=currencies, rates=pricing.rates())
    guards = {name: _validated(GuardConfig, g, source, f'guards."{name}"') for name, g in raw.guards.items()}
    telemetry = _validated(TelemetryConfig, raw.telemetry, source, "telemetry")
    pools: Dict[str, Dict[str, Any]] = {}
    for name, limits in raw.pools.items():
        for key in limits:
            if key not in POOL_LIMIT_KEYS:
                raise ConfigError(f"unknown key (a pool sets limits: {', '.join(sorted(POOL_LIMIT_KEYS))})",
                                  path=source, key=f"pools.{name}.{key}")
        _with_path(source, merge, base, limits, key=f"pools.{name}")  # validate the values
        pools[name] = dict(limits)
    pool_names = set(DEFAULT_POOLS) | set(pools) | {name for tier in tiers.values() for name in tier.pools}
    for i, rule in enumerate(routing.rules):
        if rule.pool is not None and rule.pool not in pool_names:
            raise ConfigError(f"unknown pool {rule.pool!r} (known: {', '.join(sorted(pool_names))})", path=source,
                              key=f"routing.rules[{i}].pool")
    return Sections(routing=routing, resilience=base, policies=policies, pools=pools,
                    pool_names=frozenset(pool_names), pricing=pricing,
                    prices=prices, ledger=ledger, budgets=budgets, guards=guards, telemetry=telemetry,
                    cache=_cache_settings(raw, source), state=state)


def _cache_settings(raw: _RawConfig, source: str) -> Any:
    tiers = {name: _validated(TierCacheConfig, t.cache, source, f"tiers.{name}.cache")
             for name, t in raw.tiers.items() if t.cache is not None}
    return CacheSettings(_validated(CacheConfig, raw.cache, source, "cache"), tiers)


def _resolve_provider(name: str, cfg: ProviderConfig, source: str) -> Provider:
    spec = KINDS[cfg.kind]
    key_path = f"providers.{name}"
    if ":" in name:
        raise ConfigError("provider names cannot contain ':'", path=source, key=key_path)
    region = cfg.region
    if region is None:
        region = spec.default_region
    elif spec.default_region is None:
        raise ConfigError(f"kind {cfg.kind!r} has no regions", path=source, key=f"{key_path}.region")
    elif region not in spec.base_urls:
        raise ConfigError(
            f"unknown region {region!r} for {cfg.kind}; expected one of: {', '.join(k for k in spec.base_urls if k)}",
            path=source,
            key=f"{key_path}.region",
        )
    if cfg.protocol not in spec.protocols:
        raise ConfigError(
            f"kind {cfg.kind!r} speaks only: {', '.join(spec.protocols)}", path=source, key=f"{key_path}.protocol"
        )

    if cfg.base_url is not None:
        base_url = check_base_url(cfg.base_url, source=source, key=f"{key_path}.base_url")
    else:
        table = spec.native_base_urls if cfg.protocol == "native" else spec.base_urls
        base_url = table.get(region, "")
        if not base_url:
            raise ConfigError(f"kind {cfg.kind!r} needs a base_url", path=source, key=f"{key_path}.base_url")
    base_url = base_url.rstrip("/")
    if cfg.metrics_url is not None:
        check_base_url(cfg.metrics_url, source=source, key=f"{key_path}.metrics_url")

    api_key: SecretStr | None = None
    if cfg.api_key is not None:
        api_key = cfg.api_key
        if not api_key.get().strip():
            if spec.key_required:
                raise ConfigError(f"api_key is empty; kind {cfg.kind!r} needs a key", path=source,
                                  key=f"{key_path}.api_key")
            api_key = None  # a self-hosted server without auth: `api_key = ""` means no key
        elif any(c in api_key.get() for c in "\r\n\x00 \t"):
            raise ConfigError("api_key holds whitespace or a line break", path=source, key=f"{key_path}.api_key")
    elif spec.key_env and os.environ.get(spec.key_env):
        api_key = SecretStr(os.environ[spec.key_env])
    elif spec.key_required:
        hint = f" and environment variable {spec.key_env} is not set" if spec.key_env else ""
        raise ConfigError(f"no api_key given{hint}", path=source, key=f"{key_path}.api_key")

    return Provider(
        name=name,
        kind=cfg.kind,
        spec=spec,
        base_url=base_url,
        api_key=api_key,
        region=region,
        protocol=cfg.protocol,
        headers=dict(cfg.headers),  # auth-like values stay SecretStr until the adapter sends them
        include_usage=spec.include_usage if cfg.include_usage is None else cfg.include_usage,
        max_tokens_field=cfg.max_tokens_field or spec.max_tokens_field,
        split_think_tags=cfg.split_think_tags,
        max_connections=cfg.max_connections,
        config=cfg,
    )


def _make_deployment(
    provider: Provider, model: str, cfg: DeploymentConfig, tier: str | None, key_path: str
) -> Deployment:
    pc = provider.config
    return Deployment(
        id=f"{provider.name}:{model}",
        provider=provider,
        model=model,
        tier=tier,
        weight=cfg.weight,
        connect_timeout_s=cfg.connect_timeout_s or pc.connect_timeout_s or DEFAULT_CONNECT_TIMEOUT_S,
        ttft_timeout_s=cfg.ttft_timeout_s or pc.ttft_timeout_s or DEFAULT_TTFT_TIMEOUT_S,
        timeout_s=cfg.timeout_s or pc.timeout_s or DEFAULT_TIMEOUT_S,
        context_window=cfg.context_window,
        extra_body=dict(cfg.extra_body),
        resilience=dict(cfg.resilience),
        key_path=key_path,
        explicit_timeouts=frozenset(name for name in _TIMEOUTS
                                    if getattr(cfg, name) is not None or getattr(pc, name) is not None),
    )


_TIMEOUTS = ("connect_timeout_s", "ttft_timeout_s", "timeout_s")


def _check_timeouts(dep: Deployment, deadline_s: float, source: str) -> None:
    """Set timeouts in an order where each can fire: connect and first token within the whole
    attempt's timeout, none past the call's deadline. Defaults are not held against a set value."""
    for name in ("connect_timeout_s", "ttft_timeout_s"):
        if name in dep.explicit_timeouts and getattr(dep, name) > dep.timeout_s:
            raise ConfigError(f"{name} ({getattr(dep, name):g}) is above timeout_s ({dep.timeout_s:g}) for "
                              f"{dep.id}; it could never fire", path=source, key=dep.key_path or None)
    for name in _TIMEOUTS:
        if name in dep.explicit_timeouts and getattr(dep, name) > deadline_s:
            raise ConfigError(f"{name} ({getattr(dep, name):g}) is above the call deadline resilience.deadline_s "
                              f"({deadline_s:g}) for {dep.id}; raise deadline_s or lower {name}", path=source,
                              key=dep.key_path or None)
