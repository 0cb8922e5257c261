"""Shared state for many processes: `[state] backend = "redis"` (limits, budgets, breakers).

`open_state(config)` returns None for the default `backend = "local"` (each process keeps its own
state, as in one process) or a `Fleet` holding the Redis connection and the shared parts the engine
plugs in. Nothing here connects at import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict

from llmroute.state.backend import StateConfig

if TYPE_CHECKING:
    from llmroute.resilience.limits import DeploymentLimits
    from llmroute.state.shared_limits import SharedLimits

__all__ = ["StateConfig", "Fleet", "open_state"]


class Fleet:
    """This process's handle on the shared state: connection, shared budgets and breakers."""

    def __init__(self, config: StateConfig) -> None:
        from llmroute.state.breakers import SharedBreakers  # shared state only: loaded when [state] asks for it
        from llmroute.state.shared_budgets import SharedBudgetCounters  # shared state only: loaded when [state] asks for it
        from llmroute.state.redis_state import SharedState  # shared state only: loaded when [state] asks for it

        self.config = config
        self.state = SharedState(config)
        self.budgets = SharedBudgetCounters(self.state)
        self.breakers = SharedBreakers(self.state)
        self.limits: SharedLimits | None = None

    def shared_limits(self, local: DeploymentLimits) -> SharedLimits:
        from llmroute.state.shared_limits import SharedLimits  # shared state only: loaded when [state] asks for it

        self.limits = SharedLimits(self.state, local)
        return self.limits

    def status(self) -> Dict[str, Any]:
        out = self.state.status()
        out["breakers_adopted"] = self.breakers.adopted
        return out

    def close(self) -> None:
        self.breakers.close()
        self.budgets.close()
        if self.limits is not None:
            self.limits.close()
        self.state.close()


def open_state(config: StateConfig | None) -> Fleet | None:
    if config is None or config.backend == "local":
        return None
    return Fleet(config)
