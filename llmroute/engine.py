"""The state a client keeps between calls, shared by `Client` and `AsyncClient`. Sans-I/O.

It holds what outlives one call: the breakers and retry budgets of every deployment, client-side
limits, the price book, the ledger sink, the budget counters and the telemetry hooks. For each
call it resolves `model=` to a target (routing rules and the classifier for `"auto"`), applies the
feature's guards and budgets, builds the failover plan, and takes every attempt's end: breaker
outcome, cost, one ledger record, a span. The clients own an `Engine` and a transport; nothing
here opens a socket (the ledger's own writer thread does the file writes, off the request path).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from . import errors as E
from .config import Config, Deployment
from .types import Attempt

if TYPE_CHECKING:
    from .call import AttemptContext, CallRun, PreparedCall, Target
    from .types import ChatCompletion

__all__ = ["Engine", "CallExtras"]


@dataclass
class CallExtras:
    """Per-call state the engine keeps on a `CallRun`: its telemetry trace and its attempts' costs."""

    trace: Any
    costs: List[Any]
    synced_plan_attempts: int = 0


class Engine:
    def __init__(self, config: Config, *, ledger: Any = None) -> None:
        from .accounting.budgets import BudgetBook
        from .accounting.ledger import JSONLSink, SQLiteSink, open_sink
        from .resilience.health import BreakerRegistry
        from .resilience.limits import DeploymentLimits
        from .resilience.retry import BudgetRegistry
        from .telemetry import Telemetry

        from .secrets import install_log_scrubbing

        install_log_scrubbing()  # httpx/httpcore/aiohttp/llmroute log records pass through secrets.scrub
        self.config = config
        sections = config.sections
        self.sections = sections
        self._base_policy = sections.resilience
        self.rng = random.Random()
        from .state import open_state

        self.fleet = open_state(getattr(sections, "state", None))  # None: state of this process only
        if self.fleet is not None:
            self.breakers = BreakerRegistry(self.policy, on_transition=self.fleet.breakers.publish,
                                            breaker_factory=self.fleet.breakers.factory, rng=self.rng)
        else:
            self.breakers = BreakerRegistry(self.policy, rng=self.rng)
        self.breakers.register(d.id for d in config.all_deployments())
        if self.fleet is not None:
            self.fleet.breakers.attach(self.breakers, (d.id for d in config.all_deployments()))
        self.retry_budgets = BudgetRegistry(self.policy)
        uses_limits = bool(sections.pools) or any(
            p.max_concurrency or p.rpm or p.tpm for p in [self._base_policy, *sections.policies.values()]
        )
        self.limits = DeploymentLimits(self._pool_policy) if uses_limits else None
        if self.limits is not None and self.fleet is not None:
            self.limits = self.fleet.shared_limits(self.limits)
        self.prices = sections.prices
        if ledger is None:
            self.ledger = open_sink(sections.ledger, base_dir=config.base_dir)
        elif hasattr(ledger, "write") and hasattr(ledger, "close"):
            self.ledger = ledger  # a sink object: SQLiteSink, JSONLSink, MemorySink or the user's own
        elif callable(ledger):
            from .accounting.ledger import CallableSink

            self.ledger = CallableSink(ledger)
        else:
            raise E.ConfigError(f"ledger must be a callable or a sink with write() and close(), not "
                                f"{type(ledger).__name__}", key="ledger")
        self.budget_book = None
        if sections.budgets:
            self.budget_book = BudgetBook(sections.budgets, rates=sections.pricing.rates(),
                                          shared=self.fleet.budgets if self.fleet is not None else None)
            if isinstance(self.ledger, (SQLiteSink, JSONLSink)) and self.ledger.path.exists():
                self.budget_book.seed_from_ledger(self.ledger.path, time.time())
            elif type(self.ledger).__name__ == "PostgresSink":
                self._seed_from_postgres()
        self.telemetry = Telemetry(sections.telemetry)
        self._deployments: Dict[str, Deployment] = {d.id: d for d in config.all_deployments()}

    def _seed_from_postgres(self) -> None:
        import logging

        try:
            self.budget_book.seed_from_ledger(self.ledger.url, time.time())
        except Exception as exc:  # noqa: BLE001 - an unreachable ledger must not stop the client
            logging.getLogger("llmroute.budgets").warning(
                "budgets: could not reload today's spend from the PostgreSQL ledger (%s); counting from zero",
                type(exc).__name__)

    def policy(self, deployment_id: str) -> Any:
        return self.sections.policies.get(deployment_id, self._base_policy)

    def _pool_policy(self, pool: str, deployment_id: str) -> Any:
        """A deployment's limits for one pool's traffic: `[pools.<pool>]` over the deployment's policy."""
        from .resilience.policy import merge

        return merge(self.policy(deployment_id), self.sections.pools.get(pool), key=f"pools.{pool}")

    # -- targets ---------------------------------------------------------------------------------
    def resolve_target(self, prepared: "PreparedCall") -> "Target":
        from .call import Target

        model = prepared.model
        tiers = self.config.tiers
        if model == "auto":
            return self.route_auto(prepared)
        tier = tiers.get(model)
        if tier is not None and tier.kind != "chat":
            raise E.RoutingError(f"tier {model!r} serves embeddings: call client.embeddings.create(model={model!r}, ...)")
        if tier is not None:
            return self._tier_target(tier.name, f"tier: {tier.name}", prepared.pool)
        if ":" in model:
            dep = self.config.deployment(model)
            if dep is not None:
                self._deployments.setdefault(dep.id, dep)
                return Target([dep], dep.tier, f"deployment: {dep.id}")
            provider = model.partition(":")[0]
            known = ", ".join(sorted(self.config.providers)) or "none"
            raise E.RoutingError(f"model {model!r}: unknown provider {provider!r} (configured providers: {known})")
        names = ", ".join(sorted(tiers)) or "none"
        raise E.RoutingError(
            f"model {model!r} is not a tier (configured tiers: {names}), not 'auto', and not 'provider:model-id'"
        )

    def _tier_target(self, name: str, reason: str, call_pool: str, score: Optional[float] = None,
                     pool: Optional[str] = None) -> "Target":
        """A tier's deployments for the call's pool (a rule's pool wins over the call's)."""
        from .call import Target

        tier = self.config.tiers[name]
        effective = pool or call_pool
        fallback = []
        if tier.fallback_tier is not None:
            fallback = list(self.config.tiers[tier.fallback_tier].deployments_for(effective))
        return Target(list(tier.deployments_for(effective)), tier.name, reason, score=score, pool=pool,
                      fallback=fallback, fallback_tier=tier.fallback_tier)

    def route_auto(self, prepared: "PreparedCall") -> "Target":
        from .call import Target
        from .routing.rules import RouteQuery, decide

        if not self.config.raw.routing and not {"small", "large"} <= set(self.config.tiers):
            raise E.RoutingError(
                "model 'auto' needs tiers to route between: add a [routing] section, or tiers named small and large"
            )
        params = prepared.call.params
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
        decision = decide(self.sections.routing, query)
        if decision.tier in self.config.tiers:
            return self._tier_target(decision.tier, decision.reason, prepared.pool, decision.score, decision.pool)
        dep = self.config.deployment(decision.tier)  # a rule may name a "provider:model" deployment
        if dep is None:  # check_routing made this impossible at load
            raise E.RoutingError(f"routing chose {decision.tier!r}, which is not configured")
        self._deployments.setdefault(dep.id, dep)
        return Target([dep], dep.tier, decision.reason, score=decision.score, pool=decision.pool)

    # -- before the first attempt ----------------------------------------------------------------
    def admit(self, run: "CallRun", now: float) -> None:
        """Guards and budgets, checked before anything is sent. May downgrade the target's tier."""
        prepared = run.prepared
        sections = self.sections
        params = prepared.call.params
        if sections.guards:
            from .accounting.budgets import check_guards

            requested = params.get("max_tokens") or params.get("max_completion_tokens")
            capped = check_guards(sections.guards, prepared.feature, input_tokens=run.input_tokens(),
                                  max_tokens=requested)
            if capped is not None and requested is None:
                params["max_tokens"] = capped
        if self.budget_book is None:
            return
        from .accounting.budgets import estimate_cost

        first = run.target.deployments[0] if run.target.deployments else None
        price = self._price(first) if first is not None else None
        max_tokens = params.get("max_tokens") or params.get("max_completion_tokens")
        if getattr(prepared, "operation", "chat") == "embeddings":
            max_tokens = 0  # an embedding has no output tokens to reserve budget for
        estimate = estimate_cost(price, prompt_tokens=run.input_tokens(), max_tokens=max_tokens)
        limits_request = self._first_limits_request(run, now) if self.budget_book.shared is not None else None
        verdict = self.budget_book.check(
            time.time(), feature=prepared.feature, metadata=prepared.metadata, tier=run.target.tier,
            estimated_cost=estimate.amount, currency=estimate.currency,
            estimated_tokens=estimate.input_tokens + estimate.output_tokens, reserve=True, admit=limits_request,
        )
        run.budget_reservation = verdict.reservation  # taken back in on_call_end
        if verdict.admitted is not None:
            from .state.admission import PreAdmitted

            run.pre_admitted = PreAdmitted(self.limits, limits_request,
                                           self.limits.admission(limits_request, verdict.admitted))
        if verdict.action == "downgrade" and verdict.tier:
            routed = run.target
            run.target = self._tier_target(verdict.tier, f"budget: {verdict.reason}", prepared.pool,
                                           score=routed.score, pool=routed.pool)

    def call_deadline_s(self, target: "Target") -> float:
        deps = target.deployments or target.fallback
        return self.policy(deps[0].id).deadline_s if deps else self._base_policy.deadline_s

    def _plan_inputs(self, run: "CallRun") -> Dict[str, Any]:
        """The failover plan's arguments that depend on the call and its target."""
        from .resilience.failover import Candidate

        target = run.target

        def candidates(deps: List[Deployment], tier: Optional[str]) -> List[Candidate]:
            return [Candidate(d.id, tier or d.tier or "", d.weight, d.context_window) for d in deps]

        tier = self.config.tiers.get(target.tier) if target.tier else None
        sticky_value = None
        if tier is not None and tier.sticky_key:
            sticky_value = run.prepared.metadata.get(tier.sticky_key)
        needs_context = any(d.context_window for d in [*target.deployments, *target.fallback])
        params = run.prepared.call.params
        max_tokens = params.get("max_tokens") or params.get("max_completion_tokens") or 0
        return dict(
            candidates=candidates(target.deployments, target.tier),
            sticky_value=sticky_value,
            required_context_tokens=run.input_tokens() + max_tokens if needs_context else None,
            fallback=candidates(target.fallback, target.fallback_tier),
            pool=run.prepared.pool if target.pool is None else target.pool,
            request_tokens=run.input_tokens() + max_tokens if self.limits is not None else 0,
        )

    def _first_limits_request(self, run: "CallRun", now: float) -> Any:
        """The shared limits' request for the deployment the call's plan will try first (None when
        limits are not shared or do not apply to it), so the budget reservation can carry it. The
        call gets a random generator of its own (`run.plan_rng`) for the plan, so the order predicted
        here is the plan's order."""
        from .resilience.failover import order_candidates
        from .state.limits import SharedLimits

        if not isinstance(self.limits, SharedLimits):
            return None
        inputs = self._plan_inputs(run)
        run.plan_rng = random.Random(self.rng.random())
        predict = random.Random()
        predict.setstate(run.plan_rng.getstate())
        required = inputs["required_context_tokens"]
        for candidates in (inputs["candidates"], inputs["fallback"]):
            for c in order_candidates(candidates, rng=predict, sticky_value=inputs["sticky_value"]):
                if (required is not None and c.context_window is not None and c.context_window < required
                        and self.policy(c.deployment_id).context_precheck):
                    continue
                if not self.breakers.breaker(c.deployment_id).peek(now):
                    continue
                return self.limits.request(c.deployment_id, pool=inputs["pool"], tokens=inputs["request_tokens"])
        return None

    def plan_for(self, run: "CallRun", now: float) -> Any:
        from .resilience.failover import FailoverPlan

        target = run.target
        for dep in [*target.deployments, *target.fallback]:
            self._deployments.setdefault(dep.id, dep)
        run.extras = CallExtras(trace=self._start_trace(run, now), costs=[])
        return FailoverPlan(
            breakers=self.breakers,
            budgets=self.retry_budgets,
            policies=self.policy,
            deadline_at=run.deadline,
            now=now,
            rng=getattr(run, "plan_rng", None) or self.rng,
            fallback_tier=target.fallback_tier,
            limits=getattr(run, "pre_admitted", None) or self.limits,
            can_continue=self.can_continue,
            **self._plan_inputs(run),
        )

    def continue_style(self, dep: Deployment) -> Optional[str]:
        """How `dep` continues a cut answer (providers/prefill.py), or None when it cannot."""
        from .providers.prefill import continue_style

        return continue_style(dep.provider.kind, dep.provider.protocol, self.policy(dep.id).continue_prefill)

    def can_continue(self, deployment_id: str) -> bool:
        dep = self._deployments.get(deployment_id)
        return dep is not None and self.continue_style(dep) is not None

    def deployment(self, deployment_id: str) -> Deployment:
        return self._deployments[deployment_id]

    # -- telemetry ---------------------------------------------------------------------------------
    def _start_trace(self, run: "CallRun", now: float) -> Any:
        target = run.target
        first = (target.deployments or target.fallback or [None])[0]
        return self.telemetry.start_call(
            request_model=first.model if first is not None else run.prepared.model,
            now=now,
            stream=run.prepared.stream,
            provider_name=first.provider.kind if first is not None else None,
            tier=target.tier,
            feature=run.prepared.feature,
            pool=run.route.pool,
            route_reason=target.reason,
            requested_model=run.prepared.model,
            request_params=run.prepared.call.params,
            messages=run.prepared.messages,
            operation=getattr(run.prepared, "operation", "chat"),
        )

    def on_plan_progress(self, run: "CallRun") -> None:
        """Copy breaker skips the plan made into the route (and the trace)."""
        extras: CallExtras = run.extras
        planned = run.plan.attempts
        for planned_attempt in planned[extras.synced_plan_attempts:]:
            if planned_attempt.status == "skipped":
                provider, _, model = planned_attempt.deployment.partition(":")
                run.route.attempts.append(Attempt(
                    deployment=planned_attempt.deployment, provider=provider, model=model,
                    tier=planned_attempt.tier, number=len(run.route.attempts) + 1, status="skipped",
                    note=planned_attempt.note, started_at=time.time(),
                ))
                extras.trace.skip(deployment=planned_attempt.deployment, reason=planned_attempt.note or "skipped",
                                  provider_name=self._kind_of(planned_attempt.deployment),
                                  breaker_state=self.breakers.breaker(planned_attempt.deployment).state)
        extras.synced_plan_attempts = len(planned)

    def _kind_of(self, deployment_id: str) -> Optional[str]:
        dep = self._deployments.get(deployment_id)
        return dep.provider.kind if dep is not None else None

    def on_attempt_start(self, run: "CallRun", ctx: "AttemptContext", now: float, kind: str) -> None:
        from urllib.parse import urlsplit

        url = urlsplit(ctx.request.url)
        ctx.trace = run.extras.trace.start_attempt(
            now=now, attempt_number=ctx.record.number, provider_name=ctx.deployment.provider.kind,
            deployment=ctx.deployment.id, request_model=ctx.deployment.model, server_address=url.hostname,
            server_port=url.port, breaker_state=self.breakers.breaker(ctx.deployment.id).state, kind=kind,
        )

    def on_first_chunk(self, ctx: "AttemptContext", now: float) -> None:
        if ctx.trace is not None:
            ctx.trace.first_chunk(now)

    # -- outcomes --------------------------------------------------------------------------------
    def _price(self, dep: Deployment) -> Any:
        p = dep.provider
        return self.prices.lookup(p.name, p.kind, p.region, dep.model)

    def on_attempt_end(self, run: "CallRun", ctx: "AttemptContext", error: Optional[BaseException], now: float) -> None:
        """Price the attempt, write its ledger record, close its span. Never raises for the ledger."""
        from .accounting.cost import compute_cost
        from .accounting.ledger import LedgerRecord

        rec = ctx.record
        usage = rec.usage if rec.billed else None
        cost = compute_cost(
            self._price(ctx.deployment),
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
            cached_tokens=usage.prompt_tokens_details.cached_tokens if usage else 0,
            reasoning_tokens=usage.completion_tokens_details.reasoning_tokens if usage else 0,
            estimated=rec.usage_estimated,
        )
        rec.cost = cost
        if rec.billed:
            run.extras.costs.append(cost)
        status = {"ok": "ok", "interrupted": "interrupted", "cancelled": "cancelled",
                  "abandoned": "abandoned"}.get(rec.status, "error")
        record = LedgerRecord.from_cost(
            cost,
            ts=time.time(),
            request_id=run.prepared.request_id,
            attempt=rec.number,
            feature=run.prepared.feature,
            metadata=dict(run.prepared.metadata),
            tier=rec.tier,
            pool=run.route.pool,
            provider=ctx.deployment.provider.name,
            provider_kind=ctx.deployment.provider.kind,
            deployment=ctx.deployment.id,
            model=ctx.deployment.model,
            status=status,
            error_type=type(error).__name__ if error is not None else None,
            ttft_ms=rec.ttft_s * 1000 if rec.ttft_s is not None else None,
            latency_ms=rec.duration_s * 1000,
            router_score=run.route.score,
            usage_estimated=rec.usage_estimated,
            cache=run.route.cache,
        )
        if self.ledger is not None:
            self.ledger.write(record)
        if self.budget_book is not None:
            self.budget_book.record_ledger(record)
        trace = getattr(ctx, "trace", None)
        if trace is not None:
            trace.end(now=now, response_model=ctx.deployment.model,
                      input_tokens=usage.prompt_tokens if usage else None,
                      output_tokens=usage.completion_tokens if usage else None, error=error,
                      cancelled=rec.status in ("cancelled", "abandoned"))

    def on_call_end(self, run: "CallRun", completion: Optional["ChatCompletion"], error: Optional[BaseException],
                    now: float) -> None:
        from .accounting.cost import sum_costs

        if getattr(run, "budget_reservation", None) is not None:
            self.budget_book.release(run.budget_reservation)
        if getattr(run, "pre_admitted", None) is not None:
            run.pre_admitted.discard()
        extras: CallExtras = run.extras
        total = sum_costs(extras.costs, rates=self.sections.pricing.rates()) if extras.costs else None
        if completion is not None:
            completion.cost = total
        usage = completion.usage if completion is not None else None
        extras.trace.end(
            now=now,
            response_model=run.route.model,
            input_tokens=usage.prompt_tokens if usage else None,
            output_tokens=usage.completion_tokens if usage else None,
            cache_read_input_tokens=usage.prompt_tokens_details.cached_tokens if usage else None,
            reasoning_output_tokens=usage.completion_tokens_details.reasoning_tokens if usage else None,
            cost=total.amount if total is not None else None,
            currency=total.currency if total is not None else None,
            cost_estimated=total.estimated if total is not None else None,
            error=error,
            finish_reasons=[c.finish_reason for c in completion.choices if c.finish_reason] if completion else None,
            response_id=completion.id if completion is not None else None,
            output_messages=[c.message for c in completion.choices] if completion is not None else None,
        )

    def health(self, now: float) -> Dict[str, Any]:
        """Every deployment's breaker (with shared state, the fleet's view, read now), plus `.ledger`
        (the sink's counts) and `.shared_state` (whether Redis answers; None when local)."""
        from .health import HealthReport

        if self.fleet is not None:
            self.fleet.breakers.sync_now()
        sink_health = getattr(self.ledger, "health", None)
        report = HealthReport(self.breakers.health(now), ledger=sink_health() if callable(sink_health) else None)
        report.shared_state = self.fleet.status() if self.fleet is not None else None
        return report

    def close(self) -> None:
        if self.ledger is not None:
            self.ledger.close()
        if self.fleet is not None:
            self.fleet.close()

