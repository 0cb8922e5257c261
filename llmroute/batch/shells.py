"""`client.batches` and `async_client.batches`: thin shells that drive `job.BatchJobs` over the client's transport.

They send the `Req`s a job step yields through the one send path (`_http/exchange.py`: the owning
client's connection pools, timeouts, read caps, typed errors; redirects followed, credentials
dropped when one leaves the platform's origin), run `OnlineCall`s through the owning client, sleep
between polls, and nothing else: every decision is in `job.py`, every state in the job store.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Protocol

from llmroute import errors as E
from llmroute.accounting.ledger_postgres import is_postgres_url
from llmroute._http.bounded import ReadLimits
from llmroute._http.exchange import Exchange, afetch, fetch
from llmroute._http.multipart import encode_multipart
from llmroute._http.timeouts import Timeouts
from llmroute.batch.job import BatchJobs, BatchResult, JobView, OnlineCall, OnlineCalls
from llmroute.batch.platforms import Req, Resp
from llmroute.batch.settings import BatchSettings
from llmroute.batch.store import JobStore
from llmroute.batch.store_postgres import PostgresJobStore
from llmroute._http.request import HttpRequest
from llmroute._call.engine import EngineClient
from llmroute._runtime.twins import asleep

if TYPE_CHECKING:
    from llmroute.types import ChatAccess
    from llmroute._http.transport import AsyncTransport, SyncTransport

__all__ = ["Batches", "AsyncBatches", "open_job_store", "BATCH_READ_LIMITS", "BATCH_TIMEOUTS"]

# Batch calls move files, not tokens: no first-token limit; each wait for bytes up to 5 minutes, and
# an upload or download of a large file (hundreds of MB) up to 30 minutes in all.
# `Batches(client, timeouts=...)` to change them.
BATCH_TIMEOUTS = Timeouts(connect_s=10.0, ttft_s=300.0, total_s=1800.0, read_s=300.0, read_kind="read")
# A result file holds every answer of a job (the platforms take input files up to 100 MB - 1 GB):
# read caps well above that, and still a bound. `Batches(client, read_limits=...)` to change them.
BATCH_READ_LIMITS = ReadLimits(max_response_bytes=4 << 30, max_decoded_bytes=4 << 30)
_CONNECTIONS = 4  # per platform host: polls are few, uploads large


def _http_request(req: Req) -> HttpRequest:
    """A batch step's request as the transports send it: JSON, a multipart form, or no body."""
    headers = dict(req.headers)
    if req.files is not None or req.data is not None:
        ctype, content = encode_multipart(req.data, req.files, os.urandom(16).hex())
        headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
        headers["Content-Type"] = ctype
        return HttpRequest(req.method, req.url, headers, None, False, content)
    if req.json is not None and not any(k.lower() == "content-type" for k in headers):
        headers["Content-Type"] = "application/json"
    return HttpRequest(req.method, req.url, headers, req.json, False)


def _exchange(req: Req, limits: ReadLimits, timeouts: Timeouts) -> Exchange:
    host = req.url.split("/")[2] if "//" in req.url else "batch"
    return Exchange(_http_request(req), timeouts, limits, provider=host, deployment="batch",
                    max_connections=_CONNECTIONS)


def _resp(reply: Any) -> Resp:
    return Resp(reply.status, reply.headers, reply.body)


class BatchClient(EngineClient, Protocol):
    """What `Batches` and `AsyncBatches` use of their `Client` or `AsyncClient` (client.py imports this
    module, not the reverse): its config and engine, and `chat.completions.create` for the `online` policy."""

    @property
    def chat(self) -> ChatAccess: ...


# --- async source: AsyncBatchClient ---
class AsyncBatchClient(BatchClient, Protocol):
    """The client of `AsyncBatches`, whose transport the batch steps are sent on."""

    @property
    def _transport(self) -> AsyncTransport: ...
# --- end async source: AsyncBatchClient ---


# --- generated from AsyncBatchClient by scripts/gen_sync.py; do not edit ---
class SyncBatchClient(BatchClient, Protocol):
    """The client of `Batches`, whose transport the batch steps are sent on."""

    @property
    def _transport(self) -> SyncTransport: ...
# --- end generated: AsyncBatchClient ---


def open_job_store(where: str) -> JobStore:
    """The job store at `where`: a `postgresql://` URL (PostgresJobStore) or an SQLite file path."""
    if is_postgres_url(where):
        return PostgresJobStore(where)
    return JobStore(where)


def _jobs(client: BatchClient, settings: BatchSettings | None, store: JobStore | None) -> BatchJobs:
    settings = settings or BatchSettings.from_config(client.config, ledger=client._engine.sections.ledger)
    store = store or open_job_store(settings.store)
    return BatchJobs(client.config, client._engine, settings, store)


