"""TOML (or dict) -> a validated `Config`, with the file and key path in every error.

Every mistake is found here, at load, never at the first call: unknown keys, unknown provider kinds,
a tier that names an unknown provider, a `${VAR}` that is not set, a cloud provider with no key.
One section per concept: `providers`, `tiers`, `routing`, `resilience`, `pricing`, `ledger`,
`budgets`, `guards`, `telemetry`. This module reads the config file and the environment, nothing else.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Literal, Mapping, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import ConfigError
from .providers.registry import KINDS, KindSpec
from .secrets import SecretStr

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

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


class _Section(BaseModel):
    # Schemas are built on first use, not at import: `import llmroute` stays light.
    model_config = ConfigDict(extra="forbid", defer_build=True)


class ProviderConfig(_Section):
    kind: str
    api_key: Optional[str] = None
    base_url: Optional[str] = None
    region: Optional[str] = None
    protocol: Literal["compatible", "native"] = "compatible"
    headers: Dict[str, str] = Field(default_factory=dict)
    include_usage: Optional[bool] = None  # None: the kind's default (providers.md §11.1)
    max_tokens_field: Optional[Literal["max_tokens", "max_completion_tokens"]] = None
    split_think_tags: bool = True
    connect_timeout_s: Optional[float] = Field(default=None, gt=0)
    ttft_timeout_s: Optional[float] = Field(default=None, gt=0)
    timeout_s: Optional[float] = Field(default=None, gt=0)
    max_connections: int = Field(default=100, ge=1)

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, value: str) -> str:
        if value not in KINDS:
            raise ValueError(f"unknown provider kind {value!r}; expected one of: {', '.join(KINDS)}")
        return value


class _Overridable(BaseModel):
    # Any `[resilience]` key may be set inline on a tier or a deployment; `_build` checks the names.
    model_config = ConfigDict(extra="allow", defer_build=True)


class DeploymentConfig(_Overridable):
    id: str
    weight: Optional[float] = Field(default=None, gt=0)
    connect_timeout_s: Optional[float] = Field(default=None, gt=0)
    ttft_timeout_s: Optional[float] = Field(default=None, gt=0)
    timeout_s: Optional[float] = Field(default=None, gt=0)
    context_window: Optional[int] = Field(default=None, gt=0)
    extra_body: Dict[str, Any] = Field(default_factory=dict)
    resilience: Dict[str, Any] = Field(default_factory=dict)


class TierConfig(_Overridable):
    deployments: List[Union[str, DeploymentConfig]] = Field(min_length=1)
    fallback_tier: Optional[str] = None
    sticky_key: Optional[str] = None
    # Traffic pools with deployments of their own: `pools = { batch = ["sf:...", ...] }`.
    pools: Dict[str, List[Union[str, DeploymentConfig]]] = Field(default_factory=dict)
    resilience: Dict[str, Any] = Field(default_factory=dict)


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


POOL_LIMIT_KEYS = frozenset({"max_concurrency", "rpm", "tpm", "queue_timeout_s", "queue_poll_s"})
DEFAULT_POOLS = ("interactive", "batch")


# Timeouts when neither the deployment nor its provider sets one: connect, first token, whole call.
DEFAULT_CONNECT_TIMEOUT_S = 10.0
DEFAULT_TTFT_TIMEOUT_S = 60.0
DEFAULT_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Provider:
    """A configured provider, resolved: its base URL, its key (masked in reprs), its kind's quirks."""

    name: str
    kind: str
    spec: KindSpec
    base_url: str
    api_key: Optional[SecretStr]
    region: Optional[str]
    protocol: str
    headers: Mapping[str, str]
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
    tier: Optional[str] = None
    weight: Optional[float] = None
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    ttft_timeout_s: float = DEFAULT_TTFT_TIMEOUT_S
    timeout_s: float = DEFAULT_TIMEOUT_S
    context_window: Optional[int] = None
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    resilience: Mapping[str, Any] = field(default_factory=dict)
    key_path: str = ""


@dataclass
class Tier:
    name: str
    deployments: List[Deployment]
    fallback_tier: Optional[str] = None
    sticky_key: Optional[str] = None
    resilience: Mapping[str, Any] = field(default_factory=dict)
    pools: Dict[str, List[Deployment]] = field(default_factory=dict)  # pool -> its own deployments

    def deployments_for(self, pool: str) -> List[Deployment]:
        return self.pools.get(pool) or self.deployments


