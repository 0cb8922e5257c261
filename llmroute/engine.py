"""The state a client keeps between calls, shared by `Client` and `AsyncClient`. Sans-I/O.

It resolves `model=` to a target, makes each call's attempt plan, and takes every attempt's end
(for breakers, the ledger, telemetry). The sync and async clients each own one `Engine` and a
transport; everything that is not moving bytes lives here or below.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, List, Optional

from . import errors as E
from .config import Config, Deployment

if TYPE_CHECKING:
    from .call import AttemptContext, CallRun, PreparedCall, Target
    from .types import ChatCompletion

__all__ = ["Engine", "PlanStep"]

DEFAULT_DEADLINE_S = 120.0


@dataclass(frozen=True)
class PlanStep:
    kind: str  # "send" | "wait" | "exhausted"
    deployment: Optional[Deployment] = None
    deployment_id: str = ""
    seconds: float = 0.0
    reason: str = ""
    is_fallback: bool = False


class FirstDeploymentPlan:
    """One attempt at the target's first deployment (what a call does before failover is configured)."""

    def __init__(self, deployments: List[Deployment]) -> None:
        self._deployments = deployments
        self._sent = False
        self.had_choice = False

    def next_step(self, now: float) -> PlanStep:
        if self._sent or not self._deployments:
            return PlanStep("exhausted", reason="the attempt failed" if self._sent else "no deployment")
        self._sent = True
        dep = self._deployments[0]
        return PlanStep("send", deployment=dep, deployment_id=dep.id)

    def record(self, deployment_id: str, now: float, error: Optional[BaseException], **_: Any) -> None:
        pass


class Engine:
    def __init__(self, config: Config) -> None:
        self.config = config

    # -- targets ---------------------------------------------------------------------------------
    def resolve_target(self, prepared: "PreparedCall") -> "Target":
        from .call import Target

        model = prepared.model
        tiers = self.config.tiers
        if model == "auto":
            return self.route_auto(prepared)
        tier = tiers.get(model)
        if tier is not None:
            return Target(list(tier.deployments), tier.name, f"tier: {tier.name}")
        if ":" in model:
            dep = self.config.deployment(model)
            if dep is not None:
                return Target([dep], dep.tier, f"deployment: {dep.id}")
            provider = model.partition(":")[0]
            known = ", ".join(sorted(self.config.providers)) or "none"
            raise E.RoutingError(f"model {model!r}: unknown provider {provider!r} (configured providers: {known})")
        names = ", ".join(sorted(tiers)) or "none"
        raise E.RoutingError(
            f"model {model!r} is not a tier (configured tiers: {names}), not 'auto', and not 'provider:model-id'"
        )

    def route_auto(self, prepared: "PreparedCall") -> "Target":
        raise E.RoutingError("model 'auto' needs a [routing] section and tiers to route between")

    def call_deadline_s(self, target: "Target") -> float:
        return DEFAULT_DEADLINE_S

    def plan_for(self, run: "CallRun", now: float) -> Any:
        return FirstDeploymentPlan(run.target.deployments)

    # -- outcomes --------------------------------------------------------------------------------
    def on_attempt_end(self, run: "CallRun", ctx: "AttemptContext", error: Optional[BaseException], now: float) -> None:
        pass

    def on_call_end(self, run: "CallRun", completion: Optional["ChatCompletion"], error: Optional[BaseException],
                    now: float) -> None:
        pass

    def close(self) -> None:
        pass
