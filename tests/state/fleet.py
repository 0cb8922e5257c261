"""Drive several worker processes (tests/state/worker.py) at once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parents[2]


class Worker:
    def __init__(self) -> None:
        env = dict(os.environ, PYTHONPATH=str(_REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.state.worker"], cwd=_REPO, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def send(self, cmd: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    def receive(self) -> Any:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker exited with {self.proc.poll()}")
        return json.loads(line)

    def ask(self, cmd: dict[str, Any]) -> Any:
        self.send(cmd)
        return self.receive()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.ask({"op": "exit"})
                self.proc.wait(30)
            except Exception:  # noqa: BLE001
                self.kill()
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                f.close()


class Fleet:
    def __init__(self, n: int) -> None:
        self.workers = [Worker() for _ in range(n)]
        self._pool = ThreadPoolExecutor(max_workers=n)

    def ask_all(self, cmd: dict[str, Any]) -> list[Any]:
        return list(self._pool.map(lambda w: w.ask(cmd), self.workers))

    def send_all(self, cmd: dict[str, Any]) -> None:
        for w in self.workers:
            w.send(cmd)

    def receive_all(self) -> list[Any]:
        return list(self._pool.map(lambda w: w.receive(), self.workers))

    def close(self) -> None:
        list(self._pool.map(lambda w: w.close(), self.workers))
        self._pool.shutdown()
