"""The failover planner, driven the way the client's shells drive it, with a fake clock."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections import Counter

import pytest

from llmroute import errors as E
from llmroute.resilience import (
    BreakerRegistry,
    BudgetRegistry,
    Candidate,
    DeploymentLimits,
    Done,
    Exhausted,
    FailoverPlan,
    ResiliencePolicy,
    Send,
    Wait,
    order_candidates,
)
from llmroute.resilience.failover import sticky_point

from .helpers import auth_error, bad_request, context_error, rate_limited, server_error

A, B, C = "a:m", "b:m", "c:m"
TIER = [Candidate(A, "large", 90), Candidate(B, "large", 10), Candidate(C, "large")]


class World:
    """Breakers, budgets and limits shared by every call, as a client holds them."""

    def __init__(self, **policy_kw):
        self.policy = ResiliencePolicy(**policy_kw)
        self.breakers = BreakerRegistry(self.policy)
        self.budgets = BudgetRegistry(self.breakers.policy)
        self.limits = DeploymentLimits(lambda pool, dep: self.policy)
        self.now = 0.0

    def plan(self, candidates=TIER, seed=0, **kw):
        kw.setdefault("deadline_at", self.now + self.policy.deadline_s)
        return FailoverPlan(
            candidates,
            breakers=self.breakers,
            budgets=self.budgets,
            policies=self.breakers.policy,
            now=self.now,
            rng=random.Random(seed),
            limits=self.limits,
            **kw,
        )

    def drive(self, plan, script, *, call_s=1.0, max_steps=50):
        """Run `plan`; `script[dep]` lists each attempt's error there (None = success; default success)."""
        steps = []
        for _ in range(max_steps):
            step = plan.next_step(self.now)
            steps.append(step)
            if isinstance(step, Wait):
                self.now += step.seconds
                continue
            if not isinstance(step, Send):
                return steps
            self.now += call_s
            queue = script.get(step.deployment_id, [])
            error = queue.pop(0) if queue else None
            plan.record(step.deployment_id, self.now, error, ttft_s=call_s / 2, latency_s=call_s)
        raise AssertionError("plan did not finish")


def sends(steps):
    return [(s.deployment_id, s.is_retry) for s in steps if isinstance(s, Send)]


def first_choice(seed=0, sticky=None):
    return order_candidates(TIER, rng=random.Random(seed), sticky_value=sticky)[0].deployment_id


def test_weighted_first_choice_then_list_order():
    counts = Counter(first_choice(seed) for seed in range(2000))
    assert set(counts) == {A, B}  # unweighted entries are backups only
    assert 0.86 < counts[A] / 2000 < 0.94
    seed_b = next(s for s in range(2000) if first_choice(s) == B)
    order = [c.deployment_id for c in order_candidates(TIER, rng=random.Random(seed_b))]
    assert order == [B, A, C]


def test_without_weights_the_list_order_holds():
    plain = [Candidate(C, "small"), Candidate(A, "small")]
    assert [c.deployment_id for c in order_candidates(plain, rng=random.Random(3))] == [C, A]


def test_sticky_values_pin_a_caller_to_one_arm():
    for user in ("alice", "bob", "carol"):
        assert len({first_choice(seed, sticky=user) for seed in range(20)}) == 1
    arms = Counter(first_choice(0, sticky=f"user-{i}") for i in range(1000))
    assert 0.85 < arms[A] / 1000 < 0.95


def test_sticky_choice_is_stable_across_processes():
    code = (
        "import random; from tests.resilience.test_failover import first_choice; "
        "print([first_choice(0, sticky=f'user-{i}') for i in range(64)])"
    )
    outs = set()
    for seed in ("1", "2", "3"):  # Python's own str hash differs under each of these
        env = {**os.environ, "PYTHONHASHSEED": seed}
        outs.add(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout.strip())
    assert outs == {str([first_choice(0, sticky=f"user-{i}") for i in range(64)])}
    assert sticky_point("user-42", "large") == sticky_point("user-42", "large") != sticky_point("user-42", "small")


