"""One process's connection to the shared state in Redis, and what it does when Redis is away.

`SharedState.run(fn)` runs `fn(client)` (one command, script or pipeline: one round trip) under the
`[state] timeout_ms` bound. When Redis does not answer, the outage starts: one WARNING, `outages`
counts it, and every call until `retry_interval_s` has passed gets `Unavailable` at once (no wait),
so the callers use their local state (`on_unavailable = "local"`) or refuse. The first command that
succeeds after that ends the outage (logged). `fallbacks` counts the operations served locally.

Keys: `<key_prefix>{<scope>}:<name>`; the braces are a Redis Cluster hash tag, so the keys one
script touches always live in one slot. redis-py is imported on first use, never at import.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, TypeVar

from llmroute import errors as E
from llmroute._runtime.forksafe import renew_at_fork
from llmroute.state.backend import StateConfig

__all__ = ["SharedState", "Unavailable"]

log = logging.getLogger("llmroute.state")

T = TypeVar("T")


class Unavailable(Exception):
    """Redis did not answer (down, slow past the timeout, or in a known outage)."""


class SharedState:
    """A Redis client with an outage switch. Thread-safe."""

    def __init__(self, config: StateConfig, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.prefix = config.key_prefix
        self._clock = clock
        self._lock = threading.Lock()
        self._client: Any = None
        self._down_since: float | None = None
        self._retry_at = 0.0
        self.outages = 0
        self.fallbacks = 0
        self.last_error: str | None = None
        self._scripts: dict[str, Any] = {}
        renew_at_fork(self, "_lock")  # redis-py gives a forked child new connections itself

    # -- keys ---------------------------------------------------------------------------------
    def key(self, scope: str, name: str) -> str:
        return f"{self.prefix}{{{scope}}}:{name}"

    # -- connection ---------------------------------------------------------------------------
    def _connect(self) -> Any:
        if self._client is None:
            try:
                import redis
            except ImportError as exc:  # pragma: no cover - depends on the extra
                raise ImportError('[state] backend = "redis" needs redis-py: pip install "llmroute[redis]"') from exc
            from redis.backoff import NoBackoff
            from redis.retry import Retry

            url = self.config.url
            assert url is not None  # StateConfig requires it with backend = "redis"
            timeout = self.config.timeout_ms / 1000.0
            # No client-side retries: the timeout is the whole bound, the outage switch does the rest.
            # RESP2: redis-py parses it with a fraction of RESP3's CPU (measured in state_overhead.py).
            kw = dict(socket_timeout=timeout, socket_connect_timeout=timeout, retry_on_timeout=False,
                      health_check_interval=0, retry=Retry(NoBackoff(), 0), protocol=2)
            if self.config.cluster:
                from redis.cluster import RedisCluster

                self._client = RedisCluster.from_url(url, **kw)
            else:
                self._client = redis.Redis.from_url(url, **kw)
        return self._client

    def script(self, name: str, source: str) -> Any:
        """A registered Lua script (EVALSHA, loaded on first NOSCRIPT)."""
        with self._lock:
            s = self._scripts.get(name)
            if s is None:
                s = self._scripts[name] = self._connect().register_script(source)
            return s

    @property
    def available(self) -> bool:
        return self._down_since is None

    def status(self) -> dict[str, Any]:
        """What health shows: backend, whether Redis answers, outages and local fallbacks so far."""
        return {
            "backend": "redis",
            "available": self.available,
            "outages": self.outages,
            "fallbacks": self.fallbacks,
            "down_for_s": None if self._down_since is None else round(self._clock() - self._down_since, 3),
            "last_error": self.last_error,
            "on_unavailable": self.config.on_unavailable,
        }

    def run(self, fn: Callable[[Any], T]) -> T:
        """`fn(client)` or `Unavailable`; marks outages and recoveries."""
        now = self._clock()
        if self._down_since is not None and now < self._retry_at:
            raise Unavailable(self.last_error or "redis unavailable")
        try:
            import redis

            client = self._connect()
            result = fn(client)
        except (ImportError, TypeError, ValueError):
            raise
        except Exception as exc:  # redis.ConnectionError, TimeoutError, ResponseError (e.g. LOADING)
            if isinstance(exc, redis.ResponseError) and "NOSCRIPT" not in str(exc) and "LOADING" not in str(exc) \
                    and "BUSY" not in str(exc) and "MASTERDOWN" not in str(exc):
                raise  # a bug in a script: not an outage
            self._mark_down(now, exc)
            raise Unavailable(self.last_error or "redis unavailable") from None
        if self._down_since is not None:
            with self._lock:
                if self._down_since is not None:
                    log.warning("shared state: Redis is back after %.1fs; using shared limits, budgets and breakers "
                                "again", now - self._down_since)
                    self._down_since = None
        return result

    def _mark_down(self, now: float, exc: BaseException) -> None:
        with self._lock:
            self.last_error = f"{type(exc).__name__}: {str(exc)[:200]}"
            self._retry_at = now + self.config.retry_interval_s
            if self._down_since is None:
                self._down_since = now
                self.outages += 1
                how = "per-process state" if self.config.on_unavailable == "local" else "refusing calls"
                log.warning("shared state: Redis unavailable (%s); %s until it answers again", self.last_error, how)

    def fallback(self, what: str) -> None:
        """Note one operation served without Redis; raises when `on_unavailable = "refuse"`."""
        with self._lock:
            self.fallbacks += 1
        if self.config.on_unavailable == "refuse":
            raise E.SharedStateUnavailableError(
                f"shared state (Redis) unavailable for {what} and [state] on_unavailable = \"refuse\"; "
                f"nothing was sent ({self.last_error or 'no answer'})")

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
            self._scripts.clear()
        if client is not None:
            try:
                client.close()
            except Exception:  # noqa: BLE001
                pass
