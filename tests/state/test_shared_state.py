"""Shared state in one process, two clients standing for two processes: refuse or fall back when Redis
is away, the fleet's breakers in `client.health()` and `llmroute health`, probes limited fleet-wide."""

from __future__ import annotations

import logging
import threading
import time

import pytest

import llmroute as L
from llmroute import errors as E
from llmroute.accounting.ledger_postgres import PostgresSink
from llmroute.cli.health import main as health_main
from tests.servers.fault import slow_ttft, status
from tests.state.servers import free_port

MESSAGES = [{"role": "user", "content": "hello"}]


def _config(server, redis_url, *, backup=None, resilience=None, state=None):
    providers = {"p": {"kind": "vllm", "base_url": server.base_url}}
    deployments = ["p:m"]
    if backup is not None:
        providers["b"] = {"kind": "vllm", "base_url": backup.base_url}
        deployments.append("b:m")
    return {
        "providers": providers,
        "tiers": {"chat": {"deployments": deployments}},
        "pricing": {f"{n}:*": {"input_per_million": 0, "output_per_million": 0} for n in providers},
        "resilience": {"max_retries": 0, **(resilience or {})},
        "ledger": {"sink": "memory"},
        "state": {"backend": "redis", "url": redis_url, "key_prefix": "s:", "timeout_ms": 200, **(state or {})},
    }


def test_refuse_mode_raises_a_typed_error_and_sends_nothing(make_server):
    server = make_server("fault")
    dead = f"redis://127.0.0.1:{free_port()}/0"
    cfg = _config(server, dead, resilience={"rpm": 100}, state={"on_unavailable": "refuse"})
    with L.Client(config=cfg) as client:
        with pytest.raises(L.SharedStateUnavailableError) as info:
            client.chat.completions.create(model="chat", messages=MESSAGES)
    assert "refuse" in str(info.value) and server.chat_requests() == []


def test_local_mode_goes_on_warns_once_and_health_says_so(make_server, caplog):
    server = make_server("fault")
    dead = f"redis://127.0.0.1:{free_port()}/0"
    cfg = _config(server, dead, resilience={"rpm": 100, "max_concurrency": 4}, state={"retry_interval_s": 60})
    caplog.set_level(logging.WARNING, logger="llmroute.state")
    with L.Client(config=cfg) as client:
        for _ in range(3):
            client.chat.completions.create(model="chat", messages=MESSAGES)
        view = client.health()
    assert len(server.chat_requests()) == 3
    shared = view.shared_state
    assert shared["available"] is False and shared["outages"] == 1 and shared["fallbacks"] >= 3
    assert sum("Redis unavailable" in m for m in caplog.messages) == 1
    assert set(view) == {"p:m"} and view["p:m"].state == "closed"


def test_health_shows_a_breaker_another_process_opened(make_server, redis_server, tmp_path, capsys):
    bad = make_server("fault")
    cfg = _config(bad, redis_server.url, resilience={"consecutive_failures": 2, "open_s": 60, "open_max_s": 60})
    bad.push(status(503), status(503))
    with L.Client(config=cfg) as opener:
        for _ in range(2):
            with pytest.raises(L.LLMRouteError) as opened:
                opener.chat.completions.create(model="chat", messages=MESSAGES)
        assert opener.health()["p:m"].state == "open"
    with L.Client(config=cfg) as fresh:  # another process: it never called p:m
        view = fresh.health()
        assert view["p:m"].state == "open" and "another process" in view["p:m"].reason
        with pytest.raises(L.InternalServerError) as held:  # the class that opened it, there: a 503
            fresh.chat.completions.create(model="chat", messages=MESSAGES)
        assert held.value.held and held.value.status_code == 503 and "another process" in str(held.value)
        assert type(held.value) is type(opened.value)
    assert len(bad.chat_requests()) == 2
    path = tmp_path / "llmroute.toml"
    path.write_text(
        f'[providers.p]\nkind = "vllm"\nbase_url = "{bad.base_url}"\n'
        f'[tiers.chat]\ndeployments = ["p:m"]\n'
        f'[pricing."p:*"]\ninput_per_million = 0\noutput_per_million = 0\n'
        f'[ledger]\nsink = "none"\n'
        f'[state]\nbackend = "redis"\nurl = "{redis_server.url}"\nkey_prefix = "s:"\n')
    assert health_main(["--config", str(path), "--no-probe"]) == 1  # unhealthy: p:m is open
    out = capsys.readouterr().out
    assert "p:m" in out and "open" in out and "shared state: Redis answering" in out
    # With shared state the default is the fleet's view: no probe is sent (a probe is a paid call).
    assert health_main(["--config", str(path)]) == 1
    out = capsys.readouterr().out
    assert "open" in out and "nothing probed (--probe sends probes)" in out
    assert len(bad.chat_requests()) == 2


