"""Per-call cost of the resilience core: one FailoverPlan driven to success, and a failover path.

Prints a table and writes benchmarks/out/resilience_overhead.json. No I/O besides that file; the
"calls" are recorded outcomes, so this measures only the planner, breaker, budget and limits work.
"""

from __future__ import annotations

import json
import pathlib
import random
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from llmroute import errors as E  # noqa: E402
from llmroute.resilience import (  # noqa: E402
    BreakerRegistry,
    BudgetRegistry,
    Candidate,
    DeploymentLimits,
    FailoverPlan,
    ResiliencePolicy,
    Send,
    Wait,
)

TIER = [Candidate("a:m", "large", 90), Candidate("b:m", "large", 10), Candidate("c:m", "large")]


def build(policy: ResiliencePolicy, with_limits: bool):
    breakers = BreakerRegistry(policy)
    budgets = BudgetRegistry(breakers.policy)
    limits = DeploymentLimits(lambda pool, dep: policy) if with_limits else None
    return breakers, budgets, limits


def one_call(state, now: float, rng: random.Random, fail_first: bool) -> None:
    breakers, budgets, limits = state
    plan = FailoverPlan(TIER, breakers=breakers, budgets=budgets, policies=breakers.policy, deadline_at=now + 120,
                        now=now, rng=rng, limits=limits, request_tokens=500, sticky_value=None)
    failed = False
    while True:
        step = plan.next_step(now)
        if isinstance(step, Wait):
            now += step.seconds
            continue
        if not isinstance(step, Send):
            return
        error = None
        if fail_first and not failed:
            error = E.ServerError("boom", deployment=step.deployment_id, status=500, retryable=False)
            failed = True
        plan.record(step.deployment_id, now + 0.001, error, ttft_s=0.2, latency_s=1.0)


def measure(name: str, policy: ResiliencePolicy, *, with_limits: bool, fail_first: bool, n: int = 20000) -> dict:
    best = float("inf")
    for _ in range(5):
        state = build(policy, with_limits)
        rng = random.Random(1)
        t0 = time.perf_counter()
        for i in range(n):
            one_call(state, i * 0.01, rng, fail_first)
        best = min(best, (time.perf_counter() - t0) / n)
    return {"case": name, "us_per_call": round(best * 1e6, 2), "calls": n}


def main() -> None:
    quiet = ResiliencePolicy(min_calls=10**6, consecutive_failures=10**6)
    limited = quiet.model_copy(update={"max_concurrency": 100, "rpm": 10**9, "tpm": 10**12})
    rows = [
        measure("success on first choice, no limits", quiet, with_limits=False, fail_first=False),
        measure("success on first choice, bulkhead + rpm + tpm", limited, with_limits=True, fail_first=False),
        measure("one non-retryable failure, then failover", quiet, with_limits=False, fail_first=True),
    ]
    print(f"{'case':50} {'us/call':>8}")
    for r in rows:
        print(f"{r['case']:50} {r['us_per_call']:8.2f}")
    out = pathlib.Path(__file__).with_name("out") / "resilience_overhead.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"python": sys.version.split()[0], "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