def test_retries_then_failover_then_success():
    w = World(max_retries=2, max_retries_with_backup=2)
    plan = w.plan()
    steps = w.drive(plan, {A: [server_error(A)] * 3})
    assert sends(steps) == [(A, False), (A, True), (A, True), (B, False)]
    assert isinstance(steps[-1], Done) and steps[-1].deployment_id == B
    waits = [s for s in steps if isinstance(s, Wait)]
    assert len(waits) == 2 and all(s.reason == "backoff" for s in waits)
    assert [a.status for a in plan.attempts] == ["error", "error", "error", "ok"]
    # The lines are the route's (numbered in order); each Send numbers the tries at its deployment.
    assert [a.number for a in plan.attempts] == [1, 2, 3, 4]
    assert [s.number for s in steps if isinstance(s, Send)] == [1, 2, 3, 1]
    assert [s.record for s in steps if isinstance(s, Send)] == plan.attempts
    assert [a.note for a in plan.attempts] == [None, "retry", "retry", None]


def test_the_wait_comes_from_the_current_errors_retry_after():
    w = World(open_on_retry_after=False, max_retries=2, max_retries_with_backup=2, retry_after_with_backup_max_s=5)
    steps = w.drive(w.plan(), {A: [rate_limited(5.0, A), rate_limited(1.0, A)]})
    waits = [s.seconds for s in steps if isinstance(s, Wait)]
    assert waits == [5.0, 1.0]  # never the earlier attempt's 5 s again


def test_with_a_backup_a_timeout_moves_on_at_once():
    w = World(max_retries=2)
    timeout = E.APITimeoutError("ttft", timeout="ttft", seconds=10, provider="a", deployment=A)
    plan = w.plan()
    steps = w.drive(plan, {A: [timeout]})
    assert sends(steps) == [(A, False), (B, False)]
    assert not [s for s in steps if isinstance(s, Wait)]
    assert "silent deployment stays silent" in (plan.attempts[0].decision or "")


def test_with_a_backup_one_retry_then_the_backup():
    w = World(max_retries=2)
    plan = w.plan()
    steps = w.drive(plan, {A: [server_error(A)] * 3})
    assert sends(steps) == [(A, False), (A, True), (B, False)]
    assert "max_retries_with_backup" in (plan.attempts[1].decision or "")


def test_with_a_backup_a_long_retry_after_moves_on_a_short_one_is_waited():
    w = World(open_on_retry_after=False, max_retries=2)
    steps = w.drive(w.plan(), {A: [rate_limited(1.0, A), rate_limited(3.0, A)]})
    assert sends(steps) == [(A, False), (A, True), (B, False)]
    assert [s.seconds for s in steps if isinstance(s, Wait)] == [1.0]


def test_without_a_backup_a_timeout_is_retried():
    w = World(max_retries=2)
    timeout = E.APITimeoutError("ttft", timeout="ttft", seconds=10, provider="a", deployment=A)
    plan = w.plan(candidates=[Candidate(A, "small")])
    steps = w.drive(plan, {A: [timeout, timeout]})
    assert sends(steps) == [(A, False), (A, True), (A, True)]


def test_a_retry_after_hold_is_waited_out_and_retried_as_a_probe():
    w = World()  # open_on_retry_after: the 429 opens A until +2 s
    steps = w.drive(w.plan(), {A: [rate_limited(2.0, A)]})
    assert sends(steps) == [(A, False), (A, True)]
    assert [s.seconds for s in steps if isinstance(s, Wait)] == [2.0]
    snap = w.breakers.health(w.now)[A]
    assert snap.state == "half_open" and snap.trips == 0  # one probe success of the three that close it


def test_a_wait_that_does_not_fit_the_deadline_moves_on_without_sleeping():
    w = World()
    plan = w.plan(deadline_at=10.0)
    steps = w.drive(plan, {A: [rate_limited(20.0, A)]})
    assert not any(isinstance(s, Wait) for s in steps)
    assert sends(steps) == [(A, False), (B, False)]
    assert "moving on" in (plan.attempts[0].decision or "")


def test_open_breakers_are_skipped_and_the_skip_is_recorded():
    w = World(consecutive_failures=1)
    w.breakers.record(A, 0.0, server_error(A))
    plan = w.plan()
    steps = w.drive(plan, {})
    assert sends(steps) == [(B, False)]
    assert plan.attempts[0].status == "skipped" and plan.attempts[0].deployment == A
    assert "circuit open" in plan.attempts[0].note