def _create_args(requests: Any, model: str, feature: str | None, metadata: Mapping[str, str] | None,
                 on_failure: str | None, completion_window: str | None) -> Dict[str, Any]:
    return dict(requests=requests, model=model, feature=feature, metadata=dict(metadata or {}),
                on_failure=on_failure, completion_window=completion_window)


def _resume(step: Any, value: Any, error: BaseException | None) -> tuple[bool, Any]:
    """Send a step its last answer (or error): (True, its return value) or (False, its next effect)."""
    try:
        return False, (step.throw(error) if error is not None else step.send(value))
    except StopIteration as stop:
        return True, stop.value


def _pause(view: JobView, started: float, now: float, timeout_s: float | None) -> float | None:
    """Seconds to sleep before the next poll, or None when `wait` should return."""
    if view.finished or (timeout_s is not None and now - started >= timeout_s):
        return None
    pause = max(0.0, (view.next_action_at or now) - now)
    return pause if timeout_s is None else min(pause, max(0.0, started + timeout_s - now))


class Batches:
    """Batch jobs for `Client`: `create`, `retrieve`, `poll`, `wait`, `results`, `cancel`, `list`.

    Its methods are generated from `AsyncBatches`' (scripts/gen_sync.py); `_online_calls` is its own (threads)."""

    def __init__(self, client: SyncBatchClient, *, settings: BatchSettings | None = None, store: JobStore | None = None,
                 clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep,
                 read_limits: ReadLimits | None = None, timeouts: Timeouts | None = None) -> None:
        self._client = client
        self.jobs = _jobs(client, settings, store)
        self._clock = clock
        self._sleep = sleep
        self.read_limits = read_limits or BATCH_READ_LIMITS
        self.timeouts = timeouts or BATCH_TIMEOUTS

    def _online_calls(self, effect: OnlineCalls) -> List[Any]:
        """Each call's completion or LLMRouteError, in order, `effect.parallel` at a time (threads)."""
        from concurrent.futures import ThreadPoolExecutor

        def one(kwargs: Dict[str, Any]) -> Any:
            try:
                return self._client.chat.completions.create(**kwargs)
            except E.LLMRouteError as exc:
                return exc

        with ThreadPoolExecutor(max_workers=max(1, min(effect.parallel, len(effect.calls))),
                                thread_name_prefix="llmroute-batch-local") as pool:
            return list(pool.map(one, effect.calls))

    # --- generated from AsyncBatches by scripts/gen_sync.py; do not edit ---
    def _send(self, req: Req) -> Resp:
        ex = _exchange(req, self.read_limits, self.timeouts)
        return _resp(fetch(self._client._transport, ex, follow_redirects=True))

    def _drive(self, step: Any) -> Any:
        value: Any = None
        error: BaseException | None = None
        while True:
            done, effect = _resume(step, value, error)
            if done:
                return effect
            value, error = None, None
            try:
                if isinstance(effect, Req):
                    value = self._send(effect)
                elif isinstance(effect, OnlineCall):
                    value = self._client.chat.completions.create(**effect.kwargs)
                elif isinstance(effect, OnlineCalls):
                    value = self._online_calls(effect)
                else:  # pragma: no cover - a bug in job.py
                    raise TypeError(f"unknown batch effect {effect!r}")
            except E.LLMRouteError as exc:
                error = exc

    def create(self, requests: Any, *, model: str, feature: str | None = None,
                     metadata: Mapping[str, str] | None = None, on_failure: str | None = None,
                     completion_window: str | None = None, submit: bool = True) -> JobView:
        """Store a job (checked before any I/O) and, with `submit=True`, upload and create its platform jobs."""
        job_id = self.jobs.create_job(now=self._clock(), **_create_args(requests, model, feature, metadata,
                                                                         on_failure, completion_window))
        return self.poll(job_id) if submit else self.retrieve(job_id)

    def retrieve(self, job_id: str) -> JobView:
        """The job as stored (no network)."""
        return self.jobs.view(job_id, self._clock())

    def poll(self, job_id: str) -> JobView:
        """One pass: submit what is pending, poll what is due, collect what finished."""
        view: JobView = self._drive(self.jobs.advance(job_id, self._clock()))
        return view

    def wait(self, job_id: str, *, timeout_s: float | None = None,
                   on_progress: Callable[[JobView], None] | None = None) -> JobView:
        """Poll until the job finishes (resuming a job a previous process started)."""
        started = self._clock()
        while True:
            view = self.poll(job_id)
            if on_progress is not None:
                on_progress(view)
            pause = _pause(view, started, self._clock(), timeout_s)
            if pause is None:
                return view
            self._sleep(pause)

    def results(self, job_id: str) -> Dict[str, BatchResult]:
        """`{custom_id: BatchResult}` for every request that finished (ok or failed for good)."""
        return self.jobs.results(job_id)

    def cancel(self, job_id: str) -> JobView:
        self.jobs._job(job_id)
        self.jobs.store.request_cancel(job_id)
        return self.poll(job_id)

    def list(self) -> List[JobView]:
        now = self._clock()
        return [self.jobs.view(j["job_id"], now) for j in self.jobs.store.jobs()]

    def close(self) -> None:
        """Close the job store (the connections are the client's)."""
        self.jobs.store.close()
    # --- end generated: AsyncBatches ---


