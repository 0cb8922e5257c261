"""Where a call may go: `model=` resolved to a tier's deployments, one deployment, or the router's
choice for "auto". Plain functions over the config; no state, no I/O."""

from __future__ import annotations

from typing import Any, List, Mapping, Optional

from llmroute import errors as E
from llmroute.config import Config, Deployment

from llmroute._call.prepared import PreparedCall, Target

__all__ = ["Target", "resolve_target", "tier_target", "route_auto"]


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
    if ":" in model:
        dep = config.deployment(model)
        if dep is not None:
            return Target([dep], dep.tier, f"deployment: {dep.id}")
        provider = model.partition(":")[0]
        known = ", ".join(sorted(config.providers)) or "none"
        raise E.RoutingError(f"model {model!r}: unknown provider {provider!r} (configured providers: {known})")
    names = ", ".join(sorted(tiers)) or "none"
    raise E.RoutingError(
        f"model {model!r} is not a tier (configured tiers: {names}), not 'auto', and not 'provider:model-id'"
    )


def tier_target(config: Config, name: str, reason: str, call_pool: str, score: Optional[float] = None,
                pool: Optional[str] = None) -> Target:
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
