"""A batch job's lifecycle over the job store, as generators the shells drive. No network I/O.

`create_job` checks the requests, resolves each one's deployment and stores the job. `advance`
does one pass over a job: ledger the results not yet ledgered, apply the failover policy to failed
requests, cut pending requests into platform files, then submit, poll (with backoff), cancel or
download each platform job. It yields `Req` (an HTTP request) and `OnlineCall` (run a request through
the normal client) and receives their answers; it returns a `JobView`. The clock is passed in.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Dict, Generator, List, Mapping, Sequence

from llmroute import errors as E
from llmroute.accounting.cost import Cost, compute_cost
from llmroute.types import ChatCompletion, Route
from llmroute.accounting.tokens import normalize_usage
from llmroute.batch.files import EMBEDDINGS, BatchRequest, endpoint_of, read_requests, split_parts
from llmroute.batch.platforms import BATCH_KINDS, LIMITS, TERMINAL_STATES, JobStatus, protocol_for
from llmroute.batch.pricing import batch_price
from llmroute.batch.results import completion_from_body, read_outcomes
from llmroute.batch.settings import FAILURE_POLICIES, BatchSettings
from llmroute.accounting.ledger import LedgerRecord, SQLiteSink
from llmroute.accounting.ledger_postgres import connect
from llmroute.accounting.tokens import count_message_tokens, count_text_tokens

if TYPE_CHECKING:
    from llmroute.batch.store import JobStore
    from llmroute.config import Config
    from llmroute._call.engine import Engine

__all__ = ["OnlineCall", "OnlineCalls", "LOCAL_PARALLEL", "JobView", "BatchResult", "BatchJobs", "LEDGER_ERROR_TYPE"]

LEDGER_ERROR_TYPE = "BatchRequestFailed"


@dataclass
class OnlineCall:
    """Run one request through the normal client (the `online` failover policy)."""

    kwargs: Dict[str, Any]


@dataclass
class OnlineCalls:
    """Run several requests through the normal client, at most `parallel` at once ([batch] mode local).
    The shell answers with one outcome per call, in order: the completion, or the `LLMRouteError`."""

    calls: List[Dict[str, Any]]
    parallel: int


# A local job's requests in flight at once when `[pools.batch] max_concurrency` does not say: the
# batch pool's own limits (rpm, tpm, max_concurrency) still gate each call on the online path.
LOCAL_PARALLEL = 4


@dataclass
class BatchResult:
    """One request's outcome: a `completion` (chat) or an `embedding` response, else an `error`."""

    custom_id: str
    completion: ChatCompletion | None = None
    error: Dict[str, Any] | None = None
    served_by: str | None = None  # "batch", "online" (the online failover) or "local" ([batch] mode local)
    embedding: Dict[str, Any] | None = None  # the embeddings response (data, usage), for embedding requests
    cost: Cost | None = None  # what the result cost; for chat it is also `completion.cost`

    @property
    def ok(self) -> bool:
        return self.completion is not None or self.embedding is not None


@dataclass
class JobView:
    """A job's progress: counts over its requests, its platform parts, elapsed time, what comes next."""

    id: str
    state: str  # running | done | cancelled
    model: str
    feature: str | None
    total: int
    done: int
    failed: int
    running: int
    elapsed_s: float
    parts: List[Dict[str, Any]] = field(default_factory=list)
    next_action_at: float | None = None  # wall-clock time of the next useful poll; None when finished
    events: List[Dict[str, Any]] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.state in ("done", "cancelled")

    def progress_line(self) -> str:
        estimates = [p["estimate"] for p in self.parts if p.get("estimate")]
        tail = f", platform: {'; '.join(estimates)}" if estimates else ""
        return (f"{self.id}: {self.state}, {self.done} done / {self.failed} failed / {self.total} total, "
                f"elapsed {self.elapsed_s:.0f}s{tail}")


Step = Generator[Any, Any, Any]


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:16]}"