def test_caller_errors_stop_everything_and_are_reraised():
    w = World()
    err = bad_request(A)
    plan = w.plan()
    steps = w.drive(plan, {A: [err]})
    assert sends(steps) == [(A, False)]
    assert isinstance(steps[-1], Exhausted) and steps[-1].error is err and steps[-1].reason == "caller_error"
    assert plan.next_step(w.now) is steps[-1]


def test_context_length_moves_to_a_larger_window_only():
    cands = [Candidate(A, "large", context_window=8192), Candidate(B, "large", context_window=4096),
             Candidate(C, "large", context_window=32768)]
    w = World()
    plan = w.plan(cands)
    steps = w.drive(plan, {A: [context_error(A)]})
    assert sends(steps) == [(A, False), (C, False)]  # B's smaller window is skipped, A is not retried
    assert [a.status for a in plan.attempts] == ["error", "skipped", "ok"]
    assert w.breakers.health(w.now)[A].calls_in_window == 0  # not the platform's fault


def test_a_known_request_size_skips_small_windows_up_front():
    cands = [Candidate(A, "large", context_window=8192), Candidate(C, "large", context_window=32768)]
    w = World()
    steps = w.drive(w.plan(cands, required_context_tokens=10_000), {})
    assert sends(steps) == [(C, False)]


def test_context_length_fails_clearly_when_nothing_fits():
    cands = [Candidate(A, "large", context_window=8192), Candidate(B, "large"), Candidate(C, "large", context_window=4096)]
    w = World()
    steps = w.drive(w.plan(cands, required_context_tokens=6000), {A: [context_error(A)]})
    assert sends(steps) == [(A, False)]
    end = steps[-1]
    assert isinstance(end, Exhausted) and end.reason == "context_length"
    assert isinstance(end.error, E.ContextLengthError)
    assert B in str(end.error) and "unknown" in str(end.error) and C in str(end.error)


def test_precheck_failing_every_candidate_is_a_context_length_error():
    cands = [Candidate(A, "large", context_window=4096)]
    w = World()
    steps = w.drive(w.plan(cands, required_context_tokens=9000), {})
    assert sends(steps) == [] and isinstance(steps[-1].error, E.ContextLengthError)


def test_fatal_errors_move_on_and_disable_the_deployment():
    w = World()
    plan = w.plan()
    steps = w.drive(plan, {A: [auth_error(A)]})
    assert sends(steps) == [(A, False), (B, False)]
    snap = w.breakers.health(w.now)[A]
    assert snap.state == "open" and w.now < snap.open_until <= w.now + 300  # auth_recheck_s from the 401
    later = w.plan()
    w.drive(later, {})
    assert later.attempts[0].status == "skipped" and "DISABLED" in later.attempts[0].note


def test_a_failure_after_content_started_is_never_retried_or_failed_over():
    w = World()
    plan = w.plan()
    step = plan.next_step(0.0)
    assert isinstance(step, Send) and step.deployment_id == A
    plan.record(A, 2.0, E.APIConnectionError("reset", deployment=A), content_started=True, partial_text="Hello, wo")
    end = plan.next_step(2.0)
    assert isinstance(end, Exhausted) and end.reason == "stream_interrupted"
    err = end.error
    assert isinstance(err, E.StreamInterruptedError) and err.partial_text == "Hello, wo"
    assert [a.deployment for a in err.attempts] == [A] and err.attempts[0].status == "interrupted"
    assert isinstance(err.__cause__, E.APIConnectionError)
    assert plan.attempts[-1].status == "interrupted"


def test_a_stream_error_before_content_fails_over_like_any_call():
    w = World(max_retries=0)
    steps = w.drive(w.plan(), {A: [E.StreamInterruptedError("cut", partial_text="", deployment=A)]})
    assert sends(steps) == [(A, False), (B, False)]


def test_fallback_tier_after_every_deployment_failed():
    small = [Candidate("s:m", "small")]
    w = World(max_retries=0)
    plan = w.plan(fallback=small, fallback_tier="small")
    steps = w.drive(plan, {A: [server_error(A)], B: [server_error(B)], C: [server_error(C)]})
    last = [s for s in steps if isinstance(s, Send)][-1]
    assert last.deployment_id == "s:m" and last.is_fallback and last.tier == "small"
    assert plan.used_fallback_tier == "small" and isinstance(steps[-1], Done)


