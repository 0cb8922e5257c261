"""Slow start of a tier balanced by load (resilience/balance.py): the window rule as a plain function,
the balancer's windows with the clock passed in, the failover plan holding a first attempt back
(deterministic, no sleeps), and a cold burst against capacity-bound loopback servers."""

from __future__ import annotations

import random

import llmroute as L
from llmroute.resilience import BreakerRegistry, BudgetRegistry, Candidate, FailoverPlan, ResiliencePolicy, Send, Wait
from llmroute.resilience.balance import MAX_WINDOW, SLOW_START_POLL_S, LoadBalancer, grow_window
from llmroute.resilience.failover import order_tier
from tests.resilience.helpers import server_error
from tests.servers.capacity import CapacityServer

IDS = ["a:m", "b:m", "c:m"]
TIER = [Candidate(d, "t", 1.0) for d in IDS]


def _answer(b: LoadBalancer, dep: str, now: float, latency: float, met: int | None = None) -> None:
    started = b.started(dep, now - latency)
    b.finished(dep, now, latency_s=latency, met=started if met is None else met, ok=True)


def test_the_window_doubles_per_fast_answer_and_ends_at_queueing_or_its_goal():
    assert grow_window(1.0, MAX_WINDOW, fast=True, met=1) == 2.0
    assert grow_window(16.0, MAX_WINDOW, fast=True, met=9) == 32.0
    assert grow_window(32.0, MAX_WINDOW, fast=True, met=20) is None  # reached the goal: never queued
    assert grow_window(4.0, 6.0, fast=True, met=3) is None  # after a failure spell: back at the capacity known
    assert grow_window(4.0, MAX_WINDOW, fast=False, met=3) is None  # queued: the capacity estimate takes over
    assert grow_window(4.0, MAX_WINDOW, fast=False, met=1) == 4.0  # slower alone: the service, not the capacity
    assert grow_window(None, MAX_WINDOW, fast=True, met=1) is None


def test_an_unmeasured_deployment_holds_one_call_until_it_answers():
    b = LoadBalancer()
    b.set_prior({d: 1.0 for d in IDS})
    for dep in IDS:
        assert not b.holds(dep, IDS, "t", None, 0.0)
        b.started(dep, 0.0)
    assert all(b.holds(dep, IDS, "t", None, 0.0) for dep in IDS)  # every window is full
    b.finished("a:m", 0.1, latency_s=0.1, met=1, ok=True)  # a answers at speed: its window doubles
    assert b.snapshot(0.1)["a:m"]["window"] == 2.0
    assert not b.holds("a:m", IDS, "t", None, 0.1) and b.holds("c:m", IDS, "t", None, 0.1)
    # The route and `llmroute health` say which deployments are still in slow start.
    _, choice = b.rank(TIER, IDS, 0.1, rng=random.Random(1))
    assert choice is not None and "slow start window 2" in choice.text
    from llmroute.resilience.deployment_health import load_line

    assert "slow start window 2" in load_line(b.snapshot(0.1)["a:m"])


def test_calls_queued_first_take_the_room_first():
    b = LoadBalancer()
    b.set_prior({d: 1.0 for d in IDS[:2]})
    first = b.enqueue("t", expires_at=5.0)
    second = b.enqueue("t", expires_at=5.0)
    b.started("a:m", 0.0)  # a full, b has one free place
    assert not b.holds("b:m", IDS[:2], "t", first, 0.0)
    assert b.holds("b:m", IDS[:2], "t", second, 0.0)  # the one place is the first caller's
    assert b.holds("b:m", IDS[:2], "t", None, 0.0)  # so is it for a caller that has not queued yet
    b.dequeue("t", first)
    assert not b.holds("b:m", IDS[:2], "t", second, 0.0)


def test_weights_set_the_first_window_and_a_declared_limit_skips_slow_start():
    b = LoadBalancer()
    b.set_prior({"a:m": 8.0, "b:m": 8.0, "c:m": 1.0})
    snap = b.snapshot(0.0)
    assert [snap[d]["window"] for d in IDS] == [8.0, 8.0, 1.0]
    b.known_capacity("c:m")  # max_concurrency declared
    assert b.snapshot(0.0)["c:m"]["window"] is None
    b.started("c:m", 0.0)
    assert not b.holds("c:m", IDS, "t", None, 0.0)