class BatchJobs:
    """The job logic over one store, one config and one engine (prices, ledger, routing)."""

    def __init__(self, config: Config, engine: Engine, settings: BatchSettings, store: JobStore) -> None:
        self.config = config
        self.engine = engine
        self.settings = settings
        self.store = store

    # -- targets ---------------------------------------------------------------------------------
    def candidates(self, model: str, body: Mapping[str, Any] | None = None, feature: str | None = None,
                   metadata: Mapping[str, Any] = {}) -> List[Any]:
        """The batch-capable deployments for `model`, in failover order."""
        config = self.config
        if model == "auto":
            from llmroute.routing.rules import RouteQuery, decide  # loaded on first use: `import llmroute.batch` stays light

            body = body or {}
            rf = body.get("response_format")
            decision = decide(self.engine.sections.routing, RouteQuery(
                messages=body.get("messages", ()), feature=feature, metadata=metadata,
                max_tokens=body.get("max_tokens") or body.get("max_completion_tokens"),
                has_tools=bool(body.get("tools")),
                has_json_schema=isinstance(rf, dict) and rf.get("type") == "json_schema"))
            model = decision.tier
        tier = config.tiers.get(model)
        if tier is not None:
            deps = [d for d in [*tier.deployments_for("batch"), *tier.deployments]
                    if d.provider.kind in BATCH_KINDS or self.settings.mode != "platform"]
            seen: Dict[str, Any] = {}
            for d in deps:
                seen.setdefault(d.id, d)
            deps = list(seen.values())
            if not deps:
                raise E.RoutingError(f"tier {model!r} has no deployment on a platform with a batch API "
                                     f"({', '.join(sorted(BATCH_KINDS))}); set [batch] mode = \"auto\" (or "
                                     "\"local\") to run its requests through the online path")
            return deps
        if ":" in model:
            dep = config.deployment(model)
            if dep is None:
                raise E.RoutingError(f"model {model!r}: unknown provider {model.partition(':')[0]!r}")
            if not self.runs_local(dep):
                protocol_for(dep, accounts=self.settings.accounts)  # a kind without a batch API is a ConfigError now
            return [dep]
        raise E.RoutingError(f"model {model!r} is not a tier, not 'auto' and not 'provider:model-id'")

    def runs_local(self, dep: Any) -> bool:
        """Are this deployment's requests run through the online path (`[batch] mode`), not a batch API?"""
        mode = self.settings.mode
        return mode == "local" or (mode == "auto" and dep.provider.kind not in BATCH_KINDS)

    def deployment(self, deployment_id: str) -> Any:
        dep = self.config.deployment(deployment_id)
        if dep is None:
            raise E.ConfigError(f"deployment {deployment_id!r} of a stored batch job is no longer configured",
                                key="tiers")
        return dep

    # -- prices ----------------------------------------------------------------------------------
    def online_price(self, dep: Any) -> Any:
        p = dep.provider
        return self.engine.prices.lookup(p.name, p.kind, p.region, dep.model)

    def batch_price(self, dep: Any) -> Any:
        if self.runs_local(dep):  # run through the online path: billed (or costed) at the online price
            return self.online_price(dep)
        return batch_price(self.online_price(dep), kind=dep.provider.kind, model=dep.model,
                           provider_name=dep.provider.name, overrides=self.settings.price_factors)

    # -- creation --------------------------------------------------------------------------------
    def create_job(self, requests: Any, *, model: str, feature: str | None, metadata: Mapping[str, Any],
                   on_failure: str | None, completion_window: str | None, now: float) -> str:
        """Check everything, store the job; nothing is sent until `advance`."""
        on_failure = on_failure or self.settings.on_failure
        if on_failure not in FAILURE_POLICIES:
            raise E.InvalidRequestError(f"must be one of {', '.join(FAILURE_POLICIES)}, not {on_failure!r}",
                                        field="on_failure")
        if not isinstance(model, str) or not model:
            raise E.InvalidRequestError("a tier, 'auto' or 'provider:model-id' is required", field="model")
        if metadata and not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise E.InvalidRequestError("metadata must map str to str", field="metadata")
        window = completion_window or self.settings.completion_window
        checked: List[BatchRequest] = read_requests(requests)
        rows = []
        for r in checked:
            target = r.model or model
            deps = self.candidates(target, r.body, feature, metadata)
            if self.runs_local(deps[0]):
                if endpoint_of(r.body) == EMBEDDINGS:
                    raise E.InvalidRequestError("embedding requests run on a batch API only, not in [batch] mode "
                                                "local", field=f"requests[{r.custom_id!r}]")
                rows.append({"custom_id": r.custom_id, "model": target, "body": r.body, "deployment": deps[0].id})
                continue
            protocol_for(deps[0], accounts=self.settings.accounts)  # a missing Fireworks account: before storing
            limits = LIMITS[deps[0].provider.kind]
            endpoint = endpoint_of(r.body)
            if endpoint not in limits.endpoints:
                raise E.InvalidRequestError(
                    f"{deps[0].provider.kind}'s batch API does not take {endpoint} requests "
                    f"(it takes {', '.join(limits.endpoints)})", field=f"requests[{r.custom_id!r}]")
            if window not in limits.completion_windows and deps[0].provider.kind != "together":
                raise E.InvalidRequestError(
                    f"{window!r} is not a completion window {deps[0].provider.kind} accepts "
                    f"({limits.completion_windows[0]}..{limits.completion_windows[-1]})", field="completion_window")
            rows.append({"custom_id": r.custom_id, "model": target, "body": r.body, "deployment": deps[0].id})
        self.check_budget(rows, feature, metadata, model)
        job_id = _new_id("bj")
        self.store.create_job({"job_id": job_id, "model": model, "feature": feature, "metadata": dict(metadata),
                               "on_failure": on_failure, "max_resubmits": self.settings.max_resubmits,
                               "completion_window": window}, rows, now)
        return job_id

    def estimate_rows(self, rows: Sequence[Mapping[str, Any]]) -> Dict[str, Dict[str, Decimal]]:
        """Upper-bound cost of requests not yet sent ({"batch"|"online": {currency: amount}}): whole
        prompt at the input rate plus `max_tokens` (1024 when unset) at the output rate."""
        from llmroute.accounting.budgets import estimate_cost  # loaded on first use: `import llmroute.batch` stays light

        totals: Dict[str, Dict[str, Decimal]] = {"batch": {}, "online": {}}
        for r in rows:
            dep = self.deployment(r["deployment"])
            body = r["body"]
            if endpoint_of(body) == EMBEDDINGS:
                text = body["input"]
                prompt = sum(count_text_tokens(str(t)) for t in (text if isinstance(text, list) else [text]))
                cap = 0
            else:
                prompt = count_message_tokens(body.get("messages", []))
                cap = body.get("max_tokens") or body.get("max_completion_tokens")
            for name, price in (("batch", self.batch_price(dep)), ("online", self.online_price(dep))):
                cost = estimate_cost(price, prompt_tokens=prompt, max_tokens=cap)
                if cost.amount is not None and cost.currency is not None:  # a priced cost has both
                    totals[name][cost.currency] = totals[name].get(cost.currency, Decimal(0)) + cost.amount
        return totals

    def check_budget(self, rows: Sequence[Mapping[str, Any]], feature: str | None, metadata: Mapping[str, Any],
                     model: str) -> None:
        """Budgets apply at submission, on the job's estimated batch cost (one check per currency)."""
        book = self.engine.budget_book
        if book is None:
            return
        for currency, amount in self.estimate_rows(rows)["batch"].items():
            book.check(time.time(), feature=feature, metadata=metadata,
                       tier=model if model in self.config.tiers else None, estimated_cost=amount, currency=currency,
                       estimated_tokens=0)

    # -- one pass --------------------------------------------------------------------------------
    def advance(self, job_id: str, now: float) -> Step:
        job = self._job(job_id)
        if job["state"] in ("done", "cancelled"):
            return self.view(job_id, now)
        self.ledger_pending(job)
        if job["cancel_requested"]:
            yield from self._cancel(job, now)
        else:
            yield from self._apply_policy(job, now)
            yield from self._run_local(job, now)
            self._plan_parts(job, now)
        for part in self.store.parts(job_id):
            if part["done"]:
                continue
            yield from self._drive_part(job, part, now)
        self.ledger_pending(job)
        if not job["cancel_requested"]:
            yield from self._apply_policy(job, now)
        else:  # a cancelled job's failures stay failed: no failover
            for r in self.store.requests(job_id, state="failed"):
                self._dead(job, r, now, "job cancelled")
        self._settle(job, now)
        return self.view(job_id, now)

    def _job(self, job_id: str) -> Dict[str, Any]:
        job = self.store.job(job_id)
        if job is None:
            raise E.InvalidRequestError(f"no batch job {job_id!r} in {self.store.path}", field="job_id")
        return job

    def _plan_parts(self, job: Dict[str, Any], now: float) -> None:
        pending = self.store.requests(job["job_id"], state="pending")
        by_dep: Dict[tuple[str, str], List[Dict[str, Any]]] = {}
        for r in pending:  # one model and one endpoint per platform file
            by_dep.setdefault((r["deployment"], endpoint_of(r["body"])), []).append(r)
        for (dep_id, endpoint), reqs in by_dep.items():
            dep = self.deployment(dep_id)
            if self.runs_local(dep):
                continue  # `_run_local` sends these
            protocol = protocol_for(dep, accounts=self.settings.accounts, control_urls=self.settings.control_urls)
            extra = dep.extra_body if endpoint != EMBEDDINGS else {}
            lines = [(r["custom_id"], protocol.line(r["custom_id"], {**extra, **r["body"]}, dep.model, endpoint))
                     for r in reqs]
            for plan in split_parts(dep_id, lines, LIMITS[dep.provider.kind]):
                self.store.add_part(job["job_id"], _new_id("bp"), dep_id, plan.content, plan.custom_ids, now)

    def _protocol(self, part: Mapping[str, Any]) -> Any:
        dep = self.deployment(part["deployment"])
        return dep, protocol_for(dep, accounts=self.settings.accounts, control_urls=self.settings.control_urls)

    def _drive_part(self, job: Dict[str, Any], part: Dict[str, Any], now: float) -> Step:
        dep, protocol = self._protocol(part)
        part_id = part["part_id"]
        if part["next_poll_at"] > now:
            return
        try:
            if not part["platform_job_id"]:
                known = {"input_file_id": part["input_file_id"]}
                meta = {"llmroute_job": job["job_id"], "llmroute_part": part_id}
                first = self.store.requests(job["job_id"], part_id=part_id)[:1]
                endpoint = endpoint_of(first[0]["body"]) if first else "/v1/chat/completions"
                got = yield from protocol.submit(self.store.part_content(part_id), model=dep.model, part_id=part_id,
                                                 completion_window=job["completion_window"], metadata=meta,
                                                 known=known, endpoint=endpoint)
                status: JobStatus = got["status"]
                interval = self.settings.poll_interval_s
                self.store.update_part(part_id, input_file_id=got["input_file_id"],
                                       platform_job_id=got["platform_job_id"], state=status.state,
                                       status=status.to_dict(), submitted_at=now, updated_at=now,
                                       next_poll_at=now + interval, poll_interval_s=interval)
                self.store.event(job["job_id"], now, "submitted",
                                 f"{part_id} -> {dep.id} job {got['platform_job_id']} ({status.raw_state})")
                part.update(platform_job_id=got["platform_job_id"], status=status.to_dict())
            else:
                status = yield from protocol.poll(part["platform_job_id"])
                before = part.get("status") or {}
                changed = (before.get("state"), before.get("completed"), before.get("failed"), before.get("percent")) \
                    != (status.state, status.completed, status.failed, status.percent)
                interval = part["poll_interval_s"] or self.settings.poll_interval_s
                interval = self.settings.poll_interval_s if changed else min(
                    interval * self.settings.backoff, self.settings.max_poll_interval_s)
                self.store.update_part(part_id, state=status.state, status=status.to_dict(), updated_at=now,
                                       next_poll_at=now + interval, poll_interval_s=interval)
                if before.get("state") != status.state:
                    self.store.event(job["job_id"], now, "state", f"{part_id}: {status.raw_state} ({status.state})")
            if status.state in TERMINAL_STATES:
                yield from self._collect(job, part, dep, protocol, status, now)
        except E.ProviderError as error:
            yield from self._part_error(job, part, error, now)

    def _part_error(self, job: Dict[str, Any], part: Dict[str, Any], error: E.ProviderError, now: float) -> Step:
        part_id = part["part_id"]
        if error.retryable or isinstance(error, (E.APITimeoutError, E.APIConnectionError)):
            interval = min((part["poll_interval_s"] or self.settings.poll_interval_s) * self.settings.backoff,
                           self.settings.max_poll_interval_s)
            if error.retry_after:
                interval = max(interval, error.retry_after)
            self.store.update_part(part_id, next_poll_at=now + interval, poll_interval_s=interval, updated_at=now)
            self.store.event(job["job_id"], now, "retry", f"{part_id}: {type(error).__name__}: {error.message}"[:500])
            return
        # Refused for good (validation, auth, unknown model): every request of the part failed.
        failure = {"code": type(error).__name__, "message": str(error)[:500], "status": error.status}
        outcomes = {r["custom_id"]: {"error": failure} for r in self.store.requests(job["job_id"], part_id=part_id)
                    if r["state"] == "queued"}
        self.store.finish_part(part_id, job["job_id"], outcomes, now, {"state": "failed", "raw_state": "refused",
                                                                        "message": failure["message"]})
        self.store.event(job["job_id"], now, "refused", f"{part_id}: {failure['message']}"[:500])
        yield from ()

    def _collect(self, job: Dict[str, Any], part: Dict[str, Any], dep: Any, protocol: Any, status: JobStatus,
                 now: float) -> Step:
        """Download a finished platform job's files and store every line's outcome with the part."""
        output, errors = yield from protocol.download(status, part["platform_job_id"])
        lines = read_outcomes(output, errors)
        outcomes: Dict[str, Dict[str, Any]] = {}
        for r in self.store.requests(job["job_id"], part_id=part["part_id"]):
            if r["state"] != "queued":
                continue
            line = lines.get(r["custom_id"])
            if line is not None and line.body is not None:
                outcomes[r["custom_id"]] = {"result": {"body": line.body, "deployment": dep.id,
                                                       "platform_job_id": part["platform_job_id"]}}
            elif line is not None:
                outcomes[r["custom_id"]] = {"error": line.error}
            else:
                outcomes[r["custom_id"]] = {"error": {"code": f"job_{status.state}", "status": None,
                                                      "message": f"no result: the platform job ended {status.raw_state}"
                                                                 + (f" ({status.message})" if status.message else "")}}
        self.store.finish_part(part["part_id"], job["job_id"], outcomes, now, status.to_dict())
        ok = sum(1 for o in outcomes.values() if "result" in o)
        self.store.event(job["job_id"], now, "collected",
                         f"{part['part_id']}: {status.raw_state}, {ok} results, {len(outcomes) - ok} failed")

    # -- failover --------------------------------------------------------------------------------
    def _apply_policy(self, job: Dict[str, Any], now: float) -> Step:
        policy = job["on_failure"]
        for r in self.store.requests(job["job_id"], state="failed"):
            if not r["ledgered"]:
                continue  # ledger the failure first (ledger_pending), then decide
            cid = r["custom_id"]
            error = (r["error"] or {}).get("message", "")
            if policy == "resubmit" and r["attempts"] < job["max_resubmits"]:
                self.store.set_request(job["job_id"], cid, state="pending", part_id=None, attempts=r["attempts"] + 1)
                self.store.event(job["job_id"], now, "resubmit", f"{cid} -> {r['deployment']} ({error})"[:500])
            elif policy == "next_deployment":
                ids = [d.id for d in self.candidates(r["model"], r["body"], job["feature"], job["metadata"])]
                here = ids.index(r["deployment"]) if r["deployment"] in ids else -1
                if here + 1 < len(ids):
                    self.store.set_request(job["job_id"], cid, state="pending", part_id=None,
                                           deployment=ids[here + 1], attempts=r["attempts"] + 1)
                    self.store.event(job["job_id"], now, "next_deployment",
                                     f"{cid}: {r['deployment']} -> {ids[here + 1]} ({error})"[:500])
                else:
                    self._dead(job, r, now, "no next deployment with a batch API")
            elif policy == "online" and endpoint_of(r["body"]) == EMBEDDINGS:
                self._dead(job, r, now, "embedding requests are not run online by the batch failover")
            elif policy == "online":
                self.store.event(job["job_id"], now, "online", f"{cid}: run online ({error})"[:500])
                model = r["model"]
                kwargs = {**r["body"], "model": model, "feature": job["feature"], "pool": "batch",
                          "metadata": {**job["metadata"], "batch_job": job["job_id"], "batch_custom_id": cid}}
                try:
                    completion = yield OnlineCall(kwargs)
                except E.LLMRouteError as exc:
                    self.store.set_request(job["job_id"], cid, state="dead", attempts=r["attempts"] + 1,
                                           error={"code": type(exc).__name__, "message": str(exc)[:500],
                                                  "status": getattr(exc, "status", None)})
                    self.store.event(job["job_id"], now, "online_failed", f"{cid}: {exc}"[:500])
                    continue
                route = completion.route
                self.store.set_request(job["job_id"], cid, state="ok", served_by="online", attempts=r["attempts"] + 1,
                                       result={"body": completion.model_dump(),
                                               "deployment": route.deployment if route else None}, error=None)
            else:
                reason = "policy fail" if policy == "fail" else f"resubmitted {r['attempts']} times"
                self._dead(job, r, now, reason)

    def _run_local(self, job: Dict[str, Any], now: float) -> Step:
        """`[batch] mode = "local"` (or "auto" on a platform without a batch API): each pending request
        through the client's online path, to its tier with `pool = "batch"` (the tier's batch pool and
        `[pools.batch]` limits). The online call writes its own ledger row (its metadata names the job
        and the custom_id); the outcome is stored like a platform's, so results, resume and the failure
        policy are the same."""
        pending = [r for r in self.store.requests(job["job_id"], state="pending")
                   if self.runs_local(self.deployment(r["deployment"]))]
        parallel = int((self.config.sections.pools.get("batch") or {}).get("max_concurrency") or LOCAL_PARALLEL)
        for start in range(0, len(pending), parallel):
            group = pending[start:start + parallel]
            calls = [{**r["body"], "model": r["model"], "feature": job["feature"], "pool": "batch",
                      "metadata": {**job["metadata"], "batch_job": job["job_id"], "batch_custom_id": r["custom_id"]}}
                     for r in group]
            outcomes = yield OnlineCalls(calls, parallel)
            for r, outcome in zip(group, outcomes):
                self._store_local(job, r, outcome, now)

    def _store_local(self, job: Dict[str, Any], r: Mapping[str, Any], outcome: Any, now: float) -> None:
        cid = r["custom_id"]
        if isinstance(outcome, E.LLMRouteError):
            self.store.set_request(job["job_id"], cid, state="failed", ledgered=1,  # the call ledgered it
                                   error={"code": type(outcome).__name__, "message": str(outcome)[:500],
                                          "status": getattr(outcome, "status", None)})
            self.store.event(job["job_id"], now, "local_failed", f"{cid}: {outcome}"[:500])
            return
        route = outcome.route
        self.store.set_request(job["job_id"], cid, state="ok", served_by="local", ledgered=1,
                               result={"body": outcome.model_dump(),
                                       "deployment": route.deployment if route else r["deployment"]}, error=None)

    def _dead(self, job: Dict[str, Any], r: Mapping[str, Any], now: float, reason: str) -> None:
        self.store.set_request(job["job_id"], r["custom_id"], state="dead")
        self.store.event(job["job_id"], now, "failed", f"{r['custom_id']}: {reason}")

    def _cancel(self, job: Dict[str, Any], now: float) -> Step:
        for part in self.store.parts(job["job_id"]):
            if part["done"]:
                continue
            if not part["platform_job_id"]:
                outcomes = {r["custom_id"]: {"error": {"code": "cancelled", "message": "cancelled before submission",
                                                       "status": None}}
                            for r in self.store.requests(job["job_id"], part_id=part["part_id"])}
                self.store.finish_part(part["part_id"], job["job_id"], outcomes, now,
                                       {"state": "cancelled", "raw_state": "not submitted"})
                continue
            if part["cancel_sent"]:
                continue
            dep, protocol = self._protocol(part)
            try:
                status = yield from protocol.cancel(part["platform_job_id"])
            except E.ProviderError as error:
                self.store.event(job["job_id"], now, "cancel_error", f"{part['part_id']}: {error}"[:500])
                continue
            self.store.update_part(part["part_id"], state=status.state, status=status.to_dict(), updated_at=now,
                                   next_poll_at=now, cancel_sent=1)
            self.store.event(job["job_id"], now, "cancel", f"{part['part_id']}: {status.raw_state}")
        for r in self.store.requests(job["job_id"], state="pending"):
            self.store.set_request(job["job_id"], r["custom_id"], state="dead", ledgered=1,  # never sent
                                   error={"code": "cancelled", "message": "cancelled", "status": None})

    def _settle(self, job: Dict[str, Any], now: float) -> None:
        counts = self.store.counts(job["job_id"])
        open_ = counts.get("pending", 0) + counts.get("queued", 0) + counts.get("failed", 0)
        if open_:
            return
        if job["cancel_requested"]:
            self.store.set_job_state(job["job_id"], "cancelled", now)
        else:
            self.store.set_job_state(job["job_id"], "done", now)
        self.store.event(job["job_id"], now, "finished",
                         f"{counts.get('ok', 0)} ok, {counts.get('dead', 0)} failed")

    # -- ledger ----------------------------------------------------------------------------------
    def ledger_pending(self, job: Dict[str, Any]) -> None:
        """One ledger row per batch outcome, exactly once: rows already in an SQLite or PostgreSQL ledger are skipped."""
        rows = self.store.unledgered(job["job_id"])
        if not rows:
            return
        ledger = self.engine.ledger
        present = _ledgered_already(ledger, [self._request_id(job, r) for r in rows])
        for r in rows:
            key = self._request_id(job, r)
            if (key, r["attempts"] + 1) in present:
                continue
            record = self.ledger_record(job, r)
            if ledger is not None:
                ledger.write(record)
            if self.engine.budget_book is not None:  # budgets settle on the real batch cost
                self.engine.budget_book.record_ledger(record)
        if ledger is not None and hasattr(ledger, "flush"):
            ledger.flush()
        self.store.mark_ledgered(job["job_id"], [r["custom_id"] for r in rows])

    def _request_id(self, job: Mapping[str, Any], r: Mapping[str, Any]) -> str:
        return f"{job['job_id']}:{r['custom_id']}"

    def ledger_record(self, job: Mapping[str, Any], r: Mapping[str, Any]) -> Any:
        result = r["result"] or {}
        dep = self.deployment(result.get("deployment") or r["deployment"])
        usage = normalize_usage(result["body"].get("usage") or {}) if result.get("body") else None
        prompt, completion, cached, reasoning = (
            (usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens, usage.reasoning_tokens) if usage
            else (0, 0, 0, 0))
        cost = compute_cost(self.batch_price(dep), prompt_tokens=prompt, completion_tokens=completion,
                            cached_tokens=cached, reasoning_tokens=reasoning)
        online = compute_cost(self.online_price(dep), prompt_tokens=prompt, completion_tokens=completion,
                              cached_tokens=cached, reasoning_tokens=reasoning)
        metadata = {**job["metadata"], "batch_job": job["job_id"], "batch_custom_id": r["custom_id"]}
        if result.get("platform_job_id"):
            metadata["batch_platform_job"] = result["platform_job_id"]
        if online.amount is not None:
            metadata["online_cost"] = str(online.amount)
        ok = r["state"] == "ok"
        return LedgerRecord.from_cost(
            cost, ts=time.time(), request_id=self._request_id(job, r), attempt=r["attempts"] + 1,
            feature=job["feature"], metadata=metadata, tier=dep.tier or (r["model"] if r["model"] in self.config.tiers
                                                                        else None),
            pool="batch", provider=dep.provider.name, provider_kind=dep.provider.kind, deployment=dep.id,
            model=dep.model, status="ok" if ok else "error", error_type=None if ok else LEDGER_ERROR_TYPE,
        )

    # -- reading ---------------------------------------------------------------------------------
    def results(self, job_id: str) -> Dict[str, BatchResult]:
        job = self._job(job_id)
        out: Dict[str, BatchResult] = {}
        for r in self.store.requests(job_id):
            if r["state"] == "ok" and endpoint_of(r["body"]) == EMBEDDINGS:
                body = r["result"]["body"]
                u = normalize_usage(body.get("usage") or {})
                cost = compute_cost(self.batch_price(self.deployment(r["result"].get("deployment") or r["deployment"])),
                                    prompt_tokens=u.prompt_tokens, completion_tokens=0)
                out[r["custom_id"]] = BatchResult(r["custom_id"], None, None, r["served_by"], embedding=body, cost=cost)
            elif r["state"] == "ok":
                completion = self._completion(job, r)
                out[r["custom_id"]] = BatchResult(r["custom_id"], completion, None, r["served_by"],
                                                  cost=completion.cost)
            elif r["state"] == "dead":
                out[r["custom_id"]] = BatchResult(r["custom_id"], None, r["error"], None)
        return out

    def _completion(self, job: Mapping[str, Any], r: Mapping[str, Any]) -> ChatCompletion:
        result = r["result"]
        completion = completion_from_body(result["body"])
        dep = self.deployment(result.get("deployment") or r["deployment"])
        online = r["served_by"] in ("online", "local")  # run through the online path: its price
        price = self.online_price(dep) if online else self.batch_price(dep)
        u = completion.usage
        completion.cost = compute_cost(price, prompt_tokens=u.prompt_tokens, completion_tokens=u.completion_tokens,
                                       cached_tokens=u.cached_tokens, reasoning_tokens=u.reasoning_tokens)
        completion.route = Route(provider=dep.provider.name, deployment=dep.id, model=dep.model,
                                 tier=dep.tier or (r["model"] if r["model"] in self.config.tiers else None),
                                 reason=f"batch job {job['job_id']}" + (f" (run {r['served_by']})" if online else
                                                                       f", platform job {result.get('platform_job_id')}"),
                                 pool="batch", feature=job["feature"], request_id=f"{job['job_id']}:{r['custom_id']}")
        return completion

    def view(self, job_id: str, now: float) -> JobView:
        job = self._job(job_id)
        counts = self.store.counts(job_id)
        parts = []
        next_at: float | None = None
        sizes = self.store.part_sizes(job_id)
        for p in self.store.parts(job_id):
            status = p.get("status") or {}
            estimate = None
            if status.get("percent") is not None:
                estimate = f"{status['percent']:.0f}%"
            elif status.get("total"):
                estimate = f"{status.get('completed') or 0}/{status['total']}"
            if status.get("deadline"):
                estimate = f"{estimate or ''} deadline {status['deadline']}".strip()
            parts.append({"part_id": p["part_id"], "deployment": p["deployment"],
                          "platform_job_id": p["platform_job_id"], "state": p["state"],
                          "raw_state": status.get("raw_state"), "done": bool(p["done"]), "estimate": estimate,
                          "requests": sizes.get(p["part_id"], 0)})
            if not p["done"]:
                next_at = p["next_poll_at"] if next_at is None else min(next_at, p["next_poll_at"])
        if counts.get("pending") or counts.get("failed"):
            next_at = now
        finished = job["state"] in ("done", "cancelled")
        end = job["finished_at"] if finished and job["finished_at"] else now
        return JobView(
            id=job_id, state=job["state"], model=job["model"], feature=job["feature"],
            total=sum(counts.values()), done=counts.get("ok", 0), failed=counts.get("dead", 0),
            running=counts.get("queued", 0) + counts.get("pending", 0) + counts.get("failed", 0),
            elapsed_s=max(0.0, end - job["created_at"]), parts=parts,
            next_action_at=None if finished else (next_at if next_at is not None else now),
            events=self.store.events(job_id),
        )

    def estimate(self, job_id: str) -> Dict[str, Decimal]:
        """Batch cost of the job's requests so far, per currency (from stored results)."""
        totals: Dict[str, Decimal] = {}
        for result in self.results(job_id).values():
            cost = result.cost
            if cost is not None and cost.amount is not None and cost.currency is not None:
                totals[cost.currency] = totals.get(cost.currency, Decimal(0)) + cost.amount
        return totals


