"""Load-aware balancing: the estimate (sans-I/O, clock passed in), the gauges' parser and scraper, and a
tier balanced by load against capacity-bound loopback servers (tests/servers/capacity.py)."""

from __future__ import annotations

import random
import time

import llmroute as L
from llmroute.resilience.balance import LoadBalancer, QueueGauges
from llmroute.resilience.failover import Candidate, order_tier
from llmroute.resilience.gauges import parse_gauges
from tests.servers.capacity import CapacityServer

A, B = Candidate("a:m", "t", 1.0), Candidate("b:m", "t", 1.0)
IDS = ["a:m", "b:m"]


def _serve(b: LoadBalancer, dep: str, now: float, latency: float) -> None:
    met = b.started(dep, now)
    b.finished(dep, now + latency, latency_s=latency, met=met, ok=True)


def test_the_faster_deployment_is_first_and_the_route_says_why():
    b = LoadBalancer()
    _serve(b, "a:m", 0.0, 0.4)
    _serve(b, "b:m", 0.0, 0.1)
    order, choice = b.rank([A, B], IDS, 1.0, rng=random.Random(1))
    assert order == [B, A] and choice is not None
    assert choice.text.startswith("load: b:m has the lowest expected delay: b:m 100ms")


def test_in_flight_beyond_capacity_moves_calls_to_the_other():
    b = LoadBalancer()
    b.set_prior({"a:m": 2.0, "b:m": 1.0})  # a: twice the capacity
    _serve(b, "a:m", 0.0, 0.1)
    _serve(b, "b:m", 0.0, 0.1)
    firsts = []
    for _ in range(6):
        order, _ = b.rank([A, B], IDS, 1.0, rng=random.Random(2))
        firsts.append(order[0].deployment_id)
        b.started(order[0].deployment_id, 1.0)
    assert firsts.count("a:m") == 4 and firsts.count("b:m") == 2  # shares by capacity 2:1


def test_a_server_that_slows_down_loses_its_first_place_and_is_tried_again_later():
    b = LoadBalancer()
    for t in range(5):
        _serve(b, "a:m", float(t), 0.1)
        _serve(b, "b:m", float(t), 0.12)
    _serve(b, "a:m", 5.0, 0.8)  # 8x slower
    assert b.rank([A, B], IDS, 6.0, rng=random.Random(3))[0][0] == B
    # No traffic for a long time: the estimate relaxes toward the fastest it has seen.
    assert b.rank([A, B], IDS, 60.0, rng=random.Random(3))[0][0] == A


def test_errors_and_queue_gauges_raise_the_estimate():
    b = LoadBalancer()
    _serve(b, "a:m", 0.0, 0.1)
    _serve(b, "b:m", 0.0, 0.1)
    for _ in range(3):
        met = b.started("a:m", 1.0)
        b.finished("a:m", 1.1, latency_s=0.1, met=met, ok=False)
    assert b.rank([A, B], IDS, 2.0, rng=random.Random(4))[0][0] == B
    b2 = LoadBalancer()
    _serve(b2, "a:m", 0.0, 0.1)
    _serve(b2, "b:m", 0.0, 0.1)
    b2.set_gauges("b:m", QueueGauges(running=4, waiting=6, kv_cache=0.97), 1.0)  # other clients' queue
    order, choice = b2.rank([A, B], IDS, 2.0, rng=random.Random(4))
    assert order[0] == A and choice is not None and "b:m" in choice.text
    # Gauges age out: a scrape that stops answering changes nothing but the health line.
    b2.gauge_failed("b:m", "metrics: ConnectError")
    assert b2.snapshot(30.0)["b:m"]["gauge_error"] == "metrics: ConnectError"
    assert b2.snapshot(30.0)["b:m"]["queue_waiting"] is None


def test_a_sticky_value_keeps_its_deployment_until_it_is_far_worse():
    b = LoadBalancer()
    _serve(b, "a:m", 0.0, 0.1)
    _serve(b, "b:m", 0.0, 0.15)
    kept = {order_tier([A, B], mode="load", rng=random.Random(5), now=1.0, sticky_value=f"user-{i}",
                       balancer=b)[0][0].deployment_id for i in range(20)}
    assert kept == {"a:m", "b:m"}  # within 2x of the best: each user keeps the deployment it hashes to
    _serve(b, "b:m", 1.0, 2.0)
    b_user = next(f"user-{i}" for i in range(20) if order_tier(
        [A, B], mode="weighted", rng=random.Random(0), now=0.0, sticky_value=f"user-{i}")[0][0] == B)
    order, choice = order_tier([A, B], mode="load", rng=random.Random(5), now=3.0, sticky_value=b_user, balancer=b)
    assert order[0] == B  # slow but idle: the call would not queue there, the user stays
    b.started("b:m", 3.0)  # one call in flight fills its learned capacity (~1): the next would queue
    order, choice = order_tier([A, B], mode="load", rng=random.Random(5), now=3.0, sticky_value=b_user, balancer=b)
    assert order[0] == A and choice is not None and choice.sticky_overridden == "b:m"