def test_queueing_ends_the_slow_start_and_a_failure_spell_starts_another():
    b = LoadBalancer()
    b.set_prior({"a:m": 1.0, "b:m": 1.0})
    _answer(b, "a:m", 0.1, 0.1)  # window 2
    _answer(b, "a:m", 0.2, 0.1, met=2)  # window 4
    _answer(b, "a:m", 0.5, 0.3, met=4)  # 3x its service time with 4 in flight: it queued
    snap = b.snapshot(0.5)["a:m"]
    assert snap["window"] is None and float(snap["capacity"]) >= 2  # type: ignore[arg-type]
    for k in range(4):  # it fails (its breaker would open): ramp up again once it recovers
        met = b.started("a:m", 1.0 + k)
        b.finished("a:m", 1.1 + k, latency_s=0.1, met=met, ok=False)
    assert b.snapshot(5.0)["a:m"]["window"] == 1.0
    for k in range(4):
        _answer(b, "a:m", 10.0 + k, 0.1)
    assert b.snapshot(20.0)["a:m"]["window"] is None  # back at the capacity it had


def test_a_servers_queue_gauges_end_the_slow_start_once_its_speed_is_known():
    from llmroute.resilience.balance import QueueGauges

    b = LoadBalancer()
    b.set_prior({"a:m": 1.0, "b:m": 1.0})
    b.set_gauges("a:m", QueueGauges(running=4, waiting=2), 0.0)
    assert b.snapshot(0.0)["a:m"]["window"] == 1.0  # its capacity, but not its speed: keep probing
    _answer(b, "a:m", 0.2, 0.1)
    b.set_gauges("a:m", QueueGauges(running=4, waiting=2), 0.3)
    snap = b.snapshot(0.3)["a:m"]
    assert snap["window"] is None and snap["capacity"] == 4.0


def test_a_process_starts_from_the_fleets_knowledge():
    b = LoadBalancer()
    b.set_prior({"a:m": 1.0, "b:m": 1.0})
    assert b.published(["a:m"]) == ["0||1|1"]  # in flight | service | capacity | window
    b.adopt("a:m", ["2|0.1|4|8"], 1.0)  # another process still ramping: this one's window follows
    assert b.snapshot(1.0)["a:m"]["window"] == 8.0 and b.snapshot(1.0)["a:m"]["remote_in_flight"] == 2
    b.adopt("a:m", ["2|0.1|6|", "0|0.1|8|"], 2.0)  # two that learned its capacity: no slow start here
    snap = b.snapshot(2.0)["a:m"]
    assert snap["window"] is None and snap["capacity"] == 8.0
    b.adopt("b:m", ["1|0.1|5"], 2.0)  # a process without slow start (three fields): its estimate is learned
    assert b.snapshot(2.0)["b:m"]["window"] is None
    # A deployment nobody measured yet: another process's call there fills the window here too...
    b.set_prior({"c:m": 1.0, "d:m": 1.0})
    b.adopt("c:m", ["1||"], 3.0)
    assert b.holds("c:m", ["c:m", "d:m"], "t", None, 3.0)
    assert not b.holds("d:m", ["c:m", "d:m"], "t", None, 3.0)
    # ... but once measured, the window counts this process's calls only (each process ramps its own).
    b.adopt("c:m", ["1|0.4|1|2"], 4.0)
    assert not b.holds("c:m", ["c:m", "d:m"], "t", None, 4.0)


class _World:
    def __init__(self, **policy: object) -> None:
        self.policy = ResiliencePolicy(**policy)  # type: ignore[arg-type]
        self.breakers = BreakerRegistry(self.policy)
        self.budgets = BudgetRegistry(self.breakers.policy)
        self.balancer = LoadBalancer()
        self.balancer.set_prior({d: 1.0 for d in IDS})

    def plan(self, now: float, candidates: list[Candidate] = TIER) -> FailoverPlan:
        order, choice = order_tier(candidates, mode="load", rng=random.Random(0), now=now, balancer=self.balancer)
        return FailoverPlan(order, breakers=self.breakers, budgets=self.budgets, policies=self.breakers.policy,
                            deadline_at=now + 60, now=now, rng=random.Random(0), balancer=self.balancer,
                            ordered=True, choice=choice, queue_when_full=True)


def test_a_first_attempt_beyond_every_window_waits_for_an_answer_then_goes_where_it_opened():
    w = _World()
    plans = [w.plan(0.0) for _ in range(4)]
    firsts = [p.next_step(0.0) for p in plans]
    assert sorted(s.deployment_id for s in firsts[:3] if isinstance(s, Send)) == IDS  # one each
    held = firsts[3]
    assert isinstance(held, Wait) and held.reason.startswith("slow start") and held.seconds == SLOW_START_POLL_S
    assert isinstance(plans[3].next_step(0.05), Wait)  # still no answer
    b_send = next(s for s in firsts if isinstance(s, Send) and s.deployment_id == "b:m")
    b_plan = plans[firsts.index(b_send)]
    b_plan.record("b:m", 0.1, None, latency_s=0.1)  # b answers: its window opens
    step = plans[3].next_step(0.1)
    assert isinstance(step, Send) and step.deployment_id == "b:m"
    assert plans[3].queued_s == 0.1
    choice = plans[3].new_choice()  # the route's text says why b, not the first choice
    assert choice is not None and choice.deployment_id == "b:m" and "at the slow-start window" in choice.text