def test_all_deployments_failed_lists_every_attempt():
    w = World(max_retries=0)
    plan = w.plan(fallback=[Candidate("s:m", "small")])
    steps = w.drive(plan, {d: [server_error(d)] for d in (A, B, C, "s:m")})
    end = steps[-1]
    assert isinstance(end, Exhausted) and end.reason == "all_failed"
    err = end.error
    assert isinstance(err, E.AllDeploymentsFailedError) and err.tier == "large"
    assert [a.deployment for a in err.attempts] == [A, B, C, "s:m"]
    assert all(a.duration_s == 1.0 and isinstance(a.error, E.ServerError) for a in err.attempts)
    assert err.last_error is err.attempts[-1].error
    assert "fallback tier 'small'" in str(err)


def test_the_retry_budget_stops_retry_storms():
    w = World(retry_budget=0.0, retry_budget_min=0)
    steps = w.drive(w.plan(), {A: [server_error(A)]})
    assert sends(steps) == [(A, False), (B, False)]


def test_the_retry_budget_is_a_share_of_recent_requests():
    w = World(retry_budget=0.5, retry_budget_min=0, max_retries=1, backoff_base_s=0, backoff_max_s=0,
              min_calls=1000, consecutive_failures=1000)  # keep A's breaker closed: only the budget decides
    retried = 0
    for _ in range(10):
        steps = w.drive(w.plan([Candidate(A, "large"), Candidate(B, "large")]), {A: [server_error(A)]})
        retried += sends(steps).count((A, True))
    assert retried == 5  # half of ten requests


def test_the_deadline_ends_the_plan():
    w = World(max_retries=5)
    plan = w.plan(deadline_at=2.5)
    steps = w.drive(plan, {A: [server_error(A)] * 10, B: [server_error(B)] * 10, C: [server_error(C)] * 10}, call_s=1.0)
    assert isinstance(steps[-1], Exhausted) and steps[-1].reason == "deadline"
    assert all(s.timeout_s <= 2.5 for s in steps if isinstance(s, Send))


def test_half_open_probe_slots_are_shared_between_calls():
    w = World(consecutive_failures=1, open_s=5, half_open_probes=1)
    w.breakers.record(A, 0.0, server_error(A))
    w.now = 5.0
    one, two = w.plan(), w.plan()
    assert one.next_step(5.0).deployment_id == A  # the probe
    assert two.next_step(5.0).deployment_id == B  # no second probe
    assert two.attempts[0].status == "skipped" and "probe" in two.attempts[0].note


def test_client_side_limits_queue_within_the_timeout_or_move_on():
    w = World(rpm=60, queue_timeout_s=2.0)
    for _ in range(60):
        w.limits.try_acquire(0.0, A)
    plan = w.plan()
    step = plan.next_step(0.0)
    assert isinstance(step, Wait) and step.reason.startswith("limit") and step.seconds == pytest.approx(1.0)
    assert plan.next_step(0.5).seconds == pytest.approx(0.5)  # still queued for A
    assert plan.next_step(1.0).deployment_id == A

    w2 = World(rpm=60, queue_timeout_s=0.0)
    for _ in range(60):
        w2.limits.try_acquire(0.0, A)
    plan2 = w2.plan()
    assert plan2.next_step(0.0).deployment_id == B
    assert "requests-per-minute" in plan2.attempts[0].note


def test_skipping_an_open_deployment_spends_none_of_its_limits():
    w = World(consecutive_failures=1, rpm=1, queue_timeout_s=0.0)
    w.breakers.record(A, 0.0, server_error(A))
    plan = w.plan()
    assert plan.next_step(0.0).deployment_id == B
    assert w.limits.try_acquire(0.0, A).granted  # A's one request per minute is still there


def test_a_bulkhead_slot_is_released_when_the_attempt_ends():
    w = World(max_concurrency=1, queue_timeout_s=0.0)
    plan = w.plan([Candidate(A, "large")])
    assert isinstance(plan.next_step(0.0), Send)
    assert w.limits.in_flight(A) == 1
    plan.record(A, 1.0, None)
    assert w.limits.in_flight(A) == 0


