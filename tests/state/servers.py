"""Real redis-server and PostgreSQL instances on free loopback ports, in temporary folders.

Installed by scripts/services.sh (Debian packages). Each instance is a child process of the test
run, listening on 127.0.0.1 only, stopped (and its folder removed) when the test is done.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, timeout_s: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server on port {port} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"nothing listening on 127.0.0.1:{port} after {timeout_s}s")


class RedisServer:
    def __init__(self) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server is not installed: run scripts/services.sh as root")
        self.exe = exe
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="llmroute-redis-")
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> "RedisServer":
        self.proc = subprocess.Popen(
            [self.exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", self.dir, "--protected-mode", "yes"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_port(self.port, 10, self.proc)
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def stop(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


class RedisCluster:
    """Three redis-server nodes in cluster mode on loopback (no replicas), slots spread by
    `redis-cli --cluster create`; `url` names one node (the cluster client discovers the rest)."""

    def __init__(self, nodes: int = 3) -> None:
        self.nodes = [RedisServer() for _ in range(nodes)]

    @property
    def url(self) -> str:
        return self.nodes[0].url

    def start(self) -> "RedisCluster":
        for node in self.nodes:
            node.proc = subprocess.Popen(
                [node.exe, "--port", str(node.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                 "--dir", node.dir, "--protected-mode", "yes", "--cluster-enabled", "yes",
                 "--cluster-config-file", os.path.join(node.dir, "nodes.conf"), "--cluster-node-timeout", "2000",
                 # The bus port defaults to port + 10000, past 65535 for a high free port: one of its own.
                 "--cluster-port", str(free_port())],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for node in self.nodes:
            _wait_port(node.port, 10, node.proc)
        cli = shutil.which("redis-cli")
        if cli is None:
            raise RuntimeError("redis-cli is not installed: run scripts/services.sh as root")
        subprocess.run([cli, "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in self.nodes),
                        "--cluster-replicas", "0", "--cluster-yes"], check=True, timeout=30,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            info = subprocess.run([cli, "-p", str(self.nodes[0].port), "cluster", "info"], capture_output=True,
                                  text=True, timeout=5).stdout
            if "cluster_state:ok" in info:
                return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("the Redis Cluster did not reach cluster_state:ok")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


def _pg_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if found:
        return found[-1]
    exe = shutil.which(name)
    if exe is None:
        raise RuntimeError(f"PostgreSQL's {name} is not installed: run scripts/services.sh as root")
    return exe


class PostgresServer:
    """initdb + pg_ctl into a temporary folder; trust authentication on 127.0.0.1 only."""

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="llmroute-pg-")
        self.data = os.path.join(self.dir, "data")
        self.log = os.path.join(self.dir, "log")
        self._user: str | None = None
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root
            for name in ("postgres", "nobody"):
                try:
                    pw = pwd.getpwnam(name)
                except KeyError:
                    continue
                self._user = name
                os.chown(self.dir, pw.pw_uid, pw.pw_gid)
                break
            else:
                raise RuntimeError("running as root with no 'postgres' or 'nobody' user to run PostgreSQL")
        self._run(_pg_bin("initdb"), "-D", self.data, "-U", "llmroute", "--auth=trust", "-E", "UTF8",
                  "--no-locale", "--no-sync")

    @property
    def url(self) -> str:
        return f"postgresql://llmroute@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        cmd = list(args)
        if self._user is not None:
            cmd = ["runuser", "-u", self._user, "--", *cmd]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=self.dir, timeout=120)

    def start(self) -> "PostgresServer":
        opts = (f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off "
                f"-c synchronous_commit=off -c full_page_writes=off -c max_connections=50")
        self._run(_pg_bin("pg_ctl"), "start", "-D", self.data, "-l", self.log, "-w", "-t", "60", "-o", opts)
        _wait_port(self.port, 30)
        return self

    def stop_server(self) -> None:
        self._run(_pg_bin("pg_ctl"), "stop", "-D", self.data, "-m", "fast", "-w", "-t", "60")

    def stop(self) -> None:
        try:
            self.stop_server()
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)

    def log_text(self) -> str:
        return Path(self.log).read_text(errors="replace") if os.path.exists(self.log) else ""
