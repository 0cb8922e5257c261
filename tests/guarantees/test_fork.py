"""A forked child can always make calls (gunicorn/uwsgi with preload, multiprocessing with fork).

`fork()` copies only the calling thread: a lock another thread held at that moment stays held in
the child. Each test forks while a thread of the parent holds one of the client's locks (or while
the parent has calls in flight), and the child must make a plain and a streamed call, close the
client and exit within `CHILD_TIMEOUT_S`, or the test fails (the child is killed). The ledger
(SQLite) must hold the child's calls next to the parent's. Traffic goes to the loopback fault server
running in the parent."""

from __future__ import annotations

import asyncio
import faulthandler
import itertools
import multiprocessing
import os
import signal
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

import llmroute as L
from llmroute.accounting.sinks import read_records
from tests.resilience.client_helpers import MESSAGES, TIER, tier_config
from tests.servers.fault import timed

DEP = "a:m"
CHILD_TIMEOUT_S = 10.0


def _config(fault_server: Any, path: Path, **resilience: Any) -> dict[str, Any]:
    config = tier_config({"a": fault_server}, resilience={"max_concurrency": 2, "rpm": 10_000, "tpm": 10_000_000,
                                                         "queue_timeout_s": 0, **resilience})
    config["ledger"] = {"sink": "sqlite", "path": str(path), "flush_interval_s": 0.05}
    config["budgets"] = [{"name": "tokens", "max_tokens": 10_000_000}]
    config["cache"] = {"enabled": True, "reproducible_only": False}
    return config


def _messages() -> list[dict[str, str]]:
    """A prompt not asked before: the cache is looked up and filled, and the call is sent."""
    return [{"role": "user", "content": f"{MESSAGES[0]['content']} ({os.getpid()}, {next(_asked)})"}]


_asked = itertools.count()


