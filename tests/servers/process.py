"""Start a loopback platform server in a child process (for benchmarks: no GIL shared with the client).

    with spawn("together", tokens=64, ttft_ms=50, gap_ms=5) as base_url: ...

The child is `python -m tests.servers.run`; it exits when we close its stdin, and
is terminated (then killed) if it does not. It listens on 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

_REPO = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def spawn(platform: str, *, tokens: int | None = None, ttft_ms: float = 0.0, gap_ms: float = 0.0,
          api_key: str | None = None, timeout_s: float = 10.0) -> Iterator[str]:
    args = [sys.executable, "-m", "tests.servers.run", "--platform", platform, "--port", "0",
            "--ttft-ms", str(ttft_ms), "--gap-ms", str(gap_ms)]
    if tokens is not None:
        args += ["--tokens", str(tokens)]
    if api_key is not None:
        args += ["--api-key", api_key]
    env = dict(os.environ, PYTHONPATH=str(_REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    child = subprocess.Popen(args, cwd=_REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        line = child.stdout.readline().strip()
        if not line.startswith("http://127.0.0.1:"):
            raise RuntimeError(f"{platform} server process did not start (got {line!r})")
        yield line
    finally:
        if child.stdin is not None:
            child.stdin.close()
        try:
            child.wait(timeout_s)
        except subprocess.TimeoutExpired:
            child.terminate()
            try:
                child.wait(timeout_s)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        if child.stdout is not None:
            child.stdout.close()
