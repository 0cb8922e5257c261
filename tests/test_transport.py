"""Transport behaviour over real sockets: stale keep-alive connections, connection set-up timing."""

from __future__ import annotations

import asyncio
import json
import socket
import threading

import pytest

from llmroute import APIConnectionError, AsyncClient, Client
from llmroute._http.transport import BROKEN_AFTER_SEND
from tests.servers.fault import slow_headers

BODY = json.dumps({
    "id": "x", "object": "chat.completion", "created": 1, "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}).encode()
RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)


class DroppingServer:
    """Answers the first request on each connection, then closes it silently when the next one comes,
    as servers with short keep-alive limits do."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.answered = 0
        self.requests = 0  # every request read, answered or dropped
        self._stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _read_request(self, conn: socket.socket) -> bool:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return False
            data += chunk
        self.requests += 1
        head, _, rest = data.partition(b"\r\n\r\n")
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length")), 0)
        while len(rest) < length:
            rest += conn.recv(65536)
        return True

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            if self._read_request(conn):
                self.answered += 1  # before the send: the test may read it as soon as the reply lands
                conn.sendall(RESPONSE)
            self._read_request(conn)  # the next request on this connection: dropped unanswered

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def close(self) -> None:
        self._stop = True
        self.sock.close()


@pytest.fixture
def dropping():
    server = DroppingServer()
    yield server
    server.close()


def config(port: int) -> dict:
    return {"providers": {"s": {"kind": "vllm", "base_url": f"http://127.0.0.1:{port}/v1"}},
            "tiers": {"small": {"deployments": ["s:m"], "max_retries": 0}},
            "pricing": {"s:*": {"input_per_million": 0, "output_per_million": 0}},
            "ledger": {"sink": "memory"}}


MESSAGES = [{"role": "user", "content": "hi"}]


def _resends(routes) -> int:
    """Calls that were resent after a dropped keep-alive connection: visible as two attempts."""
    shapes = [[a.status for a in route.attempts] for route in routes]
    assert all(shape in (["ok"], ["error", "ok"]) for shape in shapes), shapes
    return sum(shape == ["error", "ok"] for shape in shapes)


def test_a_dropped_keepalive_connection_is_sent_again_once_as_a_visible_attempt(dropping):
    # max_retries = 0: the resend after a drop is not a retry (nothing failed), but it is an attempt.
    with Client(config=config(dropping.port)) as client:
        routes = []
        for _ in range(3):
            resp = client.chat.completions.create(model="small", messages=MESSAGES)
            assert resp.choices[0].message.content == "hi"
            routes.append(resp.route)
    assert dropping.answered == 3
    assert _resends(routes) >= 2  # calls 2 and 3 met the connection dropped after call 1 (or 2)
    assert sum(len(r.attempts) for r in routes) == dropping.requests  # every delivery is an attempt


@pytest.mark.parametrize("transport", ["httpx", "aiohttp"])
def test_async_dropped_keepalive_connection(dropping, transport):
    async def main():
        async with AsyncClient(config=config(dropping.port), transport=transport) as client:
            return [await client.chat.completions.create(model="small", messages=MESSAGES) for _ in range(3)]

    responses = asyncio.run(main())
    assert all(resp.choices[0].message.content == "hi" for resp in responses)
    assert _resends([resp.route for resp in responses]) >= 1
    assert sum(len(resp.route.attempts) for resp in responses) == dropping.requests


class CuttingServer(DroppingServer):
    """Answers 200 with a chunked body, then closes the connection in the middle of it."""

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            if self._read_request(conn):
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Transfer-Encoding: chunked\r\n\r\n40\r\n{\"id\": \"x")  # 64 bytes promised, 9 sent


def test_a_body_cut_after_its_headers_is_a_broken_reply_not_a_dropped_connection():
    # httpcore says "peer closed connection without sending complete message body": the platform
    # answered and read the prompt, so it is not the keep-alive drop that is resent for free
    # (DROPPED_BEFORE_REPLY, only "... without sending a response"): one attempt, its prompt billed.
    server = CuttingServer()
    cfg = config(server.port)
    cfg["tiers"]["small"]["deployments"] = [{"id": "s:m", "plain_via_stream": False}]
    try:
        with Client(config=cfg) as client, pytest.raises(APIConnectionError) as info:
            client.chat.completions.create(model="small", messages=MESSAGES)
    finally:
        server.close()
    assert info.value.code == BROKEN_AFTER_SEND, info.value
    assert server.requests == 1
    assert [a.status for a in info.value.attempts] == ["error"]


def test_connect_time_is_recorded_on_a_new_connection_only(fault_server):
    cfg = {"providers": {"f": {"kind": "vllm", "base_url": fault_server.base_url}},
           "tiers": {"small": {"deployments": ["f:m"]}},
           "pricing": {"f:*": {"input_per_million": 0, "output_per_million": 0}}, "ledger": {"sink": "memory"}}
    with Client(config=cfg) as client:
        first = client.chat.completions.create(model="small", messages=MESSAGES)
        second = client.chat.completions.create(model="small", messages=MESSAGES)
    assert first.route.attempts[0].connect_s is not None and first.route.attempts[0].connect_s > 0
    assert second.route.attempts[0].connect_s is None


@pytest.mark.parametrize("transport", ["httpx", "aiohttp"])
def test_async_connect_time_is_recorded_on_a_new_connection_only(fault_server, transport):
    cfg = {"providers": {"f": {"kind": "vllm", "base_url": fault_server.base_url}},
           "tiers": {"small": {"deployments": ["f:m"]}},
           "pricing": {"f:*": {"input_per_million": 0, "output_per_million": 0}}, "ledger": {"sink": "memory"}}

    async def main():
        async with AsyncClient(config=cfg, transport=transport) as client:
            first = await client.chat.completions.create(model="small", messages=MESSAGES)
            second = await client.chat.completions.create(model="small", messages=MESSAGES)
            return first, second

    first, second = asyncio.run(main())
    assert first.route.attempts[0].connect_s is not None and first.route.attempts[0].connect_s > 0
    assert second.route.attempts[0].connect_s is None


@pytest.mark.parametrize("transport", ["httpx", "aiohttp"])
def test_async_pool_keeps_the_providers_connection_limit(fault_server, transport):
    """httpx-aiohttp would open up to 100 connections whatever the config says."""
    cfg = {"providers": {"f": {"kind": "vllm", "base_url": fault_server.base_url, "max_connections": 3}},
           "tiers": {"small": {"deployments": ["f:m"], "max_retries": 0}},
           "pricing": {"f:*": {"input_per_million": 0, "output_per_million": 0}}, "ledger": {"sink": "memory"}}
    for _ in range(10):
        fault_server.push(slow_headers(0.2))
    before = fault_server.connections_total

    async def main():
        async with AsyncClient(config=cfg, transport=transport) as client:
            return await asyncio.gather(*(client.chat.completions.create(model="small", messages=MESSAGES)
                                          for _ in range(10)))

    assert len(asyncio.run(main())) == 10
    assert fault_server.connections_total - before <= 3


class CapturingServer(DroppingServer):
    """Answers every request on a connection and keeps each request's head and body."""

    def __init__(self) -> None:
        self.heads: list = []
        self.bodies: list = []
        super().__init__()

    def _read_request(self, conn: socket.socket) -> bool:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return False
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length")), 0)
        while len(rest) < length:
            rest += conn.recv(65536)
        self.heads.append(head.decode("latin-1").lower())
        self.bodies.append(rest)
        return True

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            while self._read_request(conn):
                conn.sendall(RESPONSE)


@pytest.mark.parametrize("transport", [None, "auto", "aiohttp", "httpx"])
def test_requests_ask_for_an_uncompressed_body_and_send_the_encoded_json(transport):
    server = CapturingServer()
    cfg = config(server.port)
    cfg["tiers"]["small"]["deployments"] = [{"id": "s:m", "plain_via_stream": False}]  # one JSON answer
    try:
        if transport is None:
            with Client(config=cfg) as client:
                client.chat.completions.create(model="small", messages=MESSAGES)
        else:
            async def main():
                async with AsyncClient(config=cfg, transport=transport) as client:
                    assert client._transport.backend == ("httpx" if transport == "httpx" else "aiohttp")
                    await client.chat.completions.create(model="small", messages=MESSAGES)
            asyncio.run(main())
    finally:
        server.close()
    assert len(server.heads) == 1
    assert "\r\naccept-encoding: identity\r\n" in server.heads[0] + "\r\n"
    assert json.loads(server.bodies[0])["messages"] == MESSAGES


class CookieServer(CapturingServer):
    """As CapturingServer, setting a cookie on its first answer (a load balancer's sticky cookie)."""

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            while self._read_request(conn):
                if len(self.heads) == 1:
                    conn.sendall(RESPONSE.replace(b"\r\n\r\n", b"\r\nSet-Cookie: lb=node-7; Path=/\r\n\r\n", 1))
                else:
                    conn.sendall(RESPONSE)


def test_sync_requests_carry_httpx_client_headers_and_its_cookie_jar():
    """The sync pool sends what `httpx.Client` sent: Host, its default headers, and a cookie a
    response set, on the requests after it."""
    import httpx

    server = CookieServer()
    cfg = config(server.port)
    cfg["tiers"]["small"]["deployments"] = [{"id": "s:m", "plain_via_stream": False}]
    try:
        with Client(config=cfg) as client:
            for _ in range(2):
                assert client.chat.completions.create(model="small", messages=MESSAGES).choices[0].message.content == "hi"
    finally:
        server.close()
    first, second = server.heads
    for head in (first, second):
        assert f"\r\nhost: 127.0.0.1:{server.port}\r\n" in head
        assert f"\r\nuser-agent: python-httpx/{httpx.__version__}\r\n" in head
        assert "\r\nconnection: keep-alive\r\n" in head and "\r\ncontent-length: " in head
    assert "cookie:" not in first
    assert "\r\ncookie: lb=node-7" in second + "\r\n"


def test_every_pool_shares_the_process_tls_context():
    """Loading the CA bundle costs 20-30 ms of CPU: one context for the process, not one per pool."""
    import asyncio
    import ssl

    from llmroute._http import transport as T

    sync_a, sync_b = T._SyncPool(4), T._SyncPool(8)
    assert isinstance(sync_a.pool._ssl_context, ssl.SSLContext)
    assert sync_a.pool._ssl_context is sync_b.pool._ssl_context is T._tls_context()
    assert sync_a.pool._ssl_context.verify_mode == ssl.CERT_REQUIRED and sync_a.pool._ssl_context.check_hostname

    async def session_context() -> object:
        session = T._aiohttp_session(4)
        try:
            return session.connector._ssl
        finally:
            await session.close()

    assert asyncio.run(session_context()) is T._tls_context()
    sync_a.pool.close()
    sync_b.pool.close()


def test_an_aiohttp_request_has_one_timer_at_the_deadline_never_rounded_up():
    """aiohttp's own total timer ends a request (headers and every body read) at the attempt's deadline:
    not rounded up to a whole second (aiohttp does that from 5 s unless told not to), and `sock_read`
    (a stream's first-token limit) only when it can fire before the deadline."""
    import time

    from llmroute._http.timeouts import Timeouts
    from llmroute._http.transport import _aiohttp_timeout

    stream = Timeouts(connect_s=3.0, ttft_s=8.0, total_s=60.0, read_s=8.0, read_kind="ttft")
    before = time.monotonic()
    deadline = before + 30.0
    timeout = _aiohttp_timeout(stream, deadline)
    after = time.monotonic()
    assert deadline - after <= timeout.total <= deadline - before  # what is left before the deadline
    assert timeout.sock_read == 8.0 and timeout.connect == 3.0 and timeout.sock_connect == 3.0
    assert timeout.total < timeout.ceil_threshold  # no rounding: the timer fires at the deadline
    plain = Timeouts(connect_s=3.0, ttft_s=8.0, total_s=30.0, read_s=30.0, read_kind="total")
    timeout = _aiohttp_timeout(plain, time.monotonic() + 30.0)
    assert timeout.sock_read is None  # the deadline comes first: no second timer per read
    assert _aiohttp_timeout(plain, time.monotonic() - 1.0).total == 0.001  # past: fires at once
    assert _aiohttp_timeout(plain).total == 30.0  # no deadline given: total_s from now


def test_the_sync_backend_times_tcp_and_tls_of_a_new_connection_only():
    """The sync pool times a connection in its network backend (not httpcore's `trace` extension, which
    costs ten trace events per request): TCP, then TLS on that connection, into the request's timer."""
    import time

    from llmroute._http.transport import _CONNECT_TIMER, ConnectTimer, _DeadlineBackend

    class Inner:  # httpcore's backend and stream, as far as the wrapper uses them
        def connect_tcp(self, *args, **kwargs):
            time.sleep(0.002)
            return self

        def start_tls(self, *args, **kwargs):
            time.sleep(0.002)
            return self

    timer = ConnectTimer()
    token = _CONNECT_TIMER.set(timer)
    try:
        stream = _DeadlineBackend(Inner()).connect_tcp("127.0.0.1", 1)
        tcp = timer.connect_s
        stream.start_tls(None)
    finally:
        _CONNECT_TIMER.reset(token)
    assert tcp is not None and tcp > 0 and timer.connect_s is not None and timer.connect_s > tcp
    reused = ConnectTimer()  # TLS on a stream this request did not open: not this request's connect time
    token = _CONNECT_TIMER.set(reused)
    try:
        stream.start_tls(None)
    finally:
        _CONNECT_TIMER.reset(token)
    assert reused.connect_s is None


def test_sync_headers_decode_as_httpx_does():
    """ASCII, else UTF-8, else ISO-8859-1 for every value (httpx's choice); names case-insensitive,
    repeated names joined with ", "."""
    from llmroute._http.transport import SyncHeaders

    plain = SyncHeaders([(b"Content-Type", b"application/json"), (b"X-A", b"1"), (b"x-a", b"2")])
    assert plain["content-type"] == "application/json" and plain.get("X-A") == "1, 2" and len(plain) == 2
    assert SyncHeaders([(b"X-Name", "café".encode()), (b"X-B", b"b")])["x-name"] == "café"
    assert SyncHeaders([(b"X-Name", b"caf\xe9")]).get("x-name") == "café"  # not UTF-8: ISO-8859-1