def test_hedge_then_cancel_the_loser():
    w = World(consecutive_failures=1, open_s=5, half_open_probes=1)
    w.breakers.record(B, 0.0, server_error(B))
    w.now = 5.0  # B is half-open: its one probe slot must come back when the hedge is cancelled
    plan = w.plan([Candidate(A, "large"), Candidate(B, "large")])
    primary = plan.next_step(5.0)
    hedge = plan.hedge_step(6.5)
    assert primary.deployment_id == A and hedge.deployment_id == B and hedge.is_hedge
    assert plan.outstanding == (A, B)
    plan.record(A, 7.0, None, ttft_s=1.8)
    plan.cancel(B, 7.0)
    assert [(a.deployment, a.status) for a in plan.attempts] == [(A, "ok"), (B, "cancelled")]
    assert w.breakers.breaker(B).peek(7.0)  # the probe slot was released
    assert isinstance(plan.next_step(7.0), Done)


def test_no_hedge_when_no_other_candidate_is_left():
    w = World()
    plan = w.plan([Candidate(A, "large")])
    plan.next_step(0.0)
    assert plan.hedge_step(2.0) is None


def test_recording_an_attempt_that_was_not_sent_is_an_error():
    w = World()
    with pytest.raises(ValueError):
        w.plan().record(A, 0.0, None)


# ---------------------------------------------------------------------------------------------
# finishing a cut stream (issue 24): other continuers, then the cut deployment, then replays


def _cut_plan(world, *, can_continue, replay, same_family=lambda dep, cut: True, cut_error=None):
    plan = world.plan([Candidate(A, "t"), Candidate(B, "t"), Candidate(C, "t")],
                      can_continue=can_continue, can_replay=same_family)
    first = plan.next_step(world.now)
    assert isinstance(first, Send) and first.deployment_id == A
    cut = cut_error or E.APIConnectionError("reset", deployment=A)
    plan.record(A, world.now, cut, content_started=True, partial_text="one two",
                recover="continue_or_replay", replay=replay)
    return plan


def test_after_a_cut_other_continuers_go_first_then_the_cut_one_then_replays():
    world = World(max_retries=2)
    plan = _cut_plan(world, can_continue=lambda dep: dep in (A, C), replay="family")
    steps = []
    while True:
        step = plan.next_step(world.now)
        if isinstance(step, Wait):
            world.now += step.seconds
            continue
        if not isinstance(step, Send):
            break
        steps.append((step.deployment_id, step.is_continuation, step.is_replay, step.is_retry))
        plan.record(step.deployment_id, world.now, server_error(), latency_s=0.1)
    # a continuation's 500 is retried once (a backup is left), still as a continuation; a replay that
    # fails moves on (the next replay, or the cut)
    assert steps == [(C, True, False, False), (C, True, False, True), (A, True, False, True),
                     (B, False, True, False)]
    assert isinstance(step, Exhausted) and isinstance(step.error, E.StreamInterruptedError)
    assert step.error.partial_text == "one two"  # the cut is the error, whatever came after


def test_a_stall_is_not_continued_on_the_stalled_deployment():
    world = World(max_retries=2)
    stall = E.APITimeoutError("stall", timeout="stall", seconds=10.0, deployment=A)
    plan = _cut_plan(world, can_continue=lambda dep: dep == A, replay=None, cut_error=stall)
    step = plan.next_step(world.now)
    assert isinstance(step, Exhausted) and isinstance(step.error, E.StreamInterruptedError)
    assert [a.note for a in plan.attempts if a.status == "skipped"] == [
        "skipped: cannot continue a partial answer"] * 2


