"""Reads self-hosted servers' queue gauges (Prometheus `/metrics`) on a background thread, off the request path.

One daemon thread per client, started only when a deployment has gauges to read (`queue_gauges`;
by default, vllm, sglang and tgi deployments of a tier balanced by load). Each server (metrics URL) is read every
`metrics_interval_s` with a timeout of half that (at most 2 s); what it reads goes to the
`LoadBalancer` (`set_gauges`) for every deployment on that server. A scrape that fails or times
out changes nothing but the deployment's health line (`gauge_failed`), and the next one waits
twice as long (up to 30 s) until one succeeds; the last gauges age out of the estimate on their own.

Each read goes through the one send path (`_http/exchange.py`: its timeouts, a 2 MiB read cap, typed
errors) on a transport of the scraper's own (its own connections, never the calls'). It must never sit
on a call's path, send credentials (the metrics endpoint is read without the provider's key), or
follow redirects.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from llmroute._http.bounded import ReadLimits
from llmroute._http.exchange import Exchange, fetch
from llmroute._http.request import HttpRequest
from llmroute._http.timeouts import Timeouts
from llmroute._http.transport import SyncTransport
from llmroute._runtime.forksafe import renew_at_fork
from llmroute.resilience.gauges import GAUGE_KINDS, parse_gauges

__all__ = ["GaugeScraper", "start_gauge_scraper", "metrics_targets"]

log = logging.getLogger("llmroute.gauges")

MAX_BACKOFF_S = 30.0
METRICS_LIMITS = ReadLimits(max_response_bytes=2 * 1024 * 1024, max_decoded_bytes=2 * 1024 * 1024)


@dataclass
class _Target:
    url: str
    interval_s: float
    deployments: list[str] = field(default_factory=list)
    next_at: float = 0.0
    backoff_s: float = 0.0


def metrics_targets(config: Any) -> list[_Target]:
    """Every metrics URL to read, with the deployments it speaks for: a provider's deployments in a
    tier with `balance = "load"` (the gauges feed that estimate), or any with `queue_gauges = true`."""
    by_url: dict[str, _Target] = {}
    balanced = {d.id for t in config.tiers.values() if t.balance == "load"
                for deps in (t.deployments, *t.pools.values()) for d in deps}
    for dep in config.all_deployments():
        p = dep.provider
        cfg = p.config
        enabled = cfg.queue_gauges if cfg.queue_gauges is not None else (
            p.kind in GAUGE_KINDS and dep.id in balanced)
        if not enabled:
            continue
        url = cfg.metrics_url
        if url is None:
            parts = urlsplit(p.base_url)
            url = f"{parts.scheme}://{parts.netloc}/metrics"
        target = by_url.setdefault(url, _Target(url, cfg.metrics_interval_s))
        target.interval_s = min(target.interval_s, cfg.metrics_interval_s)
        if dep.id not in target.deployments:
            target.deployments.append(dep.id)
    return list(by_url.values())


class GaugeScraper:
    """The thread that reads every target in turn and feeds the balancer."""

    def __init__(self, targets: list[_Target], balancer: Any, *, clock: Any = time.monotonic) -> None:
        self.targets = targets
        self.balancer = balancer
        self._clock = clock
        self._stop = threading.Event()
        self._transport = SyncTransport()
        self.scrapes = 0
        self.failures = 0
        self._thread = threading.Thread(target=self._loop, name="llmroute-gauges", daemon=True)
        self._thread.start()
        renew_at_fork(self, "_stop")

    def _after_fork_in_child(self) -> None:
        """A forked child reads the gauges on a thread (and connections) of its own."""
        if not self._stop.is_set():
            self._transport = SyncTransport()
            self._thread = threading.Thread(target=self._loop, name="llmroute-gauges", daemon=True)
            self._thread.start()

    def scrape(self, target: _Target) -> None:
        """Read one target now (the thread's step; tests call it directly)."""
        now = self._clock()
        timeout = min(2.0, max(0.05, target.interval_s / 2))
        reason: str | None = None
        request = HttpRequest("GET", target.url, {}, None, False)
        limits = Timeouts(connect_s=timeout, ttft_s=timeout, total_s=timeout, read_s=timeout, read_kind="total")
        ex = Exchange(request, limits, METRICS_LIMITS, provider="llmroute-gauges", deployment=target.url,
                      max_connections=1)
        try:
            reply = fetch(self._transport, ex)
            if reply.status != 200:
                reason = f"metrics: HTTP {reply.status}"
            else:
                gauges = parse_gauges(reply.body.decode("utf-8", "replace"))
                if gauges is None:
                    reason = "metrics: no known queue gauge"
                else:
                    for dep in target.deployments:
                        self.balancer.set_gauges(dep, gauges, self._clock())
        except Exception as exc:  # noqa: BLE001 - a typed ProviderError or anything else: only the health line changes
            reason = f"metrics: {type(exc).__name__}"
        self.scrapes += 1
        if reason is None:
            target.backoff_s = 0.0
            target.next_at = now + target.interval_s
            return
        self.failures += 1
        for dep in target.deployments:
            self.balancer.gauge_failed(dep, reason)
        target.backoff_s = min(MAX_BACKOFF_S, max(target.interval_s, target.backoff_s * 2))
        target.next_at = now + target.backoff_s

    def _loop(self) -> None:
        while not self._stop.is_set():
            now = self._clock()
            due = [t for t in self.targets if t.next_at <= now]
            for target in due:
                if self._stop.is_set():
                    return
                self.scrape(target)
            wake = min(t.next_at for t in self.targets) - self._clock()
            self._stop.wait(max(0.01, wake))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._transport.close()


def start_gauge_scraper(config: Any, balancer: Any) -> GaugeScraper | None:
    """A running scraper, or None when no deployment has gauges to read."""
    targets = metrics_targets(config)
    return GaugeScraper(targets, balancer) if targets else None
