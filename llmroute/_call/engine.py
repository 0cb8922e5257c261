"""The services a client shares between its calls, for `Client` and `AsyncClient`. Sans-I/O.

An `Engine` holds what outlives one call: every deployment's breaker and retry budget, client-side
limits, the price book, the budget book, and the `CallRecorder` that writes the ledger and the
spans. A call (`call.CallRun`) asks it questions and keeps the answers: `admit` (guards and
budgets: an `Admission`), `plan_for` (the call's failover plan), `price` and `total_cost`, `settle`
(give back what `admit` reserved). The engine never changes a call's state. On the request path
nothing here opens a socket itself: the ledger's own writer thread does the ledger's writes, and
with `[state] backend = "redis"` the breakers, limits and budgets it holds share their state through
the Redis client they were given. Building an engine with budgets reloads today's spend from the
ledger (a file read, or one PostgreSQL query).
"""

from __future__ import annotations

import hashlib
import logging
import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Protocol, Tuple

from llmroute import errors as E
from llmroute.config import Config, Deployment
from llmroute.providers.prefill import continue_style
from llmroute.providers.server_identity import IDENTIFIABLE_KINDS, NAMED_SELF_HOSTED, model_family
from llmroute._call.recorder import CallRecorder
from llmroute._call.targets import Target, tier_target
from llmroute.types import Usage
from llmroute.accounting.tokens import cache_write_tokens, explicit_cache
from llmroute._runtime.secrets import install_log_scrubbing

if TYPE_CHECKING:
    from llmroute.accounting.budgets import BudgetBook
    from llmroute.accounting.cost import Cost
    from llmroute._call.prepared import PreparedCall
    from llmroute.resilience.failover import FailoverPlan
    from llmroute.state.shared_limits import LimitRequest, SharedLimits

__all__ = ["Engine", "Admission", "EngineClient"]


@dataclass
class Admission:
    """What `Engine.admit` decided for one call, before anything is sent."""

    target: Target  # the routed target, or the tier a budget downgraded it to
    max_tokens: int | None = None  # a guard's output cap, for a call that asked none
    reservation: Any = None  # the budget's reservation, given back by `Engine.settle`
    pre_admitted: Any = None  # limits admitted together with the reservation (shared state)
    plan_rng: random.Random | None = None  # the plan's own random order, predicted by `admit`
    order: Any = None  # (candidates, fallback, BalanceChoice, Target): the plan's order, drawn once by `admit`


def key_fingerprint(secret: Any) -> str | None:
    """A short hash of a provider's key (a `SecretStr`), to tell whether it changed; never the key."""
    return hashlib.sha256(secret.get().encode("utf-8")).hexdigest()[:16] if secret else None


class EngineClient(Protocol):
    """A `Client` or `AsyncClient` as the shells under it (embeddings, batch) see it: its config and its engine."""

    @property
    def config(self) -> Config: ...
    @property
    def _engine(self) -> Engine: ...