class AsyncBatches:
    """Batch jobs for `AsyncClient`: the same methods as `Batches`, awaited."""

    def __init__(self, client: AsyncBatchClient, *, settings: BatchSettings | None = None, store: JobStore | None = None,
                 clock: Callable[[], float] = time.time, sleep: Callable[[float], Any] | None = None,
                 read_limits: ReadLimits | None = None, timeouts: Timeouts | None = None) -> None:
        self._client = client
        self.jobs = _jobs(client, settings, store)
        self._clock = clock
        self._sleep = sleep or asleep
        self.read_limits = read_limits or BATCH_READ_LIMITS
        self.timeouts = timeouts or BATCH_TIMEOUTS

    async def _online_calls(self, effect: OnlineCalls) -> List[Any]:
        """Each call's completion or LLMRouteError, in order, `effect.parallel` at a time."""
        import asyncio

        gate = asyncio.Semaphore(max(1, effect.parallel))

        async def one(kwargs: Dict[str, Any]) -> Any:
            async with gate:
                try:
                    return await self._client.chat.completions.create(**kwargs)
                except E.LLMRouteError as exc:
                    return exc

        return list(await asyncio.gather(*(one(kwargs) for kwargs in effect.calls)))

    # --- async source: AsyncBatches ---
    async def _send(self, req: Req) -> Resp:
        ex = _exchange(req, self.read_limits, self.timeouts)
        return _resp(await afetch(self._client._transport, ex, follow_redirects=True))

    async def _drive(self, step: Any) -> Any:
        value: Any = None
        error: BaseException | None = None
        while True:
            done, effect = _resume(step, value, error)
            if done:
                return effect
            value, error = None, None
            try:
                if isinstance(effect, Req):
                    value = await self._send(effect)
                elif isinstance(effect, OnlineCall):
                    value = await self._client.chat.completions.create(**effect.kwargs)
                elif isinstance(effect, OnlineCalls):
                    value = await self._online_calls(effect)
                else:  # pragma: no cover - a bug in job.py
                    raise TypeError(f"unknown batch effect {effect!r}")
            except E.LLMRouteError as exc:
                error = exc

    async def create(self, requests: Any, *, model: str, feature: str | None = None,
                     metadata: Mapping[str, str] | None = None, on_failure: str | None = None,
                     completion_window: str | None = None, submit: bool = True) -> JobView:
        """Store a job (checked before any I/O) and, with `submit=True`, upload and create its platform jobs."""
        job_id = self.jobs.create_job(now=self._clock(), **_create_args(requests, model, feature, metadata,
                                                                         on_failure, completion_window))
        return await self.poll(job_id) if submit else self.retrieve(job_id)

    def retrieve(self, job_id: str) -> JobView:
        """The job as stored (no network)."""
        return self.jobs.view(job_id, self._clock())

    async def poll(self, job_id: str) -> JobView:
        """One pass: submit what is pending, poll what is due, collect what finished."""
        view: JobView = await self._drive(self.jobs.advance(job_id, self._clock()))
        return view

    async def wait(self, job_id: str, *, timeout_s: float | None = None,
                   on_progress: Callable[[JobView], None] | None = None) -> JobView:
        """Poll until the job finishes (resuming a job a previous process started)."""
        started = self._clock()
        while True:
            view = await self.poll(job_id)
            if on_progress is not None:
                on_progress(view)
            pause = _pause(view, started, self._clock(), timeout_s)
            if pause is None:
                return view
            await self._sleep(pause)

    def results(self, job_id: str) -> Dict[str, BatchResult]:
        """`{custom_id: BatchResult}` for every request that finished (ok or failed for good)."""
        return self.jobs.results(job_id)

    async def cancel(self, job_id: str) -> JobView:
        self.jobs._job(job_id)
        self.jobs.store.request_cancel(job_id)
        return await self.poll(job_id)

    def list(self) -> List[JobView]:
        now = self._clock()
        return [self.jobs.view(j["job_id"], now) for j in self.jobs.store.jobs()]

    async def aclose(self) -> None:
        """Close the job store (the connections are the client's)."""
        self.jobs.store.close()
    # --- end async source: AsyncBatches ---
