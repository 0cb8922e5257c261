"""Token buckets, bulkheads, and per-pool limits."""

from __future__ import annotations

import pytest

from llmroute.resilience.limits import Bulkhead, DeploymentLimits, TokenBucket, fits
from llmroute.resilience.policy import ResiliencePolicy


def test_token_bucket_starts_full_then_refills_at_its_rate():
    b = TokenBucket(60)  # one per second, burst of 60
    for _ in range(60):
        assert b.try_acquire(0.0) == 0.0
    assert b.try_acquire(0.0) == pytest.approx(1.0)
    assert b.try_acquire(0.5) == pytest.approx(0.5)  # a refused acquire takes nothing
    assert b.try_acquire(1.0) == 0.0
    assert b.available(1.0) == pytest.approx(0.0)


def test_token_bucket_amounts_and_oversized_requests():
    b = TokenBucket(6000, capacity=1000)  # 100 tokens/s
    assert b.try_acquire(0, 800) == 0.0
    assert b.try_acquire(0, 500) == pytest.approx(3.0)
    assert b.try_acquire(100, 5000) == 0.0  # larger than the bucket: goes when the bucket is full
    assert b.available(100) == pytest.approx(0.0)


def test_bulkhead():
    h = Bulkhead(2)
    assert h.try_acquire() and h.try_acquire() and not h.try_acquire()
    h.release()
    assert h.try_acquire()
    with pytest.raises(ValueError):
        Bulkhead(0)


def test_deployment_limits_grant_leases_and_say_how_long_to_wait():
    limits = DeploymentLimits(lambda pool, dep: ResiliencePolicy(max_concurrency=1, rpm=60, tpm=600))
    a = limits.try_acquire(0.0, "p:m", tokens=100)
    assert a.granted and a.lease is not None
    b = limits.try_acquire(0.0, "p:m", tokens=100)
    assert not b.granted and "concurrency" in b.reason
    limits.release(a.lease)
    limits.release(a.lease)  # a second release is ignored
    assert limits.in_flight("p:m") == 0
    c = limits.try_acquire(0.0, "p:m", tokens=600)  # 500 tokens left of 600
    assert not c.granted and "tokens-per-minute" in c.reason and c.wait_s == pytest.approx(10.0)
    assert limits.in_flight("p:m") == 0  # refused: took no slot


def test_pools_have_separate_capacity():
    pols = {
        "interactive": ResiliencePolicy(max_concurrency=1),
        "batch": ResiliencePolicy(max_concurrency=1),
    }
    limits = DeploymentLimits(lambda pool, dep: pols[pool])
    assert limits.try_acquire(0, "p:m", pool="batch").granted
    assert not limits.try_acquire(0, "p:m", pool="batch").granted
    assert limits.try_acquire(0, "p:m", pool="interactive").granted  # batch cannot use it up


def test_unlimited_by_default():
    limits = DeploymentLimits(lambda pool, dep: ResiliencePolicy())
    assert all(limits.try_acquire(0, "p:m", tokens=10**6).granted for _ in range(1000))


def test_fits_queue_timeout_and_deadline():
    assert fits(1.0, now=0, queued_since=0, queue_timeout_s=2, deadline_at=10)
    assert not fits(3.0, now=0, queued_since=0, queue_timeout_s=2, deadline_at=10)
    assert not fits(1.0, now=1.5, queued_since=0, queue_timeout_s=2, deadline_at=10)
    assert not fits(1.0, now=9.5, queued_since=9.5, queue_timeout_s=5, deadline_at=10)