def test_a_cut_plain_call_is_restarted_on_the_backups_first_then_on_the_cut_deployment():
    # A plain call's caller saw nothing: every backup may answer it again from scratch, and the cut
    # deployment itself last (a retry: one broken connection), not after a stall.
    for cut_error, cut_again in ((E.APIConnectionError("reset", deployment=A), True),
                                 (E.APITimeoutError("stall", timeout="stall", seconds=10.0, deployment=A), False)):
        world = World(max_retries=2, max_retries_with_backup=0)
        plan = world.plan([Candidate(A, "t"), Candidate(B, "t")], can_continue=lambda dep: False)
        assert plan.next_step(world.now).deployment_id == A
        plan.record(A, world.now, cut_error, content_started=True, partial_text="one two",
                    recover="continue_or_restart")
        steps = []
        while isinstance(step := plan.next_step(world.now), (Send, Wait)):
            if isinstance(step, Wait):  # B's own retries' backoff
                world.now += step.seconds
                continue
            steps.append((step.deployment_id, step.is_restart, step.is_retry))
            plan.record(step.deployment_id, world.now, server_error(), latency_s=0.1)
        # B answers again from scratch, its 500s retried (max_retries 2); then A, as a retry, whose
        # own 500 is retried within what is left of its max_retries
        on_b = [(B, True, False), (B, False, True), (B, False, True)]
        assert steps == on_b + ([(A, True, True), (A, False, True)] if cut_again else [])
        assert isinstance(step, Exhausted)


def test_a_replay_goes_only_to_the_same_family_and_a_divergence_moves_on_without_tripping():
    world = World(consecutive_failures=1)
    plan = _cut_plan(world, can_continue=lambda dep: False, replay="family",
                     same_family=lambda dep, cut: dep == C)
    step = plan.next_step(world.now)
    assert isinstance(step, Send) and step.deployment_id == C and step.is_replay
    skipped = [a for a in plan.attempts if a.status == "skipped"]
    assert [(a.deployment, a.note) for a in skipped] == [(B, "skipped: cannot continue a partial answer nor repeat it")]
    plan.record(C, world.now, E.ReplayDivergedError("differs", deployment=C), latency_s=0.1)
    assert world.breakers.breaker(C).peek(world.now)  # diverging says nothing of C's health
    assert "replay did not finish" in (plan.attempts[-1].decision or "")
    assert isinstance(plan.next_step(world.now), Exhausted)


# ---------------------------------------------------------------------------------------------
# held deployments: the class that holds them, a short hold waited out, mixed causes


def _exhausted(steps):
    last = steps[-1]
    assert isinstance(last, Exhausted)
    return last


def test_every_deployment_held_by_one_class_raises_a_held_copy_of_it():
    w = World(max_retries=0)
    one = [Candidate(A, "large"), Candidate(B, "large")]
    first = w.drive(w.plan(one), {A: [rate_limited(60, A)], B: [rate_limited(60, B)]})
    assert isinstance(_exhausted(first).error, E.AllDeploymentsFailedError)  # sent to both: the plan's error
    w.now += 1
    second = w.drive(w.plan(one), {})
    end = _exhausted(second)
    assert end.reason == "held" and sends(second) == []
    error = end.error
    assert type(error) is E.RateLimitError and error.held and error.status == 429
    assert error.__traceback__ is None and 0 < error.retry_after <= 30  # the time left (open_max_s)


def test_mixed_holds_end_with_every_cause():
    w = World(max_retries=0)
    one = [Candidate(A, "large"), Candidate(B, "large")]
    w.drive(w.plan(one), {A: [auth_error(A)], B: [rate_limited(60, B)]})
    w.now += 1
    end = _exhausted(w.drive(w.plan(one), {}))
    assert type(end.error) is E.AllDeploymentsFailedError and not end.error.held
    assert {type(c) for c in end.error.causes} == {E.AuthenticationError, E.RateLimitError}


def test_a_short_hold_is_waited_out_and_probed_once():
    w = World(max_retries=0, wait_for_recovery_s=3)
    one = [Candidate(A, "large")]
    w.drive(w.plan(one), {A: [rate_limited(2, A)]})  # held for 2 s
    steps = w.drive(w.plan(one), {A: [rate_limited(2, A)]})
    waits = [s for s in steps if isinstance(s, Wait)]
    assert len(waits) == 1 and waits[0].reason == "waiting out a short hold" and 0 < waits[0].seconds <= 2
    assert sends(steps) == [(A, False)]  # probed after the wait; its own 429 ends the call (not waited twice)
    # The probe's own 429 was sent: the plan's error carries it (the call raises it: one deployment).
    assert type(_exhausted(steps).error.last_error) is E.RateLimitError
    off = World(max_retries=0, wait_for_recovery_s=0)
    off.drive(off.plan(one), {A: [rate_limited(2, A)]})
    end = _exhausted(off.drive(off.plan(one), {}))
    assert end.reason == "held" and end.error.held
