"""Which tier a request goes to: the `[routing]` config section and the decision it drives.

`decide()` applies, in order:
1. the `[[routing.rules]]`, first match wins (reason `rule: feature=report-generation`);
2. `routing.default` when it names a tier (reason `default: small`);
3. otherwise (`default = "auto"`) the classifier's score against `routing.threshold`: at or above
   it the request goes to `routing.large_tier`, below it to `routing.small_tier`
   (reason `classifier: code request (score 0.83 >= 0.55)`). With `routing.model` set, the fitted
   router loaded from that file scores instead of the heuristic (fitted.py).

Which tier is "large" and which "small" is config, not a naming convention: `large_tier` and
`small_tier` default to "large" and "small" and must name configured tiers whenever the
classifier can run (`default = "auto"`), which `check_routing` enforces at load.

This module is sans-I/O: plain values in, a `RouteDecision` out; no clock, no network, no logging
(`RoutingConfig.load_model` reads the fitted router file once, at config load, through fitted.py).
It never raises on a request (a rule that cannot be evaluated simply does not match); config
mistakes are caught by `check_routing` at load time instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr
from llmroute._runtime.config_model import ConfigModel

from llmroute.errors import ConfigError
from llmroute.routing.shadow import ShadowConfig

__all__ = [
    "RoutingRuleWhen",
    "RoutingRule",
    "RoutingConfig",
    "RouteQuery",
    "RouteDecision",
    "check_routing",
    "decide",
    "rule_matches",
]


class RoutingRuleWhen(BaseModel):
    """The conditions of one rule; every condition given must hold. An empty `when` matches all."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    feature: str | list[str] | None = None
    """The call's `feature=` equals this (or is one of these)."""
    metadata: dict[str, str] | None = None
    """Each key of the call's metadata equals the given value (compared as strings)."""
    min_input_tokens: int | None = Field(default=None, ge=0)
    max_input_tokens: int | None = Field(default=None, ge=0)
    min_max_tokens: int | None = Field(default=None, ge=0)
    """The requested `max_tokens` is at least this (a call without `max_tokens` does not match)."""
    max_max_tokens: int | None = Field(default=None, ge=0)
    has_tools: bool | None = None
    json_schema: bool | None = None
    """The call asks for a JSON schema (`response_format` of type json_schema)."""


class RoutingRule(ConfigModel):
    """`when` matches -> `tier` (a tier name, or a "provider:model" deployment), optionally a `pool`."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    when: RoutingRuleWhen = Field(default_factory=RoutingRuleWhen)
    tier: str
    pool: str | None = None


class RoutingConfig(ConfigModel):
    """The `[routing]` section."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    default: str = "auto"
    """What `model="auto"` means when no rule matches: "auto" (the classifier) or a tier name."""
    threshold: float = Field(default=0.55, ge=0.0, le=1.0)
    """Classifier score (unitless, 0..1) at or above which a request goes to `large_tier`."""
    large_tier: str = "large"
    small_tier: str = "small"
    rules: list[RoutingRule] = Field(default_factory=list)
    model: str | None = None
    """A fitted router file (`llmroute router fit`), relative to the config file; None: the heuristic."""
    shadow: ShadowConfig = Field(default_factory=ShadowConfig.model_construct)  # the defaults, unvalidated (valid)
    """`[routing.shadow]`: background comparisons with the large tier (shadow.py); off by default."""
    _scorer: Any = PrivateAttr(default=None)

    def load_model(self, base_dir: Any = None, source: str | None = None) -> None:
        """Read `model` (the only I/O here; done once, at config load). ConfigError names the file."""
        if self.model is None:
            self._scorer = None
            return
        from llmroute.routing.fitted import load_model  # only when [routing] model names a fitted model

        try:
            self._scorer = load_model(self.model, base=base_dir)
        except ConfigError as exc:
            if source is not None and exc.path is None:
                raise ConfigError(exc.detail, path=source, key="routing.model") from None
            raise

    @property
    def scorer(self) -> Any:
        """The loaded fitted router, or None when the heuristic classifier scores."""
        return self._scorer


def check_routing(
    config: RoutingConfig,
    tier_names: set[str] | frozenset[str],
    deployment_names: set[str] | frozenset[str] = frozenset(),
) -> None:
    """Cross-check the routing section against the configured tiers; raise `ConfigError` naming the key.

    A rule's `tier` may name a tier or, when `deployment_names` is given, a "provider:model"
    deployment. `default` must be "auto" or a tier; with "auto", `large_tier` and `small_tier`
    must be tiers, since the classifier will send requests there.
    """
    known = ", ".join(sorted(tier_names)) or "(none)"
    for index, rule in enumerate(config.rules):
        if rule.tier not in tier_names and rule.tier not in deployment_names:
            raise ConfigError(
                f"rule {index} sends requests to unknown tier {rule.tier!r}; configured tiers: {known}",
                key=f"routing.rules[{index}].tier",
            )
        when = rule.when
        for low, high, name in (
            (when.min_input_tokens, when.max_input_tokens, "input_tokens"),
            (when.min_max_tokens, when.max_max_tokens, "max_tokens"),
        ):
            if low is not None and high is not None and low > high:
                raise ConfigError(
                    f"rule {index} can never match: min_{name}={low} > max_{name}={high}",
                    key=f"routing.rules[{index}].when",
                )
    judge = config.shadow.judge
    if judge is not None and judge not in tier_names and judge not in deployment_names:
        raise ConfigError(f"the shadow judge {judge!r} is not a tier or deployment; configured tiers: {known}",
                          key="routing.shadow.judge")
    if config.shadow.rate > 0 and config.default == "auto" and config.large_tier == config.small_tier:
        raise ConfigError("shadow comparisons need distinct large_tier and small_tier", key="routing.shadow.rate")
    if config.default != "auto" and config.default not in tier_names:
        raise ConfigError(
            f"default must be \"auto\" or a tier name, not {config.default!r}; configured tiers: {known}",
            key="routing.default",
        )
    if config.default == "auto":
        for key in ("large_tier", "small_tier"):
            name = getattr(config, key)
            if name not in tier_names:
                raise ConfigError(
                    f"default = \"auto\" routes to {key} {name!r}, which is not a configured tier "
                    f"(configured: {known}); add the tier or set routing.{key}",
                    key=f"routing.{key}",
                )