def _calls(client: Any, feature: str) -> None:
    """A plain call and a streamed one, both answered."""
    out = client.chat.completions.create(model=TIER, messages=_messages(), feature=feature)
    assert out.choices[0].message.content
    chunks = client.chat.completions.create(model=TIER, messages=_messages(), feature=feature + "-stream", stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def _stacks_on_sigusr1(path: Path) -> None:
    """In a child: write every thread's stack to `path` on SIGUSR1 (faulthandler's watchdog thread,
    `dump_traceback_later`, cannot be used after a fork: a pytest timeout's would be held)."""
    faulthandler.register(signal.SIGUSR1, file=open(path, "w"), all_threads=True)


def _kill_with_stacks(pid: int) -> None:
    os.kill(pid, signal.SIGUSR1)
    time.sleep(0.5)
    os.kill(pid, signal.SIGKILL)


def _run_in_child(body: Callable[[], None], report: Path) -> None:
    """Fork; the child runs `body` and exits 0, or writes its traceback to `report` and exits 1. The
    parent waits at most CHILD_TIMEOUT_S, then kills the child and fails."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            _stacks_on_sigusr1(report.with_suffix(".stacks"))
            body()
            code = 0
        except BaseException:  # noqa: BLE001 - reported to the parent
            report.write_text(traceback.format_exc())
        finally:
            os._exit(code)
    deadline = time.monotonic() + CHILD_TIMEOUT_S
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            _kill_with_stacks(pid)
            os.waitpid(pid, 0)
            stacks = report.with_suffix(".stacks")
            pytest.fail(f"the forked child did not finish within {CHILD_TIMEOUT_S}s (deadlocked):\n"
                        f"{stacks.read_text() if stacks.exists() else ''}")
        time.sleep(0.01)
    assert os.waitstatus_to_exitcode(status) == 0, report.read_text() if report.exists() else "child failed"


class _Holder:
    """A thread that holds `lock` until released (for as long as the fork takes)."""

    def __init__(self, lock: Any) -> None:
        self._lock, self._held, self._release = lock, threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._hold, daemon=True)
        self._thread.start()
        assert self._held.wait(5), "the lock was not free in the parent"

    def _hold(self) -> None:
        with self._lock:
            self._held.set()
            self._release.wait(30)

    def release(self) -> None:
        self._release.set()
        self._thread.join(5)


def _module_lock(module: str, name: str) -> Callable[[Any], Any]:
    def get(client: Any) -> Any:
        import importlib

        return getattr(importlib.import_module(module), name)
    return get


# The locks a call goes through, each reached from a client that has made one call. The ledger's and
# the client's own pools' were renewed in a child before forksafe (kept here as guards).
LOCKS: dict[str, Callable[[Any], Any]] = {
    "breaker-registry": lambda c: c._engine.breakers._lock,
    "breaker": lambda c: c._engine.breakers.breaker(DEP)._lock,
    "limits": lambda c: c._engine.limits._lock,
    "retry-budgets": lambda c: c._engine.retry_budgets._lock,
    "retry-budget": lambda c: c._engine.retry_budgets.retry(DEP)._lock,
    "budget-book": lambda c: c._engine.budget_book._lock,
    "cache": lambda c: c.cache._lock,
    "cache-backend": lambda c: c.cache._backend._lock,
    "ledger-spool": lambda c: c._engine.ledger._lock,
    "ledger-writer": lambda c: c._engine.ledger._io_lock,
    "client-pools": lambda c: c._pool_lock,
}
# Locks taken off a warm client's call path: on first use (the OpenTelemetry API, the tokenizer), when
# a provider is bound, a client is built (secrets), feedback is written, a sink registers for exit.
OTHER_LOCKS: dict[str, Callable[[Any], Any]] = {
    "telemetry": lambda c: c._engine.telemetry._bind_lock,
    "telemetry-api": _module_lock("llmroute._runtime.telemetry", "_api_lock"),
    "redaction": _module_lock("llmroute._runtime.redaction", "_lock"),
    "tokens": _module_lock("llmroute.accounting.tokens", "_lock"),
    "secrets": _module_lock("llmroute._runtime.secrets", "_install_lock"),
    "feedback": _module_lock("llmroute.accounting.feedback", "_lock"),
    "ledger-exit": _module_lock("llmroute.accounting.ledger", "_atexit_lock"),
}


@pytest.fixture
def client_and_path(fault_server: Any, tmp_path: Path) -> Iterator[tuple[Any, Path]]:
    path = tmp_path / "ledger.db"
    client = L.Client(config=_config(fault_server, path))
    _calls(client, "parent")  # every service the calls use exists (breaker, buckets, cache, ...)
    yield client, path
    client.close()


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_child_calls_while_a_parent_thread_held_a_lock_at_fork(lock: str, client_and_path: tuple[Any, Path],
                                                               tmp_path: Path) -> None:
    client, path = client_and_path
    holder = _Holder(LOCKS[lock](client))
    try:
        _run_in_child(lambda: (_calls(client, "child"), client.close()), tmp_path / "child.txt")
    finally:
        holder.release()
    _calls(client, "parent")  # the parent goes on
    client.close()
    features = sorted(r.feature for r in read_records(path))
    assert features == ["child", "child-stream", "parent", "parent", "parent-stream", "parent-stream"]


def test_child_calls_while_every_lock_was_held_at_fork(client_and_path: tuple[Any, Path], fault_server: Any,
                                                       tmp_path: Path) -> None:
    """Every lock at once; the child finds each of them free (taking it with a timeout), makes calls
    with the inherited client and with a new one (built in the child, with an API key), and closes."""
    client, path = client_and_path
    locks = {**LOCKS, **OTHER_LOCKS}
    held = [get(client) for get in locks.values()]  # looked up first: a lookup may take a held lock
    holders = [_Holder(lock) for lock in held]

    def child() -> None:
        stuck = []
        for name, get in locks.items():
            lock = get(client)
            if lock.acquire(timeout=1):
                lock.release()
            else:
                stuck.append(name)
        assert not stuck, f"held in the child: {stuck}"
        _calls(client, "child")
        client.close()
        config = _config(fault_server, tmp_path / "child-ledger.db")
        config["providers"]["a"]["api_key"] = "sk-child-0123456789abcdef"
        with L.Client(config=config) as fresh:
            _calls(fresh, "fresh")

    try:
        _run_in_child(child, tmp_path / "child.txt")
    finally:
        for holder in holders:
            holder.release()
    client.close()
    assert sorted(r.feature for r in read_records(path)) == ["child", "child-stream", "parent", "parent-stream"]
    assert sorted(r.feature for r in read_records(tmp_path / "child-ledger.db")) == ["fresh", "fresh-stream"]


def test_child_calls_while_the_parent_has_calls_in_flight(fault_server: Any, tmp_path: Path) -> None:
    """Two streams hold both concurrency slots (max_concurrency = 2, no queueing) at the fork: the
    slots are the parent's calls', so the child starts with both free; the parent's are given back
    when its streams end, and the parent's slot count is not disturbed by the child."""
    path = tmp_path / "ledger.db"
    client = L.Client(config=_config(fault_server, path))
    _calls(client, "parent")
    fault_server.push(timed(0.0, [0.05] * 30), timed(0.0, [0.05] * 30))
    started = threading.Barrier(3)
    errors: list[BaseException] = []

    def stream() -> None:
        try:
            chunks = client.chat.completions.create(model=TIER, messages=_messages(), feature="in-flight", stream=True)
            for i, _ in enumerate(chunks):
                if i == 0:
                    started.wait(5)
        except BaseException as exc:  # noqa: BLE001 - checked below
            errors.append(exc)

    threads = [threading.Thread(target=stream) for _ in range(2)]
    for t in threads:
        t.start()
    started.wait(5)
    assert client._engine.limits.in_flight(DEP) == 2  # both slots taken at the fork

    def child() -> None:
        assert client._engine.limits.in_flight(DEP) == 0
        _calls(client, "child")
        _calls(client, "child")  # both slots: one at a time, given back each time
        assert client._engine.limits.in_flight(DEP) == 0
        client.close()

    _run_in_child(child, tmp_path / "child.txt")
    for t in threads:
        t.join(10)
    assert not errors
    assert client._engine.limits.in_flight(DEP) == 0
    _calls(client, "parent")
    client.close()
    features = sorted(r.feature for r in read_records(path))
    assert features == sorted(["parent", "parent-stream"] * 2 + ["in-flight"] * 2 + ["child", "child-stream"] * 2)


# multiprocessing's fork start method: the client is built before the pool (preload), the workers
# use it. A module-level slot, as an application's module-level client would be.
_PRELOADED: dict[str, Any] = {}


def _worker(feature: str, stacks: str) -> None:
    _stacks_on_sigusr1(Path(stacks))  # where it hangs, if it does
    _calls(_PRELOADED["client"], feature)
    _PRELOADED["client"].close()


def test_multiprocessing_fork_workers_call_while_the_parent_is_busy(fault_server: Any, tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    client = _PRELOADED["client"] = L.Client(config=_config(fault_server, path))
    try:
        _calls(client, "parent")
        stop = threading.Event()

        def busy() -> None:  # the parent keeps calling on another thread while it forks
            while not stop.is_set():
                client.chat.completions.create(model=TIER, messages=_messages(), feature="busy")

        busy_thread = threading.Thread(target=busy)
        busy_thread.start()
        ctx = multiprocessing.get_context("fork")
        workers = [ctx.Process(target=_worker, args=(f"worker{i}", str(tmp_path / f"worker{i}.stacks")))
                   for i in range(3)]
        for w in workers:
            w.start()
            time.sleep(0.02)  # forks land at different points of the busy thread's calls
        for w in workers:
            w.join(CHILD_TIMEOUT_S)
        stop.set()
        busy_thread.join(10)
        hung = [w.pid for w in workers if w.exitcode is None]
        for w in workers:
            if w.exitcode is None and w.pid is not None:
                _kill_with_stacks(w.pid)
                w.join()
        stacks = "".join(p.read_text() for p in sorted(tmp_path.glob("worker*.stacks")))
        assert not hung, f"forked workers {hung} did not finish within {CHILD_TIMEOUT_S}s:\n{stacks}"
        assert [w.exitcode for w in workers] == [0, 0, 0]
    finally:
        _PRELOADED.clear()
        client.close()
    features = [r.feature for r in read_records(path)]
    for i in range(3):
        assert sorted(f for f in features if f.startswith(f"worker{i}")) == [f"worker{i}", f"worker{i}-stream"]
    assert features.count("busy") >= 1


def test_registering_locks_keeps_no_owner_alive_and_names_only_locks() -> None:
    import gc
    import weakref

    from llmroute._runtime import forksafe

    class Owner:
        def __init__(self) -> None:
            self._lock = threading.Lock()
            self.count = 0

    owners = [Owner() for _ in range(100)]
    for owner in owners:
        forksafe.renew_at_fork(owner, "_lock")
    keys = [id(owner) for owner in owners]
    assert all(key in forksafe._owners for key in keys)
    refs = [weakref.ref(owner) for owner in owners]
    del owners, owner
    gc.collect()
    assert all(ref() is None for ref in refs)  # the registry held none of them
    assert not any(key in forksafe._owners for key in keys)  # and forgot them
    with pytest.raises(TypeError, match="Owner.count is a int"):
        forksafe.renew_at_fork(Owner(), "count")


def test_async_client_used_by_the_parent_serves_a_forked_child(fault_server: Any, tmp_path: Path) -> None:
    """The child runs its own event loop: the client binds to it (the parent's loop does not run there)."""
    path = tmp_path / "ledger.db"
    client = L.AsyncClient(config=_config(fault_server, path))

    async def calls(feature: str) -> None:
        out = await client.chat.completions.create(model=TIER, messages=_messages(), feature=feature)
        assert out.choices[0].message.content
        chunks = await client.chat.completions.create(model=TIER, messages=_messages(), feature=feature + "-stream",
                                                      stream=True)
        assert [c async for c in chunks]

    async def parent() -> None:
        await calls("parent")

    async def child_calls() -> None:
        await calls("child")
        await client.close()

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(parent())
        _run_in_child(lambda: asyncio.run(child_calls()), tmp_path / "child.txt")
        loop.run_until_complete(client.close())
    finally:
        loop.close()
    assert sorted(r.feature for r in read_records(path)) == ["child", "child-stream", "parent", "parent-stream"]