class Engine:
    def __init__(self, config: Config, *, ledger: Any = None) -> None:
        # Imported when a client is built, not at `import llmroute` (~60 ms of resilience, ledger,
        # budget, state and telemetry machinery a config-only or CLI import never uses).
        from llmroute.accounting.budgets import BudgetBook
        from llmroute.accounting.cost import compute_cost, sum_costs
        from llmroute.accounting.ledger import CallableSink, JSONLSink, SQLiteSink
        from llmroute.accounting.sinks import open_sink
        from llmroute.resilience.balance import LoadBalancer
        from llmroute.resilience.failover import Candidate, FailoverPlan, order_tier
        from llmroute.resilience.deployment_health import BreakerRegistry
        from llmroute.resilience.limits import DeploymentLimits
        from llmroute.resilience.retry import BudgetRegistry
        from llmroute.state import open_state
        from llmroute._runtime.telemetry import Telemetry

        install_log_scrubbing()  # httpx/httpcore/aiohttp/llmroute log records pass through secrets.scrub
        self.config = config
        self._candidate, self._failover_plan, self._order_tier = Candidate, FailoverPlan, order_tier  # every call
        self._compute_cost, self._sum_costs = compute_cost, sum_costs
        sections = config.sections
        self.sections = sections
        self._base_policy = sections.resilience
        self.rng = random.Random()
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
        # Every deployment's load estimate (in flight, service time, capacity, queue gauges): the
        # order of a tier with `balance = "load"`, and what `health()` shows.
        self.balancer = LoadBalancer()
        for tier in config.tiers.values():
            if tier.balance == "load":
                for deps in (tier.deployments, *tier.pools.values()):
                    self.balancer.set_prior({d.id: d.weight for d in deps})
                    for d in deps:
                        if self.policy(d.id).max_concurrency is not None:
                            self.balancer.known_capacity(d.id)  # a declared limit: no slow start
        self.gauges: Any = None  # the queue-gauge scraper the client starts (llmroute/_call/gauge_scraper.py)
        if self.fleet is not None:
            self.fleet.breakers.balancer = self.balancer  # shares in-flight counts in the breaker sync
        uses_limits = bool(sections.pools) or any(
            p.max_concurrency or p.rpm or p.tpm for p in [self._base_policy, *sections.policies.values()]
        )
        self.limits: DeploymentLimits | SharedLimits | None = DeploymentLimits(self._pool_policy) if uses_limits else None
        if self.limits is not None and self.fleet is not None:
            self.limits = self.fleet.shared_limits(self.limits)
        self.prices = sections.prices
        if ledger is None:
            ledger_sink = open_sink(sections.ledger, base_dir=config.base_dir)
        elif hasattr(ledger, "write") and hasattr(ledger, "close"):
            ledger_sink = ledger  # a sink object: SQLiteSink, JSONLSink, MemorySink or the user's own
        elif callable(ledger):
            ledger_sink = CallableSink(ledger)
        else:
            raise E.ConfigError(f"ledger must be a callable or a sink with write() and close(), not "
                                f"{type(ledger).__name__}", key="ledger")
        self.budget_book = None
        if sections.budgets:
            book = self.budget_book = BudgetBook(sections.budgets, rates=sections.pricing.rates(),
                                                 shared=self.fleet.budgets if self.fleet is not None else None)
            if isinstance(ledger_sink, (SQLiteSink, JSONLSink)) and ledger_sink.path.exists():
                book.seed_from_ledger(ledger_sink.path, time.time())
            elif type(ledger_sink).__name__ == "PostgresSink":
                self._seed_from_postgres(book, ledger_sink)
        self.recorder = CallRecorder(ledger=ledger_sink, budget_book=self.budget_book,
                                     telemetry=Telemetry(sections.telemetry), breakers=self.breakers)
        balancer = self.balancer
        self.recorder.telemetry.load_source = lambda: balancer.snapshot(time.monotonic())  # OTel load gauges
        self._deployments: Dict[str, Deployment] = {d.id: d for d in config.all_deployments()}
        self._fingerprints: Dict[str, Tuple[Any, str | None]] = {}  # deployment -> (its key object, fingerprint)
        self._candidate_of: Dict[str, Tuple[Deployment, str, Any]] = {}  # deployment -> (it, tier, its Candidate)
        self.identities: Any = None  # the client's server_probe.ServerIdentities (I/O in its own thread)
        self._identify_asked: set[str] = set()  # deployments already handed to `identities`

    @property
    def ledger(self) -> Any:
        """The ledger sink (the recorder writes to it)."""
        return self.recorder.ledger

    @property
    def telemetry(self) -> Any:
        """The telemetry hooks (the recorder opens the spans)."""
        return self.recorder.telemetry

    def _seed_from_postgres(self, book: BudgetBook, sink: Any) -> None:
        try:
            book.seed_from_ledger(sink.url, time.time())
        except Exception as exc:  # noqa: BLE001 - an unreachable ledger must not stop the client
            logging.getLogger("llmroute.budgets").warning(
                "budgets: could not reload today's spend from the PostgreSQL ledger (%s); counting from zero",
                type(exc).__name__)

    def policy(self, deployment_id: str) -> Any:
        return self.sections.policies.get(deployment_id, self._base_policy)

    def _pool_policy(self, pool: str, deployment_id: str) -> Any:
        """A deployment's limits for one pool's traffic: `[pools.<pool>]` over the deployment's policy."""
        from llmroute.resilience.policy import merge  # the resilience package loads with the first client

        return merge(self.policy(deployment_id), self.sections.pools.get(pool), key=f"pools.{pool}")

    # -- before the first attempt ----------------------------------------------------------------
    def admit(self, prepared: "PreparedCall", target: Target, input_tokens: Callable[[], int], now: float,
              wall_now: float) -> Admission:
        """Guards and budgets, checked before anything is sent: may refuse (raises), cap the output
        (`Admission.max_tokens`) or downgrade the tier (`Admission.target`). Changes nothing itself."""
        sections = self.sections
        params = prepared.call.params
        admission = Admission(target=target)
        requested = params.get("max_tokens") or params.get("max_completion_tokens")
        if sections.guards:
            from llmroute.accounting.budgets import check_guards  # imported when guards are configured

            capped = check_guards(sections.guards, prepared.feature, input_tokens=input_tokens(),
                                  max_tokens=requested)
            if capped is not None and requested is None:
                admission.max_tokens = requested = capped
        if self.budget_book is None:
            return admission
        from llmroute.accounting.budgets import estimate_cost  # imported when budgets are configured

        first = target.deployments[0] if target.deployments else None
        price = self._price(first) if first is not None else None
        max_tokens = 0 if prepared.operation == "embeddings" else requested  # no output
        estimate = estimate_cost(price, prompt_tokens=input_tokens(), max_tokens=max_tokens)
        limits_request = None
        if self.budget_book.shared is not None:
            admission.plan_rng = random.Random(self.rng.random())
            limits_request = self._first_limits_request(prepared, target, input_tokens, admission, now)
        verdict = self.budget_book.check(
            wall_now, feature=prepared.feature, metadata=prepared.metadata, tier=target.tier,
            estimated_cost=estimate.amount, currency=estimate.currency,
            estimated_tokens=estimate.input_tokens + estimate.output_tokens, reserve=True, admit=limits_request,
        )
        admission.reservation = verdict.reservation  # given back by `settle` when the call ends
        if verdict.admitted is not None:
            from llmroute.state.admission import PreAdmitted  # shared state only
            from llmroute.state.shared_limits import SharedLimits  # shared state only

            limits = self.limits
            # the shared limits were asked (limits_request) only when they are SharedLimits
            assert isinstance(limits, SharedLimits) and limits_request is not None
            admission.pre_admitted = PreAdmitted(limits, limits_request, limits.admission(limits_request, verdict.admitted))
        if verdict.action == "downgrade" and verdict.tier:
            admission.target = tier_target(self.config, verdict.tier, f"budget: {verdict.reason}", prepared.pool,
                                           score=target.score, pool=target.pool)
        return admission

    def settle(self, admission: Admission) -> None:
        """The call ended: give back its budget reservation and the limits admitted with it."""
        if admission.reservation is not None and self.budget_book is not None:  # only a budget book reserves
            self.budget_book.release(admission.reservation)
        if admission.pre_admitted is not None:
            admission.pre_admitted.discard()

    def call_deadline_s(self, target: Target) -> float:
        deps = target.deployments or target.fallback
        deadline_s: float = self.policy(deps[0].id).deadline_s if deps else self._base_policy.deadline_s
        return deadline_s

    def _plan_inputs(self, prepared: "PreparedCall", target: Target, input_tokens: Callable[[], int]) -> Dict[str, Any]:
        """The failover plan's arguments that depend on the call and its target."""
        tier = self.config.tiers.get(target.tier) if target.tier else None
        sticky_value = None
        if tier is not None and tier.sticky_key:
            sticky_value = prepared.metadata.get(tier.sticky_key)
        primary = self._candidates(target.deployments, target.tier)
        fallback = self._candidates(target.fallback, target.fallback_tier) if target.fallback else []
        needs_context = any(c.context_window for c in primary) or any(c.context_window for c in fallback)
        params = prepared.call.params
        max_tokens = params.get("max_tokens") or params.get("max_completion_tokens") or 0
        return dict(
            candidates=primary,
            sticky_value=sticky_value,
            required_context_tokens=input_tokens() + max_tokens if needs_context else None,
            fallback=fallback,
            pool=prepared.pool if target.pool is None else target.pool,
            request_tokens=input_tokens() + max_tokens if self.limits is not None else 0,
        )

    def _candidates(self, deps: List[Deployment], tier: str | None) -> List[Any]:
        """The plan's candidates for `deps` in `tier`: a `failover.Candidate` (immutable) made once per
        deployment and tier, not per call (made again if the call's deployment object is another one)."""
        out = []
        known = self._candidate_of
        for d in deps:
            name = tier or d.tier or ""
            hit = known.get(d.id)
            if hit is None or hit[0] is not d or hit[1] != name:
                hit = known[d.id] = (d, name, self._candidate(d.id, name, d.weight, d.context_window,
                                                              d.provider.name, d.model))
            out.append(hit[2])
        return out

    def _ordered(self, prepared: "PreparedCall", target: Target, inputs: Dict[str, Any], rng: random.Random,
                 now: float) -> Any:
        """The plan's order: (candidates, fallback, BalanceChoice or None), by each tier's `balance`."""
        tiers = self.config.tiers
        modes = [tiers[t].balance if t in tiers else "weighted" for t in (target.tier, target.fallback_tier)]
        sticky = inputs["sticky_value"]
        primary, choice = self._order_tier(inputs["candidates"], mode=modes[0], rng=rng, now=now,
                                           sticky_value=sticky, balancer=self.balancer)
        fallback: List[Any] = []
        if inputs["fallback"]:
            fallback, _ = self._order_tier(inputs["fallback"], mode=modes[1], rng=rng, now=now, sticky_value=sticky,
                                           balancer=self.balancer)
        return primary, fallback, choice

    def _first_limits_request(self, prepared: "PreparedCall", target: Target, input_tokens: Callable[[], int],
                              admission: Admission, now: float) -> LimitRequest | None:
        """The shared limits' request for the deployment the call's plan will try first (None when
        limits are not shared or do not apply to it), so the budget reservation can carry it. The
        plan's order is drawn here once (`Admission.order`) and the plan takes it as it is, so the
        deployment predicted is the plan's first unless a breaker changes in between."""
        from llmroute.state.shared_limits import SharedLimits  # shared state only

        if not isinstance(self.limits, SharedLimits):
            return None
        inputs = self._plan_inputs(prepared, target, input_tokens)
        admission.order = (*self._ordered(prepared, target, inputs, admission.plan_rng or self.rng, now), target)
        required = inputs["required_context_tokens"]
        for candidates in admission.order[:2]:
            for c in candidates:
                if (required is not None and c.context_window is not None and c.context_window < required
                        and self.policy(c.deployment_id).context_precheck):
                    continue
                if not self.breakers.breaker(c.deployment_id).peek(now):
                    continue
                return self.limits.request(c.deployment_id, pool=inputs["pool"], tokens=inputs["request_tokens"])
        return None

    def _key_fingerprint(self, dep: Deployment) -> str | None:
        """`key_fingerprint` of `dep`'s key, hashed again only when the key object is another one (a
        `SecretStr` never changes its value): a SHA-256 per deployment per call saved."""
        key = dep.provider.api_key
        known = self._fingerprints.get(dep.id)
        if known is None or known[0] is not key:
            known = self._fingerprints[dep.id] = (key, key_fingerprint(key))
        return known[1]

    def plan_for(self, prepared: "PreparedCall", target: Target, admission: Admission,
                 input_tokens: Callable[[], int], deadline: float, now: float, *,
                 wall: Callable[[], float] | None = None) -> "FailoverPlan":
        """The failover plan of one call to `target` (the call owns it from here); `wall` stamps the
        route's lines the plan writes (`plan.attempts`)."""
        deps = [*target.deployments, *target.fallback] if target.fallback else target.deployments
        for dep in deps:
            self._deployments.setdefault(dep.id, dep)
            # A deployment disabled by a 401 comes back when its key is no longer the one refused.
            self.breakers.breaker(dep.id).note_key(self._key_fingerprint(dep), now)
        self.identify(deps)
        inputs = self._plan_inputs(prepared, target, input_tokens)
        rng = admission.plan_rng or self.rng
        order = admission.order
        if order is None or order[3] is not target:  # none drawn, or drawn for a tier a budget moved from
            order = self._ordered(prepared, target, inputs, rng, now)
        inputs["candidates"], inputs["fallback"] = order[0], order[1]
        plan: "FailoverPlan" = self._failover_plan(
            breakers=self.breakers,
            budgets=self.retry_budgets,
            policies=_policies_for(self.policy, prepared.max_retries),
            deadline_at=deadline,
            now=now,
            rng=admission.plan_rng or self.rng,
            fallback_tier=target.fallback_tier,
            limits=admission.pre_admitted or self.limits,
            can_continue=self.can_continue,
            can_replay=self.same_family,
            balancer=self.balancer,
            ordered=True,
            choice=order[2],
            queue_when_full=target.tier in self.config.tiers and self.config.tiers[target.tier].balance == "load",
            wall=wall,
            **inputs,
        )
        return plan

    def continue_style(self, dep: Deployment) -> str | None:
        """How `dep` continues a cut answer (providers/prefill.py), or None when it cannot. An explicit
        `continue_prefill` wins; else what its server turned out to be (`identify`), when it was
        identified; else its kind's documented default."""
        policy = self.policy(dep.id)
        if self.identities is not None and self._identifiable(dep):
            identity = self.identities.known(dep.provider.name)
            if identity is not None and identity.server is not None:
                style: str | None = identity.style
                return style
        return continue_style(dep.provider.kind, dep.provider.protocol, policy.continue_prefill)

    def identify(self, deployments: List[Deployment]) -> None:
        """Queue the servers of these deployments for identification (the client's background
        `server_probe.ServerIdentities`; nothing when the client gave none). Returns at once."""
        if self.identities is None:
            return
        new = [d for d in deployments if d.id not in self._identify_asked]
        if not new:
            return  # every call after the first to a tier: one set lookup per deployment
        self._identify_asked.update(d.id for d in new)
        wanted = {d.provider.name: d.provider for d in new if self._identifiable(d)}
        if wanted:
            self.identities.want(wanted.values())

    def _identifiable(self, dep: Deployment) -> bool:
        """Is `dep`'s server asked what it is? Not when `continue_prefill` is set (it wins) or
        `identify_server = false`; `openai-compatible` by default, the named self-hosted kinds with
        `identify_server = true`."""
        policy = self.policy(dep.id)
        if policy.continue_prefill is not None or policy.identify_server is False:
            return False
        kind = dep.provider.kind
        return kind in IDENTIFIABLE_KINDS or (policy.identify_server is True and kind in NAMED_SELF_HOSTED)

    def identifying(self, deployment_ids: List[str]) -> List[str]:
        """The providers of these deployments whose identification is under way (a stale answer is
        asked again first)."""
        if self.identities is None:
            return []
        names = {d.provider.name for d in (self._deployments.get(i) for i in deployment_ids) if d is not None}
        self.identities.refresh(names)  # an old answer is asked again now, so the cut decides on a fresh one
        return [n for n in names if self.identities.pending([n])]

    def same_family(self, deployment_id: str, other_id: str) -> bool:
        """Do two deployments serve the same model family (`server_identity.model_family`)?"""
        a, b = self._deployments.get(deployment_id), self._deployments.get(other_id)
        return a is not None and b is not None and model_family(a.model) == model_family(b.model)

    def can_continue(self, deployment_id: str) -> bool:
        dep = self._deployments.get(deployment_id)
        return dep is not None and self.continue_style(dep) is not None

    def deployment(self, deployment_id: str) -> Deployment:
        return self._deployments[deployment_id]

    def provider_kind(self, deployment_id: str) -> str | None:
        dep = self._deployments.get(deployment_id)
        return dep.provider.kind if dep is not None else None

    # -- prices ----------------------------------------------------------------------------------
    def _price(self, dep: Deployment) -> Any:
        p = dep.provider
        return self.prices.lookup(p.name, p.kind, p.region, dep.model)

    def price(self, dep: Deployment, usage: Usage | None, *, estimated: bool, thinking: bool = False) -> "Cost":
        """What `usage` on `dep` costs (no usage: nothing was billed, a zero cost). Reported reasoning
        tokens bill the output at the thinking rate; `thinking=True` does so without them (the call
        decides: a thinking request whose usage cannot tell, docs/pricing.md)."""
        if usage is None:
            return self._compute_cost(self._price(dep), prompt_tokens=0, completion_tokens=0, estimated=estimated)
        details = usage.prompt_tokens_details
        extras = details.__pydantic_extra__  # a context cache's fields, when the platform reported them
        return self._compute_cost(
            self._price(dep),
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            cached_tokens=details.cached_tokens,
            reasoning_tokens=usage.completion_tokens_details.reasoning_tokens,
            estimated=estimated,
            cache_write_tokens=cache_write_tokens(usage) if extras else 0,
            explicit_cache=explicit_cache(usage) if extras else False,
            thinking=thinking,
        )

    def total_cost(self, costs: List["Cost"]) -> "Cost" | None:
        """A call's cost: the sum of its billed attempts' (None when none was billed)."""
        if len(costs) == 1:
            return costs[0]  # what `sum_costs` gives for one, without reading the exchange rates
        return self._sum_costs(costs, rates=self.sections.pricing.rates()) if costs else None

    def health(self, now: float) -> Dict[str, Any]:
        """Every deployment's breaker (with shared state, the fleet's view, read now), plus `.ledger`
        (the sink's counts) and `.shared_state` (whether Redis answers; None when local)."""
        from llmroute.resilience.deployment_health import HealthReport  # the resilience package loads with the first client

        if self.fleet is not None:
            self.fleet.breakers.sync_now()
        sink_health = getattr(self.ledger, "health", None)
        from dataclasses import replace

        loads = self.balancer.snapshot(now)
        snapshots = {dep: replace(snap, load=loads.get(dep)) for dep, snap in self.breakers.health(now).items()}
        report = HealthReport(snapshots, ledger=sink_health() if callable(sink_health) else None)
        report.shared_state = self.fleet.status() if self.fleet is not None else None
        return report

    def close(self) -> None:
        if self.identities is not None:
            self.identities.close()
        if self.gauges is not None:
            self.gauges.close()
        if self.ledger is not None:
            self.ledger.close()
        if self.fleet is not None:
            self.fleet.close()


def _policies_for(policy: Callable[[str], Any], max_retries: int | None) -> Callable[[str], Any]:
    """The policies of one call: the config's, or with the client's `max_retries` (openai-python's
    option, `with_options`) when it set one."""
    if max_retries is None:
        return policy
    copies: Dict[str, Any] = {}

    def policies(deployment_id: str) -> Any:
        found = copies.get(deployment_id)
        if found is None:
            base = policy(deployment_id)
            found = copies[deployment_id] = base.model_copy(update={
                "max_retries": max_retries, "max_retries_with_backup": min(base.max_retries_with_backup, max_retries)})
        return found

    return policies