@dataclass(frozen=True)
class RouteQuery:
    """What routing may look at in one call. `input_tokens=None` means: estimate it from `messages`."""

    messages: Sequence[Mapping[str, Any]] = ()
    feature: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    input_tokens: int | None = None
    max_tokens: int | None = None
    has_tools: bool = False
    has_json_schema: bool = False


@dataclass(frozen=True)
class RouteDecision:
    """The tier chosen, why, and the classifier score when the classifier ran (else None)."""

    tier: str
    reason: str
    score: float | None = None
    rule_index: int | None = None
    pool: str | None = None
    category: str | None = None


def _describe(when: RoutingRuleWhen) -> str:
    parts: list[str] = []
    if when.feature is not None:
        parts.append(f"feature={when.feature if isinstance(when.feature, str) else '|'.join(when.feature)}")
    if when.metadata:
        parts.extend(f"metadata.{key}={value}" for key, value in when.metadata.items())
    for name in ("min_input_tokens", "max_input_tokens", "min_max_tokens", "max_max_tokens"):
        value = getattr(when, name)
        if value is not None:
            parts.append(f"{name}={value}")
    if when.has_tools is not None:
        parts.append(f"has_tools={str(when.has_tools).lower()}")
    if when.json_schema is not None:
        parts.append(f"json_schema={str(when.json_schema).lower()}")
    return ", ".join(parts) or "always"


def rule_matches(when: RoutingRuleWhen, query: RouteQuery, input_tokens: int) -> bool:
    """Whether every condition of `when` holds for this query (`input_tokens` already resolved)."""
    if when.feature is not None:
        allowed = (when.feature,) if isinstance(when.feature, str) else when.feature
        if query.feature not in allowed:
            return False
    if when.metadata:
        for key, value in when.metadata.items():
            actual = query.metadata.get(key) if query.metadata else None
            if actual is None or str(actual) != value:
                return False
    if when.min_input_tokens is not None and input_tokens < when.min_input_tokens:
        return False
    if when.max_input_tokens is not None and input_tokens > when.max_input_tokens:
        return False
    if when.min_max_tokens is not None and (query.max_tokens is None or query.max_tokens < when.min_max_tokens):
        return False
    if when.max_max_tokens is not None and (query.max_tokens is None or query.max_tokens > when.max_max_tokens):
        return False
    if when.has_tools is not None and bool(query.has_tools) != when.has_tools:
        return False
    if when.json_schema is not None and bool(query.has_json_schema) != when.json_schema:
        return False
    return True


def _needs_input_tokens(when: RoutingRuleWhen) -> bool:
    return when.min_input_tokens is not None or when.max_input_tokens is not None


def decide(
    config: RoutingConfig,
    query: RouteQuery,
    *,
    large_tier: str | None = None,
    small_tier: str | None = None,
) -> RouteDecision:
    """Pick the tier for a `model="auto"` call: rules, then the default tier, then the classifier.

    `large_tier`/`small_tier` override the config's names (for callers that resolve them elsewhere).
    """
    from llmroute.routing.token_estimate import estimate_tokens  # light: no classifier tables

    input_tokens = query.input_tokens
    for index, rule in enumerate(config.rules):
        if input_tokens is None and _needs_input_tokens(rule.when):
            input_tokens = estimate_tokens(query.messages)
        if rule_matches(rule.when, query, input_tokens or 0):
            return RouteDecision(
                tier=rule.tier, reason=f"rule: {_describe(rule.when)}", rule_index=index, pool=rule.pool
            )
    if config.default != "auto":
        return RouteDecision(tier=config.default, reason=f"default: {config.default}")
    scorer = config._scorer
    if scorer is None:
        # The classifier (its tables and patterns built at import) loads with the first call it scores.
        from llmroute.routing.classifier import classify
    result = (scorer.classify if scorer is not None else classify)(query.messages, max_tokens=query.max_tokens)
    threshold = config.threshold
    if result.score >= threshold:
        tier, op = large_tier or config.large_tier, ">="
    else:
        tier, op = small_tier or config.small_tier, "<"
    digits = 2
    while digits < 6 and f"{result.score:.{digits}f}" == f"{threshold:.{digits}f}":
        digits += 1  # never print "0.55 < 0.55"
    return RouteDecision(
        tier=tier,
        reason=f"classifier: {result.reason} (score {result.score:.{digits}f} {op} {threshold:.{digits}f})",
        score=result.score,
        category=result.category,
    )
