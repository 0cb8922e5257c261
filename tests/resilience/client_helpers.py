"""Shared by the client-level resilience tests: fault servers that stamp arrival times, and configs.

`TimedFaultServer` is the loopback fault server plus the monotonic time each request arrived, so a
test can check a wait (a Retry-After honoured, a half-open probe sent after `open_s`) from the
server's side with a generous tolerance, never by timing the client. `tier_config` builds a config
whose tier lists one deployment per server, every deployment priced at zero (strict pricing) and a
memory ledger; by default the breakers never trip and nothing is retried, so a test turns on only
the rule it studies.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Iterable, Sequence

from tests.servers.fault import FaultServer
from tests.servers.script import RecordedRequest

MODEL = "m"
TIER = "t"
MESSAGES = [{"role": "user", "content": "please say hello there"}]

# No retries, no breaker trips, no holds: each test turns on the rule it studies.
QUIET = {
    "max_retries": 0,
    "consecutive_failures": 10_000,
    "min_calls": 10_000,
    "open_on_retry_after": False,
    "backoff_base_s": 0.01,
    "backoff_max_s": 0.05,
}


class TimedFaultServer(FaultServer):
    """The fault server, recording `time.monotonic()` at each request's arrival (same process)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.arrivals: list[float] = []

    async def handle(self, request: RecordedRequest):  # type: ignore[override]
        if request.path.endswith("/chat/completions"):
            self.arrivals.append(time.monotonic())
        return await super().handle(request)

    def reset(self) -> None:
        super().reset()
        self.arrivals = []

    @property
    def calls(self) -> int:
        return len(self.arrivals)


def dep(name: str) -> str:
    return f"{name}:{MODEL}"


def tier_config(
    servers: dict[str, Any],
    *,
    deployments: Sequence[Any] | None = None,
    resilience: dict[str, Any] | None = None,
    tier: dict[str, Any] | None = None,
    tiers: dict[str, Any] | None = None,
    kind: str = "openai-compatible",
    providers: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """One provider per server (named by the dict key), tier `t` listing `<name>:m` for each in order.

    `deployments` replaces the tier's list (strings or tables); `tier` adds keys to tier `t`;
    `tiers` adds whole tiers; `resilience` is layered over QUIET; `providers` adds provider keys.
    """
    provs = {}
    for name, server in servers.items():
        base_url = server if isinstance(server, str) else server.base_url
        provs[name] = {"kind": kind, "base_url": base_url, **((providers or {}).get(name, {}))}
    tier_t = {"deployments": list(deployments) if deployments is not None else [dep(n) for n in servers]}
    tier_t.update(tier or {})
    return {
        "providers": provs,
        "tiers": {TIER: tier_t, **(tiers or {})},
        "resilience": {**QUIET, **(resilience or {})},
        "pricing": {f"{n}:*": {"input_per_million": 0, "output_per_million": 0} for n in servers},
        "ledger": {"sink": "memory"},
    }


def sent(route_or_attempts: Any) -> list[tuple[str, str]]:
    """(deployment, status) for each attempt of a route (or a list of attempts)."""
    attempts = getattr(route_or_attempts, "attempts", route_or_attempts)
    return [(a.deployment, a.status) for a in attempts]


def text_of(chunks: Iterable[Any]) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


MODES = ("sync", "sync-stream", "async", "async-stream")


class Result:
    """What one call gave the caller: the text it saw, the route, the completion (if it finished)."""

    def __init__(self, text: str, route: Any, completion: Any) -> None:
        self.text = text
        self.route = route
        self.completion = completion

    @property
    def deployment(self) -> str:
        return self.route.deployment


class Caller:
    """One client in one of MODES; `caller(**create_kwargs)` makes a call and returns a `Result`.

    The async modes keep one event loop for the caller's life, so the client's connection pool
    (bound to its loop) survives from call to call, as in a real program.
    """

    def __init__(self, mode: str, config: dict[str, Any]) -> None:
        import llmroute as L

        if mode not in MODES:
            raise ValueError(mode)
        self.mode = mode
        self.is_async = mode.startswith("async")
        self.stream = mode.endswith("stream")
        if self.is_async:
            self.loop = asyncio.new_event_loop()
            self.client: Any = self.loop.run_until_complete(self._make_async(L, config))
        else:
            self.loop = None
            self.client = L.Client(config=config)

    @staticmethod
    async def _make_async(L: Any, config: dict[str, Any]) -> Any:
        return L.AsyncClient(config=config)

    def __call__(self, **kwargs: Any) -> Result:
        kwargs.setdefault("model", TIER)
        kwargs.setdefault("messages", MESSAGES)
        if self.is_async:
            return self.loop.run_until_complete(self._acall(kwargs))  # type: ignore[union-attr]
        if not self.stream:
            completion = self.client.chat.completions.create(**kwargs)
            return Result(completion.choices[0].message.content or "", completion.route, completion)
        stream = self.client.chat.completions.create(stream=True, **kwargs)
        text = text_of(stream)
        return Result(text, stream.route, stream.response)

    async def _acall(self, kwargs: dict[str, Any]) -> Result:
        if not self.stream:
            completion = await self.client.chat.completions.create(**kwargs)
            return Result(completion.choices[0].message.content or "", completion.route, completion)
        stream = await self.client.chat.completions.create(stream=True, **kwargs)
        text = text_of([c async for c in stream])
        return Result(text, stream.route, stream.response)

    def health(self) -> dict[str, Any]:
        return self.client.health()

    def close(self) -> None:
        if self.is_async:
            self.loop.run_until_complete(self.client.aclose())  # type: ignore[union-attr]
            self.loop.close()  # type: ignore[union-attr]
        else:
            self.client.close()

    def __enter__(self) -> "Caller":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
