"""Checks of the files a command line names, run before the command does any work.

A report written to a read-only place, a bench result into a missing folder, a folder given as
`--ledger`: each is found before the work starts and raised as a `ConfigError` naming the path and
the option, which `llmroute` prints on one line with exit code 2. Nothing here creates or writes a
file; the checks use `os.access` and `stat` only.
"""

from __future__ import annotations

import os
from pathlib import Path

from llmroute.errors import ConfigError

__all__ = ["check_output", "check_input", "check_ledger_input"]


def check_output(path: str | None, option: str) -> None:
    """`path` can be created or overwritten: not a folder, its folder exists and is writable."""
    if not path:
        return
    p = Path(path).expanduser()
    if p.is_dir():
        raise ConfigError("is a directory; give a file name", path=str(path), key=option)
    if p.exists():
        if not os.access(p, os.W_OK):
            raise ConfigError(f"cannot write: {_why_not_writable(p)}", path=str(path), key=option)
        return
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.exists():
        raise ConfigError(f"folder {parent} does not exist", path=str(path), key=option)
    if not parent.is_dir():
        raise ConfigError(f"{parent} is not a folder", path=str(path), key=option)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"cannot create a file in {parent}: {_why_not_writable(parent)}", path=str(path), key=option)


def check_input(path: str | None, option: str) -> None:
    """`path` is an existing, readable file (not a folder)."""
    if not path:
        return
    p = Path(path).expanduser()
    if not p.exists():
        raise ConfigError("no such file", path=str(path), key=option)
    if p.is_dir():
        raise ConfigError("is a directory, not a file", path=str(path), key=option)
    if not os.access(p, os.R_OK):
        raise ConfigError("cannot read: permission denied", path=str(path), key=option)


def check_ledger_input(path: str, option: str) -> None:
    """`path` is a ledger: a SQLite database with a `ledger` table, or a JSONL file of records."""
    check_input(path, option)
    with open(path, "rb") as f:
        head = f.read(4096)
    if head.startswith(b"SQLite format 3\x00"):
        import sqlite3

        try:
            conn = sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro", uri=True, timeout=5.0)
            try:
                found = conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='ledger'").fetchone()
            finally:
                conn.close()
        except sqlite3.DatabaseError as exc:
            raise ConfigError(f"a damaged SQLite file ({exc})", path=str(path), key=option) from None
        if not found:
            raise ConfigError("a SQLite database without a `ledger` table: not an llmroute ledger", path=str(path),
                              key=option)
        return
    first = head.lstrip()[:1]
    if first and first != b"{":
        raise ConfigError("neither a SQLite ledger nor a JSONL ledger (one JSON record a line)", path=str(path),
                          key=option)


def _why_not_writable(p: Path) -> str:
    try:
        st = os.statvfs(p)
        if st.f_flag & os.ST_RDONLY:
            return "read-only file system"
    except OSError:
        pass
    return "permission denied"
