"""Traffic pools: batch traffic has its own deployments and limits, and cannot use up interactive capacity."""

from __future__ import annotations

import threading

import pytest

from llmroute import Client, ConfigError, InvalidRequestError
from tests.servers.fault import slow_headers

MESSAGES = [{"role": "user", "content": "hello"}]


def config(inter, batch, **extra):
    cfg = {
        "providers": {"i": {"kind": "vllm", "base_url": inter.base_url},
                      "b": {"kind": "vllm", "base_url": batch.base_url}},
        "tiers": {"small": {"deployments": ["i:m"], "pools": {"batch": ["b:m"]}}},
        "pricing": {"i:*": {"input_per_million": 0, "output_per_million": 0},
                    "b:*": {"input_per_million": 0, "output_per_million": 0}},
        "ledger": {"sink": "memory"},
    }
    cfg.update(extra)
    return cfg


@pytest.fixture
def pair(make_server):
    return make_server("fault"), make_server("fault")


def test_batch_pool_uses_its_own_deployments(pair):
    inter, batch = pair
    with Client(config=config(inter, batch)) as client:
        a = client.chat.completions.create(model="small", messages=MESSAGES)
        b = client.chat.completions.create(model="small", messages=MESSAGES, pool="batch")
    assert a.route.deployment == "i:m" and a.route.pool == "interactive"
    assert b.route.deployment == "b:m" and b.route.pool == "batch"
    assert len(inter.chat_requests()) == 1 and len(batch.chat_requests()) == 1


def test_a_saturated_batch_pool_leaves_interactive_capacity(pair):
    inter, _ = pair
    # One deployment serves both pools; batch may hold one request at a time and must not queue long.
    cfg = config(inter, inter, pools={"batch": {"max_concurrency": 1, "queue_timeout_s": 0.05}})
    cfg["tiers"] = {"small": {"deployments": ["i:m"]}}
    inter.push(slow_headers(1.0))
    with Client(config=cfg) as client:
        errors = []

        def slow_batch():
            try:
                client.chat.completions.create(model="small", messages=MESSAGES, pool="batch")
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)

        holder = threading.Thread(target=slow_batch)
        holder.start()
        while not inter.chat_requests():
            threading.Event().wait(0.01)
        with pytest.raises(Exception) as refused:  # the second batch call finds the bulkhead full
            client.chat.completions.create(model="small", messages=MESSAGES, pool="batch")
        interactive = client.chat.completions.create(model="small", messages=MESSAGES)
        holder.join(10)
    assert not errors
    assert "batch" in str(refused.value) and "concurrency" in str(refused.value)
    assert interactive.route.pool == "interactive" and interactive.choices[0].message.content


def test_unknown_pool_is_refused(pair):
    inter, batch = pair
    with Client(config=config(inter, batch)) as client:
        with pytest.raises(InvalidRequestError, match="unknown pool 'bulk'"):
            client.chat.completions.create(model="small", messages=MESSAGES, pool="bulk")


def test_pool_config_mistakes(pair):
    inter, batch = pair
    with pytest.raises(ConfigError, match=r"pools\.batch\.colour: unknown key"):
        Client(config=config(inter, batch, pools={"batch": {"colour": 1}}))
    with pytest.raises(ConfigError, match=r"pools\.batch\.max_concurrency"):
        Client(config=config(inter, batch, pools={"batch": {"max_concurrency": 0}}))
    with pytest.raises(ConfigError, match=r"routing\.rules\[0\]\.pool: unknown pool 'bulk'"):
        Client(config=config(inter, batch, routing={"rules": [{"when": {"feature": "x"}, "tier": "small",
                                                                "pool": "bulk"}], "default": "small"}))