def _ledgered_already(ledger: Any, request_ids: Sequence[str]) -> set[tuple[str, int]]:
    """(request_id, attempt) pairs already in an SQLite or PostgreSQL ledger; empty for other sinks."""
    if type(ledger).__name__ == "PostgresSink":
        return _ledgered_in_postgres(ledger, request_ids)
    if not isinstance(ledger, SQLiteSink) or not ledger.path.exists():
        return set()
    import sqlite3

    ledger.flush()
    found: set[tuple[str, int]] = set()
    conn = sqlite3.connect(str(ledger.path), timeout=5.0)
    try:
        for i in range(0, len(request_ids), 500):
            chunk = list(request_ids[i:i + 500])
            q = f"SELECT request_id, attempt FROM ledger WHERE request_id IN ({','.join('?' * len(chunk))})"
            try:
                found.update(conn.execute(q, chunk).fetchall())
            except sqlite3.OperationalError:  # no ledger table yet
                return set()
    finally:
        conn.close()
    return found


def _ledgered_in_postgres(ledger: Any, request_ids: Sequence[str]) -> set[tuple[str, int]]:
    """(request_id, attempt) pairs already in a PostgresSink's table (its inserts are idempotent on
    the record id anyway; this keeps the budgets from counting a replayed row twice). Empty while
    PostgreSQL is unreachable: the rows then go to the spool and the table drops duplicates."""
    import psycopg

    ledger.flush()
    try:
        with connect(ledger.url, ledger.connect_timeout_s) as conn:
            rows = conn.execute(f"SELECT request_id, attempt FROM {ledger.table} WHERE request_id = ANY(%s)",
                                (list(request_ids),)).fetchall()
    except (psycopg.OperationalError, psycopg.errors.UndefinedTable):
        return set()
    return {(r, a) for r, a in rows}