def test_a_sticky_value_keeps_its_deployment_over_milliseconds_of_noise():
    """Two fast servers 3x apart by a few milliseconds (noise on a loaded machine, not load), each
    with a call in flight: each user keeps the deployment it hashes to; the same ratio at 100 ms vs
    300 ms moves it."""
    users = [f"user-{i}" for i in range(20)]
    hashed = {u: order_tier([A, B], mode="weighted", rng=random.Random(0), now=0.0, sticky_value=u)[0][0].deployment_id
              for u in users}
    for fast, slow, kept in ((0.002, 0.006, True), (0.1, 0.3, False)):
        b = LoadBalancer()
        _serve(b, "a:m", 0.0, fast)
        _serve(b, "b:m", 0.0, slow)
        b.started("a:m", 0.5)
        b.started("b:m", 0.5)
        chosen = {u: order_tier([A, B], mode="load", rng=random.Random(5), now=1.0, sticky_value=u,
                                balancer=b)[0][0].deployment_id for u in users}
        assert (chosen == hashed) is kept, (fast, slow, chosen)
        if not kept:
            assert set(chosen.values()) == {"a:m"}


def test_parse_gauges_of_each_server():
    vllm = ('# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine="0",model_name="m"} 3\n'
            'vllm:num_requests_running{engine="1",model_name="m"} 2\nvllm:num_requests_waiting{engine="0"} 4\n'
            'vllm:gpu_cache_usage_perc{engine="0"} 0.5\nvllm:kv_cache_usage_perc{engine="1"} 0.7\n')
    assert parse_gauges(vllm) == QueueGauges(running=5, waiting=4, kv_cache=0.7)
    sglang = ('sglang:num_running_reqs{tp_rank="0"} 6\nsglang:num_running_reqs{tp_rank="1"} 6\n'
              'sglang:num_queue_reqs{tp_rank="0"} 1\nsglang:token_usage{tp_rank="0"} 0.25\n')
    assert parse_gauges(sglang) == QueueGauges(running=6, waiting=1, kv_cache=0.25)
    assert parse_gauges("tgi_queue_size 2\ntgi_batch_current_size 7\n") == QueueGauges(running=7, waiting=2)
    assert parse_gauges("# nothing here\nprocess_cpu_seconds_total 3\n") is None


def test_a_tier_balanced_by_load_prefers_the_server_with_room(tmp_path):
    """Real sockets: a tier of a big server (4 slots) and a small one (1 slot, 4x slower), 40 calls,
    8 at a time; the small one gets a small share and the gauges show in health."""
    import concurrent.futures

    with CapacityServer(slots=4, service_s=0.05) as big, CapacityServer(slots=1, service_s=0.2) as small:
        cfg = {
            "providers": {"big": {"kind": "vllm", "base_url": big.base_url},
                          "small": {"kind": "vllm", "base_url": small.base_url, "metrics_interval_s": 0.2}},
            "tiers": {"t": {"deployments": [{"id": "big:m", "weight": 1}, {"id": "small:m", "weight": 1}]}},
            "pricing": {"big:*": {"input_per_million": 0, "output_per_million": 0},
                        "small:*": {"input_per_million": 0, "output_per_million": 0}},
            "resilience": {"max_retries": 0},
            "ledger": {"sink": "memory"},
        }
        with L.Client(config=cfg) as client:
            def call(_: int) -> str:
                r = client.chat.completions.create(model="t", messages=[{"role": "user", "content": "hi"}])
                assert r.route.balance and r.route.balance.startswith(f"load: {r.route.deployment} ")
                return r.route.deployment or ""

            with concurrent.futures.ThreadPoolExecutor(8) as pool:
                served = list(pool.map(call, range(40)))
            deadline = time.monotonic() + 5
            while small.metrics_reads < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            health = client.health()
        assert served.count("big:m") > 3 * served.count("small:m")
        assert small.metrics_reads >= 2 and big.metrics_reads >= 1  # read off the request path
        load = health["small:m"].load
        assert load is not None and load["latency_s"] is not None and load["in_flight"] == 0


def test_the_queue_is_first_come_first_served_and_tickets_expire():
    b = LoadBalancer()
    t1, t2 = b.enqueue("t", expires_at=10.0), b.enqueue("t", expires_at=5.0)
    assert (b.ahead("t", t1, 0.0), b.ahead("t", t2, 0.0), b.ahead("t", None, 0.0)) == (0, 1, 2)
    assert b.ahead("t", None, 6.0) == 1  # t2's call gave up at 5 s: it holds no place after
    b.dequeue("t", t1)
    assert b.ahead("t", None, 6.0) == 0