def test_the_wait_is_bounded_then_the_order_by_expected_delay_decides():
    w = _World(slow_start_wait_s=0.3)
    for p in [w.plan(0.0) for _ in range(3)]:
        assert isinstance(p.next_step(0.0), Send)
    late = w.plan(0.0)
    now, steps = 0.0, []
    while not isinstance(step := late.next_step(now), Send):
        assert isinstance(step, Wait)
        steps.append(step)
        now += step.seconds
    assert 0.3 - 1e-9 <= now <= 0.3 + SLOW_START_POLL_S and len(steps) >= 29
    assert late.queued_s == now


def test_a_lone_deployment_a_retry_and_slow_start_off_never_wait():
    w = _World()
    lone = [Candidate("a:m", "t", 1.0)]
    for _ in range(3):
        assert isinstance(w.plan(0.0, lone).next_step(0.0), Send)  # a one-deployment tier behaves as before
    off = _World(slow_start_wait_s=0)
    for _ in range(5):
        assert isinstance(off.plan(0.0).next_step(0.0), Send)
    # A failover after a failure is not held: only a call's first send waits.
    w2 = _World(max_retries=0)
    p = w2.plan(0.0)
    first = p.next_step(0.0)
    others = [w2.plan(0.0).next_step(0.0) for _ in range(2)]
    assert isinstance(first, Send) and all(isinstance(s, Send) for s in others)
    assert isinstance(w2.plan(0.0).next_step(0.0), Wait)  # every window is full now
    p.record(first.deployment_id, 0.1, server_error(first.deployment_id), latency_s=0.1)
    step = p.next_step(0.1)
    assert isinstance(step, Send) and step.deployment_id != first.deployment_id


def test_a_cold_burst_keeps_off_the_small_server_until_it_has_answered():
    """Real sockets: two servers of 4 slots at 50 ms and one of 1 slot at 300 ms, listed with equal
    weights, 12 calls at once from a fresh client: the small one gets one call of the burst (its
    window), the others wait for the big ones' first answers instead of queueing behind it."""
    import concurrent.futures

    with CapacityServer(slots=4, service_s=0.05) as a, CapacityServer(slots=4, service_s=0.05) as b, \
            CapacityServer(slots=1, service_s=0.3) as c:
        servers = {"a": a, "b": b, "c": c}
        cfg = {
            "providers": {n: {"kind": "vllm", "base_url": s.base_url, "queue_gauges": False} for n, s in servers.items()},
            "tiers": {"t": {"deployments": [{"id": f"{n}:m", "weight": 1} for n in servers]}},
            "pricing": {f"{n}:*": {"input_per_million": 0, "output_per_million": 0} for n in servers},
            # A generous bound: this test is about where the burst goes, not how long the wait is.
            "resilience": {"max_retries": 0, "slow_start_wait_s": 30},
            "ledger": {"sink": "memory"},
        }
        with L.Client(config=cfg) as client:
            def call(_: int) -> L.Route:
                return client.chat.completions.create(model="t", messages=[{"role": "user", "content": "hi"}]).route

            with concurrent.futures.ThreadPoolExecutor(12) as pool:
                routes = list(pool.map(call, range(12)))
            health = client.health()
        assert all(r.attempts[-1].status == "ok" for r in routes)
        assert c.served == 1 and a.served + b.served == 11
        waited = [r for r in routes if r.queued_s > 0]
        assert len(waited) >= 12 - 3 - 2  # three sent at once, a few more once the first answers came
        assert health["a:m"].load is not None and "window" in health["a:m"].load


def test_a_declared_max_concurrency_is_a_known_capacity():
    servers = {"a": "http://127.0.0.1:9/v1", "b": "http://127.0.0.1:9/v1"}
    cfg = {
        "providers": {n: {"kind": "vllm", "base_url": u, "queue_gauges": False} for n, u in servers.items()},
        "tiers": {"t": {"deployments": [{"id": "a:m", "weight": 1, "resilience": {"max_concurrency": 4}},
                                        {"id": "b:m", "weight": 1}]}},
        "pricing": {f"{n}:*": {"input_per_million": 0, "output_per_million": 0} for n in servers},
        "ledger": {"sink": "memory"},
    }
    with L.Client(config=cfg) as client:  # nothing is sent
        loads = client.health()
    assert loads["a:m"].load is not None and loads["a:m"].load["window"] is None
    assert loads["b:m"].load is not None and loads["b:m"].load["window"] == 1.0