@dataclass
class Sections:
    """The validated sections other modules own (their models live beside their code)."""

    routing: Any
    resilience: Any  # ResiliencePolicy: the [resilience] defaults
    policies: Dict[str, Any]  # deployment id -> ResiliencePolicy with tier and deployment overrides
    pools: Dict[str, Dict[str, Any]]  # pool name -> its limit overrides
    pool_names: frozenset  # every pool a call may name
    pricing: Any
    prices: Any  # PriceBook
    ledger: Any
    budgets: List[Any]
    guards: Dict[str, Any]
    telemetry: Any


@dataclass
class Config:
    """The whole validated configuration. Build it with `load_config(path)` or `Config.from_dict(d)`."""

    providers: Dict[str, Provider]
    tiers: Dict[str, Tier]
    raw: _RawConfig
    sections: Sections
    source: str = "<dict>"
    base_dir: Path = field(default_factory=Path.cwd)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "<dict>", base_dir: Path | None = None) -> "Config":
        return _build(data, source=source, base_dir=base_dir or Path.cwd())

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> "Config":
        return load_config(path)

    def deployment(self, deployment_id: str) -> Optional[Deployment]:
        """A deployment by its "provider:model" id, from a tier if one lists it, else built on demand."""
        for dep in self.all_deployments():
            if dep.id == deployment_id:
                return dep
        provider_name, _, model = deployment_id.partition(":")
        provider = self.providers.get(provider_name)
        if provider is None or not model:
            return None
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
    except OSError as exc:
        raise ConfigError(f"cannot read config file: {exc.strerror or exc}", path=source) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"invalid TOML: {exc}", path=source) from None
    return _build(data, source=source, base_dir=file.resolve().parent)


def parse_deployment_id(value: str) -> tuple[str, str]:
    """Split "provider:model" at the first colon (model ids may hold colons, e.g. "qwen2.5:7b")."""
    provider, sep, model = value.partition(":")
    if not sep or not provider or not model:
        raise ValueError(f"deployment id {value!r} is not of the form 'provider:model-id'")
    return provider, model


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


def _raise_validation(exc: ValidationError, source: str, prefix: str = "") -> None:
    # Report the most specific error: a union (a string or a table) fails once per branch, and the
    # branch that got deepest into the value is the one the user meant.
    errors = exc.errors(include_url=False)
    first = max(errors, key=lambda e: len(e["loc"]))
    errors = [e for e in errors if e is first or e["loc"][:2] != first["loc"][:2]]
    loc = tuple(first["loc"])
    msg = first["msg"]
    if first["type"] == "extra_forbidden":
        msg = "unknown key"
    elif msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    key = _key_path(loc)
    if prefix:
        key = f"{prefix}.{key}" if key else prefix
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    raise ConfigError(msg + more, path=source, key=key or None) from None


def _expand_env(value: str, *, source: str, key: str) -> str:
    def repl(match: re.Match[str]) -> str:
        name = match.group(1)
        found = os.environ.get(name)
        if found is None or found == "":
            raise ConfigError(f"environment variable {name} is not set", path=source, key=key)
        return found

    return _ENV_REF.sub(repl, value)


def _build(data: Mapping[str, Any], *, source: str, base_dir: Path) -> Config:
    if not isinstance(data, Mapping):
        raise ConfigError("the config must be a table (dict) at the top level", path=source)
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
        )
    for tier in tiers.values():
        if tier.fallback_tier is not None and tier.fallback_tier not in tiers:
            raise ConfigError(
                f"unknown tier {tier.fallback_tier!r}", path=source, key=f"tiers.{tier.name}.fallback_tier"
            )
        if tier.fallback_tier == tier.name:
            raise ConfigError("a tier cannot fall back to itself", path=source, key=f"tiers.{tier.name}.fallback_tier")
    reserved = {"auto"}
    for name in tiers:
        if name in reserved or ":" in name:
            raise ConfigError(f"tier name {name!r} is reserved or contains ':'", path=source, key=f"tiers.{name}")

    sections = _sections(raw, providers, tiers, source)
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