def _capacity_tier(servers: dict, **resilience: object) -> dict:
    return {
        "providers": {n: {"kind": "vllm", "base_url": s.base_url, "queue_gauges": False} for n, s in servers.items()},
        "tiers": {"t": {"deployments": [{"id": f"{n}:m", "weight": 1} for n in servers]}},
        "pricing": {f"{n}:*": {"input_per_million": 0, "output_per_million": 0} for n in servers},
        "resilience": {"max_retries": 0, **resilience},
        "ledger": {"sink": "memory"},
    }


def test_calls_queue_when_every_deployment_is_full_and_the_wait_is_on_the_route_and_ledger():
    import concurrent.futures

    from llmroute.accounting.ledger import MemorySink

    with CapacityServer(slots=1, service_s=0.1) as a, CapacityServer(slots=1, service_s=0.1) as b:
        ledger = MemorySink()
        cfg = _capacity_tier({"a": a, "b": b}, max_concurrency=1, queue_timeout_s=30)
        with L.Client(config=cfg, ledger=ledger) as client:
            def call(_: int) -> L.Route:
                return client.chat.completions.create(model="t", messages=[{"role": "user", "content": "hi"}]).route

            with concurrent.futures.ThreadPoolExecutor(6) as pool:
                routes = list(pool.map(call, range(6)))
        # Two slots, six callers: at least four waited, none failed, each sent exactly once.
        assert sum(1 for r in routes if r.queued_s > 0) >= 4
        assert all(len(r.attempts) == 1 and r.attempts[0].status == "ok" for r in routes)
        assert a.served + b.served == 6 and max(a.served, b.served) <= 4
        rows = [r for r in ledger.records if r.queued_ms]
        assert len(rows) >= 4 and all(r.queued_ms > 0 for r in rows)


def test_a_queue_that_does_not_move_ends_in_a_typed_error():
    import concurrent.futures

    with CapacityServer(slots=1, service_s=1.5) as a:
        cfg = _capacity_tier({"a": a}, max_concurrency=1, queue_timeout_s=0.2)
        cfg["tiers"]["t"]["balance"] = "load"
        with L.Client(config=cfg) as client:
            def call(_: int) -> object:
                try:
                    return client.chat.completions.create(model="t", messages=[{"role": "user", "content": "hi"}])
                except L.QueueTimeoutError as exc:
                    return exc

            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                outcomes = list(pool.map(call, range(2)))
    errors = [o for o in outcomes if isinstance(o, L.QueueTimeoutError)]
    assert len(errors) == 1 and a.served == 1
    assert isinstance(errors[0], L.AllDeploymentsFailedError) and 0 < errors[0].queued_s <= 0.2
    assert "queued" in (errors[0].attempts[-1].note or "")


def test_health_prints_each_deployments_load_line():
    from llmroute.resilience.deployment_health import format_health, load_line

    b = LoadBalancer()
    _serve(b, "a:m", 0.0, 0.25)
    b.set_gauges("a:m", QueueGauges(running=3, waiting=2, kv_cache=0.5), 1.0)  # a queue: its batch holds 3
    b.gauge_failed("b:m", "metrics: HTTP 500")
    snap = b.snapshot(1.5)
    assert load_line(snap["a:m"]) == ("load: in flight 0; latency ~0.25s, capacity ~3; "
                                      "server running 3, waiting 2, KV cache 50%")
    assert load_line(snap["b:m"]).endswith("metrics: HTTP 500")
    from dataclasses import replace

    from llmroute.resilience.deployment_health import BreakerRegistry

    registry = BreakerRegistry()
    registry.breaker("a:m")
    table = format_health({d: replace(s, load=snap[d]) for d, s in registry.health(2.0).items()}, now=2.0)
    assert table.splitlines()[-1] == "   a:m: " + load_line(snap["a:m"])


def test_a_failing_scrape_changes_nothing_but_the_health_line():
    with CapacityServer(slots=2, service_s=0.01) as a, CapacityServer(slots=2, service_s=0.01) as b:
        a.fail_metrics = True
        cfg = _capacity_tier({"a": a, "b": b})
        for name in ("a", "b"):
            cfg["providers"][name].update(queue_gauges=True, metrics_interval_s=0.2)
        with L.Client(config=cfg) as client:
            deadline = time.monotonic() + 5
            while (a.metrics_reads < 1 or b.metrics_reads < 1) and time.monotonic() < deadline:
                time.sleep(0.02)
            routes = [client.chat.completions.create(model="t", messages=[{"role": "user", "content": "hi"}]).route
                      for _ in range(6)]
            health = client.health()
        assert all(r.attempts[0].status == "ok" for r in routes)
        assert health["a:m"].load["gauge_error"] == "metrics: HTTP 500"
        assert health["b:m"].load["gauge_error"] is None