def test_health_with_shared_state_probes_only_when_asked(make_server, redis_server, tmp_path, capsys):
    good = make_server("fault")
    path = tmp_path / "llmroute.toml"
    path.write_text(
        f'[providers.p]\nkind = "vllm"\nbase_url = "{good.base_url}"\n'
        f'[tiers.chat]\ndeployments = ["p:m"]\n'
        f'[pricing."p:*"]\ninput_per_million = 0\noutput_per_million = 0\n'
        f'[ledger]\nsink = "none"\n'
        f'[state]\nbackend = "redis"\nurl = "{redis_server.url}"\nkey_prefix = "q:"\n')
    assert health_main(["--config", str(path)]) == 0  # the fleet's view: closed, and nothing sent
    assert "nothing probed" in capsys.readouterr().out and good.chat_requests() == []
    assert health_main(["--config", str(path), "--probe"]) == 0
    out = capsys.readouterr().out
    assert "nothing probed" not in out and "1/1" in out and len(good.chat_requests()) == 1


def test_half_open_probes_are_limited_across_processes(make_server, redis_server):
    primary, backup = make_server("fault"), make_server("fault")
    cfg = _config(primary, redis_server.url, backup=backup,
                  resilience={"consecutive_failures": 1, "open_s": 0.5, "half_open_probes": 1})
    primary.push(status(503))
    with L.Client(config=cfg) as a, L.Client(config=cfg) as b:
        assert a.chat.completions.create(model="chat", messages=MESSAGES).route.deployment == "b:m"  # tripped
        time.sleep(0.8)  # open period over: both breakers are half-open
        primary.push(slow_ttft(1.0))
        probe = threading.Thread(target=lambda: a.chat.completions.create(model="chat", messages=MESSAGES))
        probe.start()
        deadline = time.time() + 5
        while len(primary.chat_requests()) < 2 and time.time() < deadline:
            time.sleep(0.01)
        other = b.chat.completions.create(model="chat", messages=MESSAGES)  # the fleet's one probe is out
        probe.join()
    assert other.route.deployment == "b:m" and other.route.attempts[0].status == "skipped"
    assert len(primary.chat_requests()) == 2  # the failed call and a's probe; none from b


def test_config_errors_name_the_key():
    base = {"providers": {}, "tiers": {}}
    with pytest.raises(L.ConfigError) as info:
        L.Client(config={**base, "state": {"backend": "redis"}})
    assert info.value.key == "state" and "url" in str(info.value)
    with pytest.raises(L.ConfigError) as info:
        L.Client(config={**base, "state": {"backend": "redis", "url": "http://127.0.0.1:6379"}})
    assert "redis://" in str(info.value)
    with pytest.raises(L.ConfigError) as info:
        L.Client(config={**base, "state": {"backend": "memcached"}})
    assert info.value.key == "state.backend"


def test_database_password_never_shows(tmp_path):
    sink = PostgresSink("postgresql://app:s3cret-pw@127.0.0.1:1/db", spool_path=tmp_path / "s.db")
    assert "s3cret-pw" not in repr(sink)


def test_a_call_longer_than_the_lease_keeps_its_slot(make_server, redis_server):
    server = make_server("fault")
    cfg = _config(server, redis_server.url, resilience={"max_concurrency": 1, "queue_timeout_s": 0.1},
                  state={"lease_s": 0.6})
    server.push(slow_ttft(2.0))
    with L.Client(config=cfg) as a, L.Client(config=cfg) as b:
        slow = threading.Thread(target=lambda: a.chat.completions.create(model="chat", messages=MESSAGES))
        slow.start()
        deadline = time.time() + 5
        while not server.chat_requests() and time.time() < deadline:
            time.sleep(0.01)
        time.sleep(1.0)  # past the lease: renewed by a's process, so still held
        with pytest.raises(L.AllDeploymentsFailedError) as info:
            b.chat.completions.create(model="chat", messages=MESSAGES)
        slow.join()
        assert "concurrency limit" in str(info.value)
        assert b.chat.completions.create(model="chat", messages=MESSAGES).route.deployment == "p:m"  # released


def test_async_client_shares_limits_and_budgets_with_a_sync_client(make_server, redis_server):
    import asyncio

    server = make_server("fault")
    cfg = _config(server, redis_server.url, resilience={"rpm": 3, "queue_timeout_s": 0})
    cfg["budgets"] = [{"name": "d", "max_tokens": 10_000}]

    async def three() -> list:
        async with L.AsyncClient(config=cfg) as client:
            return [await client.chat.completions.create(model="chat", messages=MESSAGES) for _ in range(3)]

    assert len(asyncio.run(three())) == 3
    with L.Client(config=cfg) as sync_client:  # the bucket's 3 requests are spent fleet-wide
        with pytest.raises(L.AllDeploymentsFailedError) as info:
            sync_client.chat.completions.create(model="chat", messages=MESSAGES)
    assert "requests-per-minute" in str(info.value) and len(server.chat_requests()) == 3