def _check_overrides(cfg: BaseModel, source: str, key: str) -> Dict[str, Any]:
    """Inline resilience keys on a tier or deployment table, merged with its `resilience` subtable."""
    from .resilience.policy import ResiliencePolicy

    extras = dict(cfg.model_extra or {})
    for name in extras:
        if name not in ResiliencePolicy.model_fields:
            raise ConfigError("unknown key", path=source, key=f"{key}.{name}")
    merged = {**getattr(cfg, "resilience", {}), **extras}
    if isinstance(cfg, DeploymentConfig):
        object.__setattr__(cfg, "resilience", merged)
    return merged


def _validated(model: Any, data: Any, source: str, key: str) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        _raise_validation(exc, source, key)


def _with_path(source: str, check: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a section's cross-check; its ConfigError names the key, we add the file."""
    try:
        return check(*args, **kwargs)
    except ConfigError as exc:
        if exc.path is None:
            raise ConfigError(exc.detail, path=source, key=exc.key) from None
        raise


def _sections(raw: _RawConfig, providers: Dict[str, Provider], tiers: Dict[str, Tier], source: str) -> Sections:
    # Imported here, at load, so that `import llmroute` stays light.
    from .accounting.budgets import BudgetConfig, GuardConfig, check_budget_config
    from .accounting.ledger import LedgerConfig
    from .accounting.prices import DeploymentRef, PriceBook, PricingConfig
    from .resilience.policy import merge, policy_from_config
    from .routing.rules import RoutingConfig, check_routing
    from .telemetry import TelemetryConfig

    routing = _validated(RoutingConfig, raw.routing, source, "routing")
    if raw.routing:  # without a [routing] section, model="auto" says so at the call
        deployment_ids = {d.id for t in tiers.values() for d in t.deployments}
        _with_path(source, check_routing, routing, set(tiers), deployment_ids)
    base = _with_path(source, policy_from_config, raw.resilience, key="resilience")
    policies: Dict[str, Any] = {}
    for tier in tiers.values():
        tier_policy = _with_path(source, merge, base, tier.resilience, key=f"tiers.{tier.name}")
        for dep in [*tier.deployments, *(d for pool in tier.pools.values() for d in pool)]:
            if dep.id not in policies:
                policies[dep.id] = _with_path(source, merge, tier_policy, dep.resilience, key=dep.key_path)

    pricing = _validated(PricingConfig, raw.pricing, source, "pricing")
    prices = PriceBook(pricing)
    refs = []
    for tier in tiers.values():
        for dep in [*tier.deployments, *(d for pool in tier.pools.values() for d in pool)]:
            p = dep.provider
            refs.append(DeploymentRef(dep.id, p.name, p.kind, p.region, dep.model, dep.key_path))
    _with_path(source, prices.check_priced, refs, providers=set(providers))

    ledger = _validated(LedgerConfig, raw.ledger, source, "ledger")
    budgets = [_validated(BudgetConfig, b, source, f"budgets[{i}]") for i, b in enumerate(raw.budgets)]
    currencies = set()
    for ref in refs:
        price = prices.lookup(ref.provider, ref.kind, ref.region, ref.model)
        if price is not None:
            currencies.add(price.currency)
    _with_path(source, check_budget_config, budgets, tiers=set(tiers), currencies=currencies, rates=pricing.rates())
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
                    prices=prices, ledger=ledger, budgets=budgets, guards=guards, telemetry=telemetry)


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
        base_url = _expand_env(cfg.base_url, source=source, key=f"{key_path}.base_url")
    else:
        table = spec.native_base_urls if cfg.protocol == "native" else spec.base_urls
        base_url = table.get(region, "")
        if not base_url:
            raise ConfigError(f"kind {cfg.kind!r} needs a base_url", path=source, key=f"{key_path}.base_url")
    if not re.match(r"^https?://[^/\s]+", base_url):
        raise ConfigError(f"base_url {base_url!r} is not an http(s) URL", path=source, key=f"{key_path}.base_url")
    base_url = base_url.rstrip("/")

    api_key: Optional[SecretStr] = None
    if cfg.api_key is not None:
        api_key = SecretStr(_expand_env(cfg.api_key, source=source, key=f"{key_path}.api_key"))
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
        headers=dict(cfg.headers),
        include_usage=spec.include_usage if cfg.include_usage is None else cfg.include_usage,
        max_tokens_field=cfg.max_tokens_field or spec.max_tokens_field,
        split_think_tags=cfg.split_think_tags,
        max_connections=cfg.max_connections,
        config=cfg,
    )


def _make_deployment(
    provider: Provider, model: str, cfg: DeploymentConfig, tier: Optional[str], key_path: str
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
    )
