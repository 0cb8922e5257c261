"""Fresh locks in a forked child. No I/O; no cost per call.

`fork()` copies only the thread that called it. A lock that another thread held at that moment is
held forever in the child, so the child's first call through it would block for good. An object that
owns locks names them once, when it is built:

    forksafe.renew_at_fork(self, "_lock")

and in every forked child (`os.register_at_fork(after_in_child=...)`, registered on import) each
registered object gets new locks of the same kinds in those attributes, then its
`_after_fork_in_child()` is called if it has one: the place to drop what belonged to the parent's
threads (their concurrency slots, their buffered writes). A module registers itself the same way
(`renew_at_fork(sys.modules[__name__], "_lock")`).

Some locks guard work inside a C library that has process-wide locks of its own: SQLite's mutexes
(and its record of which file locks the process holds) are copied into the child as they are, so a
child forked while a thread of ours was inside SQLite hangs or corrupts in its first `connect`.
Those are registered with `hold_at_fork(owner, "_io_lock")`: the forking thread takes them before
the fork (waiting at most `HOLD_WAIT_S` for each: a fork waits for a SQLite write in progress) and
gives them back after it, so no thread of ours is inside SQLite at the fork.

Owners are held weakly: registering does not keep an object alive. Registering an owner again
adds names to its list (a subclass with locks of its own). The registry takes no lock of its
own (one dict assignment per owner, atomic under the GIL), so it cannot be caught held by a fork.
What a child inherits and what it rebuilds: docs/fork.md.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import weakref
from typing import Any, Callable

__all__ = ["renew_at_fork", "renew_module_locks", "hold_at_fork", "leave_inherited", "registered",
           "after_fork_in_child", "HOLD_WAIT_S"]

log = logging.getLogger("llmroute._runtime.forksafe")

_LOCK = type(threading.Lock())
_RLOCK = type(threading.RLock())

HOLD_WAIT_S = 2.0  # the longest a fork waits for one held-at-fork lock before going on without it

# id(owner) -> (weak reference to the owner, names of its lock attributes, those of them held at fork).
_owners: dict[int, tuple["weakref.ref[Any]", tuple[str, ...], tuple[str, ...]]] = {}
# The held-at-fork locks the forking thread took (given back in the parent after the fork).
_taken: list[Any] = []
# The parent's open connections and files, held for the child's life and never closed there.
_inherited: list[Any] = []


def _renewed(value: Any) -> Any:
    """A new, unheld lock/event/condition of the kind `value` is (an event keeps its flag)."""
    if isinstance(value, _LOCK):
        return threading.Lock()
    if isinstance(value, _RLOCK):
        return threading.RLock()
    if isinstance(value, threading.Event):
        event = threading.Event()
        if value.is_set():
            event.set()
        return event
    raise TypeError(f"forksafe: cannot renew a {type(value).__name__} (a Lock, RLock or Event is expected)")


_RENEWABLE: tuple[type, ...] = (_LOCK, _RLOCK, threading.Event)


def renew_at_fork(owner: Any, *lock_attrs: str) -> None:
    """In each forked child, give `owner` new locks in `lock_attrs` and call its `_after_fork_in_child()`."""
    for name in lock_attrs:
        value = getattr(owner, name)
        if not isinstance(value, _RENEWABLE):
            raise TypeError(f"forksafe: {type(owner).__name__}.{name} is a {type(value).__name__}, not a Lock, "
                            f"RLock or Event")
    _register(owner, tuple(lock_attrs), ())


def hold_at_fork(owner: Any, *lock_attrs: str) -> None:
    """`renew_at_fork`, and the forking thread takes these locks before the fork (see the module doc)."""
    renew_at_fork(owner, *lock_attrs)
    _register(owner, (), tuple(lock_attrs))


def _register(owner: Any, renew: tuple[str, ...], hold: tuple[str, ...]) -> None:
    key = id(owner)
    entry = _owners.get(key)
    if entry is not None and entry[0]() is owner:  # a subclass adding its own locks to its base's
        renew, hold = tuple(dict.fromkeys(entry[1] + renew)), tuple(dict.fromkeys(entry[2] + hold))
    _owners[key] = (weakref.ref(owner, _forget(key)), renew, hold)


def renew_module_locks(module_name: str, *lock_attrs: str) -> None:
    """`renew_at_fork` for module-level locks: `renew_module_locks(__name__, "_lock")`."""
    renew_at_fork(sys.modules[module_name], *lock_attrs)


def leave_inherited(resource: Any) -> None:
    """Keep the parent's `resource` (a database connection, a file) unused and unclosed in the child:
    closing a SQLite connection may checkpoint and delete the parent's WAL, closing a PostgreSQL one
    ends the parent's session on the socket both share. The owner opens its own in the child."""
    if resource is not None:
        _inherited.append(resource)


def _forget(key: int) -> Callable[["weakref.ref[Any]"], None]:
    def forget(ref: "weakref.ref[Any]") -> None:
        entry = _owners.get(key)
        if entry is not None and entry[0] is ref:
            _owners.pop(key, None)
    return forget


def registered() -> int:
    """How many live objects have their locks renewed at fork."""
    return sum(1 for ref, _, _ in list(_owners.values()) if ref() is not None)


def before_fork() -> None:
    """Take the held-at-fork locks (in the forking thread)."""
    for ref, _, hold in list(_owners.values()):
        owner = ref()
        for name in hold if owner is not None else ():
            lock = getattr(owner, name)
            if lock.acquire(timeout=HOLD_WAIT_S):
                _taken.append(lock)
            else:
                log.warning("forksafe: %s.%s still held after %gs; forking without it", type(owner).__name__, name,
                            HOLD_WAIT_S)


def after_fork_in_parent() -> None:
    while _taken:
        _taken.pop().release()


def after_fork_in_child() -> None:
    """Renew every registered owner's locks, then let it drop the parent's per-thread state."""
    _taken.clear()  # the child's locks are new ones
    owners = [(ref(), names) for ref, names, _ in list(_owners.values())]
    for owner, names in owners:
        if owner is None:
            continue
        for name in names:
            setattr(owner, name, _renewed(getattr(owner, name)))
    for owner, _ in owners:
        reset = getattr(owner, "_after_fork_in_child", None) if owner is not None else None
        if reset is not None:
            try:
                reset()
            except Exception:  # noqa: BLE001 - one owner's reset must not stop the others'
                log.exception("forksafe: resetting %s after fork failed", type(owner).__name__)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=before_fork, after_in_parent=after_fork_in_parent, after_in_child=after_fork_in_child)