def _evalsha_count(url: str) -> int:
    import redis

    with redis.Redis.from_url(url) as r:
        stats = r.info("commandstats")
    return sum(v["calls"] for k, v in stats.items() if k in ("cmdstat_evalsha", "cmdstat_eval"))


@pytest.mark.parametrize("with_limits, with_budget", [(True, False), (False, True), (True, True)])
def test_round_trips_before_sending(make_server, redis_server, with_limits, with_budget):
    """One script call before sending: for limits, for a matching budget, or for both together
    (the budget reserved and the limits taken by one script); breakers none."""
    server = make_server("fault")
    limits = {"rpm": 10_000, "max_concurrency": 10} if with_limits else {}
    cfg = _config(server, redis_server.url, resilience=limits)
    if with_budget:
        cfg["budgets"] = [{"name": "d", "max_tokens": 10_000_000}]
    with L.Client(config=cfg) as client:
        client.chat.completions.create(model="chat", messages=MESSAGES)  # scripts loaded
        before = _evalsha_count(redis_server.url)
        for _ in range(5):
            client.chat.completions.create(model="chat", messages=MESSAGES)
        assert _evalsha_count(redis_server.url) - before == 5


def test_health_percentiles_are_the_fleets(make_server, redis_server):
    server = make_server("fault")
    cfg = _config(server, redis_server.url, state={"breaker_sync_s": 0.1})
    with L.Client(config=cfg) as a, L.Client(config=cfg) as b:
        for _ in range(3):
            a.chat.completions.create(model="chat", messages=MESSAGES)
        time.sleep(0.4)  # a's sync pushed its samples
        snap = b.health()["p:m"]  # b made no call
        assert snap.p50_latency_s is not None and snap.calls_in_window == 0
        assert a.health()["p:m"].p95_latency_s == snap.p95_latency_s


def test_budget_and_limits_in_one_script_keep_their_verdicts(make_server, redis_server):
    """The one script before sending: a refusing budget takes no limit and raises; a downgrading
    budget takes no limit on the routed tier and the call goes to the cheaper tier; a limit that
    refuses after the budget allowed still moves on (the reservation is taken back at the end)."""
    import redis

    main, small = make_server("fault"), make_server("fault")
    cfg = _config(main, redis_server.url, backup=small, resilience={"rpm": 1, "max_concurrency": 2,
                                                                    "queue_timeout_s": 0})
    cfg["tiers"] = {"chat": {"deployments": ["p:m"]}, "small": {"deployments": ["b:m"]}}
    rpm_key = "s:{limits:interactive:%s}:rpm"
    r = redis.Redis.from_url(redis_server.url)

    refusing = {**cfg, "budgets": [{"name": "tiny", "max_tokens": 1}]}
    with L.Client(config=refusing) as client:
        with pytest.raises(L.BudgetExceededError) as info:
            client.chat.completions.create(model="chat", messages=MESSAGES)
    assert info.value.budget == "tiny" and main.chat_requests() == []
    assert not r.exists(rpm_key % "p:m") and not r.exists(rpm_key % "b:m")

    downgrading = {**cfg, "budgets": [{"name": "d", "max_tokens": 1, "action": "downgrade",
                                       "downgrade_tier": "small"}]}
    with L.Client(config=downgrading) as client:
        out = client.chat.completions.create(model="chat", messages=MESSAGES)
    assert out.route.tier == "small" and out.route.deployment == "b:m"
    assert not r.exists(rpm_key % "p:m") and r.exists(rpm_key % "b:m") and main.chat_requests() == []

    allowing = {**cfg, "budgets": [{"name": "big", "max_tokens": 10_000_000}]}
    with L.Client(config=allowing) as client:
        client.chat.completions.create(model="chat", messages=MESSAGES)
        with pytest.raises(L.AllDeploymentsFailedError) as failed:  # rpm = 1: the bucket is empty
            client.chat.completions.create(model="chat", messages=MESSAGES)
        assert "requests-per-minute" in str(failed.value) and len(main.chat_requests()) == 1
    # closing the client sent the settlements: the spend, and the reservations taken back
    counters = [k for k in r.keys("s:{budgets}:big*")]
    assert len(counters) == 1
    spent = int(r.get(counters[0]))
    assert 0 < spent < 1000  # the first call's tokens only: the refused call's reservation came back
    assert not r.zcard("s:{limits:interactive:p:m}:slots")  # both slots released


