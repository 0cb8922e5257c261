"""Where a call may go: `model=` resolved to a tier's deployments, one deployment, or the router's
choice for "auto". Plain functions over the config; no state, no I/O."""

from __future__ import annotations

from typing import Any, List, Mapping

from llmroute import errors as E
from llmroute._runtime.suggest import did_you_mean
from llmroute.config import Config, Deployment

from llmroute._call.prepared import PreparedCall, Target

__all__ = ["Target", "resolve_target", "tier_target", "route_auto", "bare_candidates", "bare_deployment"]


def resolve_target(config: Config, prepared: "PreparedCall") -> Target:
    """A chat call's target: a tier, "auto" (the routing rules and the classifier), or "provider:model"."""
    model = prepared.model
    tiers = config.tiers
    if model == "auto":
        return route_auto(config, prepared)
    tier = tiers.get(model)
    if tier is not None and tier.kind != "chat":
        raise E.RoutingError(f"tier {model!r} serves embeddings: call client.embeddings.create(model={model!r}, ...)")
    if tier is not None:
        return tier_target(config, tier.name, f"tier: {tier.name}", prepared.pool)
    if ":" in model and model.partition(":")[0] in config.providers:
        dep = config.deployment(model)
        if dep is not None:
            return Target([dep], dep.tier, f"deployment: {dep.id}")
    bare = bare_deployment(config, model)
    if bare is not None:
        return Target([bare], bare.tier, f"model: {model} ({bare.id})")
    if ":" in model:
        provider = model.partition(":")[0]
        known = ", ".join(sorted(config.providers)) or "none"
        raise E.RoutingError(f"model {model!r}: unknown provider {provider!r} (configured providers: {known}), "
                             "and no configured deployment serves a model of that id")
    names = ", ".join(sorted(tiers)) or "none"
    nearby = [*tiers, *(d.model for d in config.all_deployments())]
    raise E.RoutingError(
        f"model {model!r} is not a tier (configured tiers: {names}), not 'auto', not 'provider:model-id', and no "
        f"configured deployment serves a model of that id{did_you_mean(model, nearby)}"
    )


def bare_candidates(config: Config, model: str, kind: str = "chat") -> List[Deployment]:
    """The configured deployments of `kind` tiers whose platform model id is `model`, one per id."""
    return [dep for dep in config.all_deployments() if dep.model == model
            and (dep.tier is None or config.tiers[dep.tier].kind == kind)]


def bare_deployment(config: Config, model: str) -> Deployment | None:
    """A model named by the platform's own id: the one configured deployment that serves it, or the
    default provider's (a `Client(base_url=...)`); None when neither; RoutingError when several
    providers serve it (the call must say which)."""
    found = bare_candidates(config, model)
    if len(found) == 1:
        return found[0]
    if len(found) > 1:
        ids = ", ".join(sorted(d.id for d in found))
        raise E.RoutingError(f"model {model!r} is served by several configured deployments ({ids}): name one as "
                             "'provider:model-id', or call a tier")
    if config.default_provider is not None and model:
        return config.deployment(f"{config.default_provider}:{model}")
    return None


def tier_target(config: Config, name: str, reason: str, call_pool: str, score: float | None = None,
                pool: str | None = None) -> Target:
    """A tier's deployments for the call's pool (a rule's pool wins over the call's)."""
    tier = config.tiers[name]
    effective = pool or call_pool
    fallback: List[Deployment] = []
    if tier.fallback_tier is not None:
        fallback = list(config.tiers[tier.fallback_tier].deployments_for(effective))
    return Target(list(tier.deployments_for(effective)), tier.name, reason, score=score, pool=pool,
                  fallback=fallback, fallback_tier=tier.fallback_tier)


def route_auto(config: Config, prepared: "PreparedCall") -> Target:
    """`model="auto"`: the routing rules, then the classifier, pick a tier (or a deployment)."""
    from llmroute.routing.rules import RouteQuery, decide  # imported on first "auto" call: the classifier is not light

    if not config.raw.routing and not {"small", "large"} <= set(config.tiers):
        raise E.RoutingError(
            "model 'auto' needs tiers to route between: add a [routing] section, or tiers named small and large"
        )
    params: Mapping[str, Any] = prepared.call.params
    response_format = params.get("response_format")
    query = RouteQuery(
        messages=prepared.messages,
        feature=prepared.feature,
        metadata=prepared.metadata,
        input_tokens=prepared.input_tokens,
        max_tokens=params.get("max_tokens") or params.get("max_completion_tokens"),
        has_tools=bool(params.get("tools") or params.get("functions")),
        has_json_schema=isinstance(response_format, dict) and response_format.get("type") == "json_schema",
    )
    decision = decide(config.sections.routing, query)
    if decision.tier in config.tiers:
        return tier_target(config, decision.tier, decision.reason, prepared.pool, decision.score, decision.pool)
    dep = config.deployment(decision.tier)  # a rule may name a "provider:model" deployment
    if dep is None:  # check_routing made this impossible at load
        raise E.RoutingError(f"routing chose {decision.tier!r}, which is not configured")
    return Target([dep], dep.tier, decision.reason, score=decision.score, pool=decision.pool)
