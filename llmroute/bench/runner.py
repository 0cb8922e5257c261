"""The load generator: sends requests to each target at each load level and collects records.

Per target, in order: one request on its own (the cold first request, reported apart), then
for each level: warm-up requests (excluded from the figures), then the measured phase, bounded by
a request count or a duration, whichever comes first.
- closed loop (`concurrency`): N workers, each sending its next request when the last ends;
- open loop (`rate`): Poisson arrivals from a seeded rng, each waiting for a slot under a
  concurrency cap; the wait is recorded (`queue_s`) and kept out of the latencies.

The runner never talks to a platform itself: it calls a `SendFn` (one request in, one
`RequestRecord` out). `client_send()` builds that function over llmroute's `AsyncClient`; tests
inject their own. Latency arithmetic lives in `stats.StreamTiming`; this module only reads the
clock and schedules. It must never swallow `CancelledError` nor let one request's error stop a run.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import random
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterator, Mapping, Sequence, TextIO

from llmroute.errors import AllDeploymentsFailedError, ConfigError, InvalidRequestError, LLMRouteError, RoutingError
from llmroute.bench.stats import RequestRecord, StreamTiming, percentile
from llmroute.accounting.tokens import count_message_tokens, count_text_tokens
from llmroute.bench.workload import Prompt

if TYPE_CHECKING:
    from llmroute.client import AsyncClient

__all__ = [
    "SendFn",
    "LoadPlan",
    "LevelRun",
    "BenchRun",
    "ProgressMeter",
    "run_bench",
    "client_send",
    "error_fields",
    "poisson_schedule",
]

Clock = Callable[[], float]
# One request: (target, prompt, max_tokens) -> its record, with start_s on the runner's clock.
SendFn = Callable[[str, Prompt, int], Awaitable[RequestRecord]]

# Errors that no load level can fix (a target naming nothing, a broken config): `client_send`
# raises them and the run stops at once instead of recording thousands of them.
_FATAL = (RoutingError, ConfigError, InvalidRequestError)


@dataclass
class LoadPlan:
    """What to run. Exactly one of `concurrency` (closed loop) and `rates` (open loop) is set."""

    targets: Sequence[str]
    concurrency: Sequence[int] | None = None
    rates: Sequence[float] | None = None
    max_concurrency: int = 100  # the cap on requests in flight in open-loop mode
    requests: int | None = None  # measured requests per level
    duration_s: float | None = None  # measured time per level
    warmup: int | None = None  # per level; None: one per concurrency slot (open loop: ~1 s of arrivals)
    max_tokens: int = 200
    seed: int = 0
    first_request: bool = True
    grace_s: float = 60.0  # after the deadline, how long in-flight requests may finish

    def __post_init__(self) -> None:
        if (self.concurrency is None) == (self.rates is None):
            raise ConfigError("give either concurrency levels or request rates, not both", key="--concurrency/--rate")
        if not self.targets:
            raise ConfigError("at least one target is needed", key="--target")
        if self.requests is None and self.duration_s is None:
            raise ConfigError("bound each level with a request count or a duration", key="--requests/--duration")
        if self.requests is not None and self.requests <= 0:
            raise ConfigError("must be positive", key="--requests")
        if self.max_concurrency <= 0:
            raise ConfigError("must be positive", key="--max-concurrency")
        if self.warmup is not None and self.warmup < 0:
            raise ConfigError("must be zero or more", key="--warmup")

    @property
    def mode(self) -> str:
        return "concurrency" if self.concurrency is not None else "rate"

    def levels(self) -> list[float]:
        levels: Sequence[float] | None = self.concurrency if self.concurrency is not None else self.rates
        assert levels is not None  # check(): exactly one of the two is set
        return list(levels)

    def warmup_for(self, level: float) -> int:
        if self.warmup is not None:
            return self.warmup
        if self.mode == "concurrency":
            return int(level)
        return min(self.max_concurrency, max(1, round(level)))


@dataclass
class LevelRun:
    """One target at one level: where its measurement window lies and what the generator saw."""

    target: str
    mode: str
    level: float
    window_start_s: float
    window_end_s: float
    cancelled: int = 0  # still running when the grace period after the deadline ran out
    dispatch_lag_s: list[float] = field(default_factory=list)  # open loop: late arrivals
    stopped_by: str = ""  # "requests" | "duration"


@dataclass
class BenchRun:
    plan: LoadPlan
    records: list[RequestRecord] = field(default_factory=list)
    levels: list[LevelRun] = field(default_factory=list)
    started_at: float = field(default_factory=time.time)  # wall clock, for the report only


class ProgressMeter:
    """Live progress for one level, as a line at most every `every_s` seconds. Sans-I/O."""

    def __init__(self, target: str, label: str, start: float, *, every_s: float = 1.0, window: int = 500,
                 total: int | None = None, duration_s: float | None = None, levels_after: int = 0) -> None:
        self.target = target
        self.label = label
        self.start = start
        self.every_s = every_s
        # For the ETA: this level's bounds (requests, seconds) and how many levels follow it in the run.
        self.total = total
        self.duration_s = duration_s
        self.levels_after = levels_after
        self.done = 0
        self.errors = 0
        self.recent_ttft: list[float] = []
        self.window = window
        self._last_line_at: float | None = None

    def add(self, record: RequestRecord) -> None:
        self.done += 1
        if not record.ok:
            self.errors += 1
        elif record.ttft_s is not None:
            self.recent_ttft.append(record.ttft_s)
            if len(self.recent_ttft) > 2 * self.window:
                del self.recent_ttft[: -self.window]

    def line(self, now: float, *, force: bool = False) -> str | None:
        if not force and self._last_line_at is not None and now - self._last_line_at < self.every_s:
            return None
        self._last_line_at = now
        elapsed = max(now - self.start, 0.0)
        p95 = percentile(self.recent_ttft[-self.window:], 95)
        rate = self.done / elapsed if elapsed > 0 else 0.0
        ttft = f"{p95 * 1000:.0f} ms" if p95 is not None else "-"
        eta = self.eta_s(now)
        eta_text = "" if eta is None else f"  ETA {_clock_text(eta[0])}" + (
            f" (run ~{_clock_text(eta[1])})" if self.levels_after else "")
        done = f"{self.done}/{self.total}" if self.total is not None else str(self.done)
        return (f"{self.target} {self.label}  {_clock_text(elapsed)}  "
                f"done {done}  errors {self.errors}  {rate:.1f} req/s  p95 TTFT {ttft}{eta_text}")

    def eta_s(self, now: float) -> tuple[float, float] | None:
        """(seconds left in this level, seconds left in the run), from the first bound the level will reach
        at its current rate; the run estimate assumes the levels after it take as long as this one."""
        elapsed = max(now - self.start, 0.0)
        left: list[float] = []
        if self.duration_s is not None:
            left.append(max(self.duration_s - elapsed, 0.0))
        if self.total is not None and self.done > 0 and elapsed > 0:
            left.append(max(self.total - self.done, 0) * elapsed / self.done)
        if not left:
            return None
        level_left = min(left)
        return level_left, level_left + self.levels_after * (elapsed + level_left)


def _clock_text(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
    return f"{seconds // 60:02d}:{seconds % 60:02d}"


class _Reporter:
    """Writes progress lines to a stream: rewritten in place on a terminal, every 10 s otherwise."""

    def __init__(self, out: TextIO | None) -> None:
        self.out = out
        self.tty = bool(out is not None and getattr(out, "isatty", lambda: False)())
        self.every_s = 1.0 if self.tty else 10.0

    def show(self, text: str, *, final: bool = False) -> None:
        if self.out is None:
            return
        if self.tty:
            self.out.write("\r\x1b[2K" + text + ("\n" if final else ""))
        else:
            self.out.write(text + "\n")
        self.out.flush()


async def run_bench(
    send: SendFn,
    prompts: Sequence[Prompt],
    plan: LoadPlan,
    *,
    progress: TextIO | None = sys.stderr,
    clock: Clock = time.perf_counter,
    into: BenchRun | None = None,
) -> BenchRun:
    """Run the whole plan, target after target and level after level.

    `into` is filled as the run goes, so a caller still holds the finished levels when the run
    is interrupted (a level appears in `levels` only once it has ended).
    """
    if not prompts:
        raise ConfigError("no prompts to send", key="--prompts")
    run = into if into is not None else BenchRun(plan=plan)
    reporter = _Reporter(progress)
    for target in plan.targets:
        cycle = itertools.cycle(prompts)
        if plan.first_request:
            prompt = next(cycle)
            record = await _send_one(send, target, prompt, plan)
            record = dataclasses.replace(record, target=target, level=0, phase="first", index=0)
            run.records.append(record)
            reporter.show(f"{target} first request: " + _first_line(record), final=True)
        levels = list(plan.levels())
        for i, level in enumerate(levels):
            after = len(levels) - 1 - i + (len(plan.targets) - 1 - plan.targets.index(target)) * len(levels)
            level_run = _Level(send, target, level, plan, cycle, run.records, clock, reporter, levels_after=after)
            run.levels.append(await level_run.run())
    return run


def _first_line(record: RequestRecord) -> str:
    if not record.ok:
        return f"failed ({record.error_type})"
    ttft = f"TTFT {record.ttft_s * 1000:.0f} ms, " if record.ttft_s is not None else ""
    return f"{ttft}E2E {(record.e2e_s or 0) * 1000:.0f} ms"


async def _send_one(send: SendFn, target: str, prompt: Prompt, plan: LoadPlan) -> RequestRecord:
    return await send(target, prompt, prompt.max_tokens or plan.max_tokens)


class _Level:
    """The warm-up and measured phases of one target at one level."""

    def __init__(self, send: SendFn, target: str, level: float, plan: LoadPlan, prompts: Iterator[Prompt],
                 sink: list[RequestRecord], clock: Clock, reporter: _Reporter, *, levels_after: int = 0) -> None:
        self.send = send
        self.levels_after = levels_after
        self.target = target
        self.level = level
        self.plan = plan
        self.prompts = prompts
        self.sink = sink
        self.clock = clock
        self.reporter = reporter
        self.index = 0
        self.cancelled = 0
        self.meter: ProgressMeter | None = None

    async def _one(self, phase: str, queue_s: float | None = None) -> None:
        prompt = next(self.prompts)
        self.index += 1
        index = self.index
        try:
            record = await _send_one(self.send, self.target, prompt, self.plan)
        except asyncio.CancelledError:
            self.cancelled += phase == "measured"
            raise
        record = dataclasses.replace(record, target=self.target, level=self.level, phase=phase, index=index,
                                     queue_s=queue_s)
        self.sink.append(record)
        if phase == "measured" and self.meter is not None:
            self.meter.add(record)

    async def run(self) -> LevelRun:
        plan = self.plan
        label = f"c={self.level:g}" if plan.mode == "concurrency" else f"rate={self.level:g}/s"
        slots = int(self.level) if plan.mode == "concurrency" else plan.max_concurrency
        warmup = plan.warmup_for(self.level)
        if warmup:
            self.reporter.show(f"{self.target} {label}  warm-up: {warmup} requests")
            await self._closed(phase="warmup", slots=min(slots, warmup), limit=warmup, deadline=None)
        start = self.clock()
        self.meter = ProgressMeter(self.target, label, start, every_s=self.reporter.every_s, total=plan.requests,
                                   duration_s=plan.duration_s, levels_after=self.levels_after)
        deadline = None if plan.duration_s is None else start + plan.duration_s
        ticker = asyncio.create_task(self._tick())
        lags: list[float] = []
        try:
            if plan.mode == "concurrency":
                body = self._closed(phase="measured", slots=slots, limit=plan.requests, deadline=deadline)
            else:
                body = self._open(rate=self.level, limit=plan.requests, deadline=deadline, lags=lags)
            stopped_by = await self._bounded(body, deadline)
        finally:
            ticker.cancel()
        measured = [r for r in self.sink if r.target == self.target and r.level == self.level and r.phase == "measured"]
        end = max((r.end_s for r in measured), default=self.clock())
        line = self.meter.line(self.clock(), force=True)
        if line:
            self.reporter.show(line + (f"  ({self.cancelled} cut off at the deadline)" if self.cancelled else ""),
                               final=True)
        return LevelRun(target=self.target, mode=plan.mode, level=self.level, window_start_s=start, window_end_s=end,
                        cancelled=self.cancelled, dispatch_lag_s=lags, stopped_by=stopped_by)

    async def _bounded(self, body: Awaitable[None], deadline: float | None) -> str:
        """Run the measured phase; past deadline + grace, cancel what is still in flight."""
        task = asyncio.ensure_future(body)
        if deadline is None:
            await task
            return "requests"
        timeout = max(deadline - self.clock(), 0.0) + self.plan.grace_s
        done, _ = await asyncio.wait({task}, timeout=timeout)
        if not done:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        else:
            task.result()
        count = sum(1 for r in self.sink if r.target == self.target and r.level == self.level and r.phase == "measured")
        return "requests" if self.plan.requests is not None and count + self.cancelled >= self.plan.requests else "duration"

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.reporter.every_s)
            if self.meter is not None:
                line = self.meter.line(self.clock())
                if line:
                    self.reporter.show(line)

    async def _closed(self, *, phase: str, slots: int, limit: int | None, deadline: float | None) -> None:
        issued = 0

        async def worker() -> None:
            nonlocal issued
            while (limit is None or issued < limit) and (deadline is None or self.clock() < deadline):
                issued += 1
                await self._one(phase)

        workers = [asyncio.create_task(worker()) for _ in range(slots)]
        try:
            await asyncio.gather(*workers)
        finally:
            for w in workers:
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)

    async def _open(self, *, rate: float, limit: int | None, deadline: float | None, lags: list[float]) -> None:
        cap = asyncio.Semaphore(self.plan.max_concurrency)
        tasks: set[asyncio.Task[None]] = set()

        async def arrival() -> None:
            arrived = self.clock()
            async with cap:
                await self._one("measured", queue_s=self.clock() - arrived)

        begin = self.clock()
        horizon = None if deadline is None else deadline - begin
        try:
            for offset in poisson_schedule(rate, seed=f"{self.plan.seed}:{self.target}:{rate}", limit=limit,
                                           horizon_s=horizon):
                at = begin + offset
                delay = at - self.clock()
                if delay > 0:
                    await asyncio.sleep(delay)
                lags.append(max(self.clock() - at, 0.0))
                task = asyncio.create_task(arrival())
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            if tasks:
                await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)


def poisson_schedule(rate: float, *, seed: str, limit: int | None, horizon_s: float | None) -> Iterator[float]:
    """Arrival offsets (seconds from the start) of a Poisson process: exponential gaps of mean 1/rate.

    Seeded, so the same command sends at the same offsets; stops after `limit` arrivals or at
    `horizon_s`, whichever comes first.
    """
    if limit is None and horizon_s is None:
        raise ValueError("an open-ended schedule needs a limit or a horizon")
    rng = random.Random(seed)
    at = 0.0
    for _ in itertools.count() if limit is None else range(limit):
        at += rng.expovariate(rate)
        if horizon_s is not None and at >= horizon_s:
            return
        yield at


def error_fields(exc: BaseException) -> dict[str, Any]:
    """The record fields describing an error: its type (with the cause of a failover), status, text."""
    name = type(exc).__name__
    status = getattr(exc, "status", None)
    if isinstance(exc, AllDeploymentsFailedError) and exc.last_error is not None:
        last = exc.last_error
        name = f"{name}({type(last).__name__})"
        status = getattr(last, "status", None)
    message = str(exc) if isinstance(exc, LLMRouteError) else f"{name}: {exc}"
    return {"error_type": name, "status": status if isinstance(status, int) else None,
            "error_message": message[:500]}


def _chunk_text(chunk: Any) -> str | None:
    choices = getattr(chunk, "choices", None)
    if not choices:
        return None
    delta = getattr(choices[0], "delta", None)
    if delta is None:
        return None
    text = getattr(delta, "content", None) or getattr(delta, "reasoning_content", None) \
        or getattr(delta, "reasoning", None)
    return text if isinstance(text, str) else None


def _route_fields(response: Any) -> dict[str, Any]:
    route = getattr(response, "route", None)
    if route is None:
        return {}
    deployment = getattr(route, "deployment", None)
    deployment = getattr(deployment, "id", deployment)
    attempts = getattr(route, "attempts", None)
    connect_s = getattr(route, "connect_s", None)
    if connect_s is None and attempts:
        connect_s = getattr(attempts[-1], "connect_s", None)
    return {
        "deployment": deployment if isinstance(deployment, str) else None,
        "attempts": len(attempts) if isinstance(attempts, (list, tuple)) else None,
        "connect_s": connect_s if isinstance(connect_s, (int, float)) else None,
    }


def _token_fields(response: Any, text: str, prompt: Prompt) -> dict[str, Any]:
    usage = getattr(response, "usage", None)
    completion = getattr(usage, "completion_tokens", None)
    prompt_tokens = getattr(usage, "prompt_tokens", None)
    route = getattr(response, "route", None)
    if isinstance(completion, int):
        source = "client_estimate" if getattr(route, "usage_estimated", False) else "usage"
    else:
        completion, source = count_text_tokens(text), "tokenizer"
    if not isinstance(prompt_tokens, int):
        prompt_tokens = count_message_tokens(prompt.messages)
    return {"output_tokens": completion, "input_tokens": prompt_tokens, "tokens_source": source}


def client_send(client: AsyncClient, *, stream: bool = True, feature: str | None = "bench", keep_text: bool = False,
                clock: Clock = time.perf_counter, metadata: Mapping[str, str] | None = None) -> SendFn:
    """A `SendFn` over llmroute's `AsyncClient`: one chat completion, timed as stats.py defines.

    `keep_text` stores each answer in its record (for smoke checks; a load run would hold them all).
    `metadata` goes on every call (the smoke check tags its probes with it).
    """
    tags = dict(metadata) if metadata else None  # None: the create() default

    async def send(target: str, prompt: Prompt, max_tokens: int) -> RequestRecord:
        start = clock()
        timing = StreamTiming(start)
        base: dict[str, Any] = {"target": target, "level": 0, "phase": "", "index": 0, "start_s": start}
        try:
            if stream:
                response_stream = await client.chat.completions.create(
                    model=target, messages=prompt.as_messages(), max_tokens=max_tokens, stream=True, feature=feature,
                    metadata=tags)
                async with response_stream:
                    async for chunk in response_stream:
                        timing.on_chunk(clock(), _chunk_text(chunk))
                timing.on_end(clock())
                response = response_stream.response
                text = timing.text
            else:
                response = await client.chat.completions.create(
                    model=target, messages=prompt.as_messages(), max_tokens=max_tokens, stream=False, feature=feature,
                    metadata=tags)
                timing.on_end(clock())
                choices = getattr(response, "choices", None) or []
                text = (getattr(getattr(choices[0], "message", None), "content", None) or "") if choices else ""
        except _FATAL:
            raise
        except Exception as exc:  # every failure becomes a record; CancelledError is not an Exception
            return RequestRecord(**base, ok=False, e2e_s=clock() - start, ttft_s=timing.ttft_s,
                                 itl_s=timing.itl_s, **error_fields(exc))
        return RequestRecord(**base, ok=True, e2e_s=timing.e2e_s, ttft_s=timing.ttft_s, itl_s=timing.itl_s,
                             text=text if keep_text else None,
                             **_token_fields(response, text, prompt), **_route_fields(response))

    return send
