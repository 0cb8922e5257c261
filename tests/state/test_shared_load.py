"""Load-aware balancing across processes: with `[state] backend = "redis"` each process's in-flight
counts and estimates ride the breaker sync's round trip (no round trip on the call path), so another
process sees a deployment busy and sends its calls elsewhere. On a single Redis and on a three-node
Redis Cluster started by the test."""

from __future__ import annotations

import threading
import time

import pytest

import llmroute as L
from tests.servers.capacity import CapacityServer

MESSAGES = [{"role": "user", "content": "hi"}]


def _config(servers: dict, url: str, *, cluster: bool, deployments: list) -> dict:
    return {
        "providers": {n: {"kind": "vllm", "base_url": s.base_url, "queue_gauges": False} for n, s in servers.items()},
        "tiers": {"t": {"deployments": deployments, "balance": "load"}},
        "pricing": {f"{n}:*": {"input_per_million": 0, "output_per_million": 0} for n in servers},
        "resilience": {"max_retries": 0},
        "ledger": {"sink": "memory"},
        "state": {"backend": "redis", "url": url, "key_prefix": "load:", "cluster": cluster, "breaker_sync_s": 0.05,
                  "timeout_ms": 500},
    }


@pytest.mark.parametrize("kind", ["single", "cluster"])
def test_another_process_sees_the_calls_in_flight_and_goes_elsewhere(request, kind):
    url = request.getfixturevalue("redis_server" if kind == "single" else "redis_cluster").url
    with CapacityServer(slots=1, service_s=3.0) as a, CapacityServer(slots=1, service_s=0.05) as b:
        servers = {"a": a, "b": b}
        # The first "process" has only a:m in its tier; the second balances a:m and b:m.
        busy = L.Client(config=_config(servers, url, cluster=kind == "cluster", deployments=["a:m"]))
        other = L.Client(config=_config(servers, url, cluster=kind == "cluster",
                                        deployments=[{"id": "a:m", "weight": 1}, {"id": "b:m", "weight": 1}]))
        try:
            # Both measured, a:m twice as fast as b:m as far as the second client knows: it chooses a:m.
            a.service_s, b.service_s = 0.1, 0.3
            used = set()
            for _ in range(30):  # an unmeasured deployment ties with the best: it gets tried soon
                last = other.chat.completions.create(model="t", messages=MESSAGES).route
                used.add(last.deployment)
                if used == {"a:m", "b:m"} and last.deployment == "a:m":
                    break
            assert used == {"a:m", "b:m"} and last.deployment == "a:m", last.balance
            a.service_s, b.service_s = 3.0, 0.05
            threads = [threading.Thread(target=busy.chat.completions.create,
                                        kwargs={"model": "t", "messages": MESSAGES}) for _ in range(3)]
            for t in threads:
                t.start()
            deadline = time.monotonic() + 5
            seen = 0
            while time.monotonic() < deadline:
                seen = other.health()["a:m"].load["remote_in_flight"]
                if seen == 3:
                    break
                time.sleep(0.05)
            assert seen == 3  # the other process's three calls, read in the sync
            route = other.chat.completions.create(model="t", messages=MESSAGES).route
            assert route.deployment == "b:m", route.balance
            assert route.balance is not None and "a:m" in route.balance
            for t in threads:
                t.join(30)
        finally:
            busy.close()
            other.close()


@pytest.mark.parametrize("kind", ["single", "cluster"])
def test_a_new_process_starts_from_the_capacity_the_fleet_learned(request, kind):
    """Slow start (resilience/balance.py) is per process, but what one process learned ends it in the
    others: a process that saw a:m queue publishes its capacity; a new one adopts it at the next sync
    and holds no window there, while b:m, which nobody measured, is still in slow start."""
    import concurrent.futures

    url = request.getfixturevalue("redis_server" if kind == "single" else "redis_cluster").url
    with CapacityServer(slots=1, service_s=0.1) as a, CapacityServer(slots=1, service_s=0.1) as b:
        servers = {"a": a, "b": b}
        first = L.Client(config=_config(servers, url, cluster=kind == "cluster", deployments=["a:m"]))
        later: L.Client | None = None
        try:
            with concurrent.futures.ThreadPoolExecutor(3) as pool:  # three at once on one slot: two queue
                list(pool.map(lambda _: first.chat.completions.create(model="t", messages=MESSAGES), range(3)))
            assert first.health()["a:m"].load["window"] is None  # it saw the queue: the capacity is learned
            later = L.Client(config=_config(servers, url, cluster=kind == "cluster",
                                            deployments=[{"id": "a:m", "weight": 1}, {"id": "b:m", "weight": 1}]))
            deadline = time.monotonic() + 5
            while later.health()["a:m"].load["window"] is not None and time.monotonic() < deadline:
                time.sleep(0.05)
            loads = later.health()
            assert loads["a:m"].load["window"] is None and loads["a:m"].load["service_s"] is not None
            assert loads["b:m"].load["window"] == 1.0
            assert a.served == 3 and b.served == 0  # the new process learned it without a call
        finally:
            first.close()
            if later is not None:
                later.close()
