"""A TCP proxy on 127.0.0.1 that adds a fixed delay to every request: a remote Redis, made on loopback.

    with SlowProxy(("127.0.0.1", redis_port), delay_s=0.1) as proxy: proxy.port

Each chunk a client sends is held `delay_s` before it is forwarded (a request/reply protocol such as
Redis's then takes at least `delay_s` per round trip); replies come back at once. `forwarded` counts
the chunks held. One thread per direction and connection; `close()` stops them all.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import List, Tuple

__all__ = ["SlowProxy"]


class SlowProxy:
    def __init__(self, upstream: Tuple[str, int], *, delay_s: float) -> None:
        self.upstream = upstream
        self.delay_s = delay_s
        self.forwarded = 0
        self._lock = threading.Lock()
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port: int = self._listener.getsockname()[1]
        self._sockets: List[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, name="slow-proxy-accept", daemon=True).start()

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:
                self._sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, delayed: bool) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if delayed:
                    time.sleep(self.delay_s)
                    with self._lock:
                        self.forwarded += 1
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for s in sockets:
            try:
                s.close()
            except OSError:
                pass

    def __enter__(self) -> "SlowProxy":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main() -> None:
    """`python -m tests.servers.slow_proxy PORT DELAY_MS`: a proxy in its own process (its threads then
    take no time from the process measured); prints its port, runs until stdin closes."""
    import sys

    with SlowProxy(("127.0.0.1", int(sys.argv[1])), delay_s=float(sys.argv[2]) / 1000) as proxy:
        print(proxy.port, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()