@pytest.mark.parametrize("balance", ["weighted", "load"])
def test_the_first_deployment_is_predicted_among_weighted_ones(make_server, redis_server, balance):
    """Weighted deployments: the plan's first choice (random by weight, or by load) is the one whose
    limits the budget script took (one script per call, every slot back). The order is drawn once,
    by the admission, and the plan takes it as drawn.

    This test used to fail 1 run in 3 with 14 scripts: calls to the loopback server take ~2 ms, the
    background ZREM of a released slot is batched every 10 ms, so five calls in a row found their own
    process's five finished calls still holding `max_concurrency = 5` slots; the refused admission cost
    a second script. The admission script now removes this process's released slots first."""
    import redis

    a, b = make_server("fault"), make_server("fault")
    prefix = f"predicted-{balance}:"
    cfg = _config(a, redis_server.url, backup=b, resilience={"max_concurrency": 5}, state={"key_prefix": prefix})
    cfg["tiers"] = {"chat": {"deployments": [{"id": "p:m", "weight": 1}, {"id": "b:m", "weight": 1}],
                             "balance": balance}}
    cfg["budgets"] = [{"name": "d", "max_tokens": 10_000_000}]
    with L.Client(config=cfg) as client:
        client.chat.completions.create(model="chat", messages=MESSAGES)  # scripts loaded
        before = _evalsha_count(redis_server.url)
        routes = [client.chat.completions.create(model="chat", messages=MESSAGES).route for _ in range(12)]
        assert _evalsha_count(redis_server.url) - before == 12
    used = {route.deployment for route in routes}
    if balance == "weighted":
        assert used == {"p:m", "b:m"}
    else:  # one call at a time: the lowest expected delay, each time said on the route
        assert used <= {"p:m", "b:m"} and all(r.balance and r.balance.startswith(f"load: {r.deployment} ")
                                               for r in routes)
    r = redis.Redis.from_url(redis_server.url)
    assert all(r.zcard(f"{prefix}{{limits:interactive:{d}}}:slots") == 0 for d in ("p:m", "b:m"))


def test_an_admission_the_plan_did_not_use_is_given_back(redis_server):
    import redis

    from llmroute.resilience.limits import DeploymentLimits
    from llmroute.resilience.policy import ResiliencePolicy
    from llmroute.state import Fleet, StateConfig
    from llmroute.state.admission import PreAdmitted

    fleet = Fleet(StateConfig(backend="redis", url=redis_server.url, key_prefix="u:"))
    limits = fleet.shared_limits(DeploymentLimits(lambda pool, dep: ResiliencePolicy(max_concurrency=1)))
    items = [(fleet.budgets.key("d", (), (2026, 1, 1)), 10**9, 10, "refuse")]
    r = redis.Redis.from_url(redis_server.url)
    slots = "u:{limits:interactive:%s}:slots"
    try:
        for other in ("x:m", None):  # the plan asks for another deployment; the call ends first
            req = limits.request("p:m", tokens=10)
            reply = fleet.budgets.reserve(items, 60, reserve=True, admit=req)[3]
            view = PreAdmitted(limits, req, limits.admission(req, reply))
            assert r.zcard(slots % "p:m") == 1
            if other is not None:
                assert view.try_acquire(0.0, other, tokens=10).granted
            view.discard()
            deadline = time.monotonic() + 2
            while r.zcard(slots % "p:m") and time.monotonic() < deadline:
                time.sleep(0.01)  # the release is sent by the background thread
            assert r.zcard(slots % "p:m") == 0
        assert r.zcard(slots % "x:m") == 1  # the other deployment's admission is the plan's to release
    finally:
        fleet.close()


@pytest.mark.parametrize("error, field", [
    (E.RateLimitError("slow down", status=429), "RateLimitError|429"),
    (E.APIConnectionError("refused"), "APIConnectionError|"),
    (ValueError("not a platform's error"), ""),
    (None, ""),
])
def test_the_fleet_is_told_the_class_and_status_of_what_opened_a_breaker(error, field):
    from llmroute.state.breakers import cause_field, cause_from_field
    assert cause_field(error) == field
    rebuilt = cause_from_field(field, "opened by another process: 2 failures", "p:m")
    if not field:
        assert rebuilt is None
    else:
        assert type(rebuilt) is type(error) and rebuilt.status == error.status and rebuilt.deployment == "p:m"
        assert "slow down" not in str(rebuilt) and "another process" in str(rebuilt)
    for unknown in ("NoSuchError|500", "Exception|500", "LLMRouteError|", "RateLimitError|x"):
        got = cause_from_field(unknown, "r", "p:m")
        assert got is None or (type(got) is E.RateLimitError and got.status is None)
