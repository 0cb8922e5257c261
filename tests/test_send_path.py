"""Every operation goes through the one send path (`llmroute/_http/exchange.py`): its read caps and its
timeouts hold for chat (plain and streamed), embeddings, `models.list()` and the batch APIs' uploads,
polls, downloads and cancels, on the sync client and on both async transports.

Real sockets to the loopback platform servers (tests/servers). A cap is shown by a tiny `ReadLimits`
(1 KiB, the smallest allowed) against an answer a few KiB long: the operation fails with
`ResponseTooLargeError` naming the cap. A timeout is shown by a server that waits 10 s before
answering an operation whose limit is 1 s: the operation fails with `APITimeoutError` (without the
limit it would succeed after the wait; nothing is timed by the test)."""

from __future__ import annotations

import asyncio
import gzip
import json
import re
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterator

import pytest

import llmroute as L
from llmroute._http.exchange import redirected
from llmroute._http.multipart import encode_multipart
from llmroute._http.timeouts import Timeouts
from llmroute.batch import AsyncBatches, Batches
from llmroute._http.request import HttpRequest
from tests.batch.helpers import MODELS, provider_entry, requests
from tests.servers.base import Response
from tests.servers.batch import TogetherBatchServer, parse_multipart
from tests.servers.script import RecordedRequest, Reply

KIB = 1024
TINY = L.ReadLimits(max_response_bytes=KIB, max_decoded_bytes=KIB, max_sse_line_bytes=KIB)
MODES = ["sync", "aiohttp", "httpx"]  # the sync client; the async client on each of its transports
SLOW_S = 10.0  # how long a slow server waits before answering; every limit under test is 1 s
MESSAGES = [{"role": "user", "content": "say something long"}]


def _config(server: Any, *, timeout_s: float | None = None) -> dict[str, Any]:
    provider: dict[str, Any] = {"kind": "openai-compatible", "base_url": server.base_url}
    if server.api_key is not None:
        provider["api_key"] = server.api_key
    if timeout_s is not None:
        provider["timeout_s"] = timeout_s
    return {
        "providers": {"p": provider},
        "tiers": {"t": {"deployments": ["p:gpt-4o-mini"]},
                  "e": {"kind": "embedding", "deployments": ["p:text-embedding-3-small"]}},
        "resilience": {"max_retries": 0, "consecutive_failures": 10_000, "min_calls": 10_000,
                       "open_on_retry_after": False},
        "pricing": {"p:*": {"input_per_million": 0, "output_per_million": 0, "currency": "USD"}},
        "ledger": {"sink": "memory"},
    }


def _run(mode: str, config: dict[str, Any], op: Callable[[Any], Any], limits: L.ReadLimits | None = None) -> Any:
    """`op(client)` on a fresh client of `mode`; awaited for the async client."""
    if mode == "sync":
        with L.Client(config, read_limits=limits) as client:
            return op(client)

    async def main() -> Any:
        async with L.AsyncClient(config, transport=mode, read_limits=limits) as client:
            out = op(client)
            return await out if isinstance(out, Awaitable) else out

    return asyncio.run(main())


def _chat_plain(client: Any) -> Any:
    return client.chat.completions.create(model="t", messages=MESSAGES)


def _chat_stream(client: Any) -> Any:
    stream = client.chat.completions.create(model="t", messages=MESSAGES, stream=True)
    if isinstance(stream, Awaitable):
        async def drain() -> Any:
            async for _ in await stream:
                pass

        return drain()
    for _ in stream:
        pass
    return None


def _embeddings(client: Any) -> Any:
    return client.embeddings.create(model="e", input="a text to embed")


def _models(client: Any) -> Any:
    return client.models.list()


def _the_error(exc: BaseException) -> BaseException:
    """The attempt's own error inside what the call raised."""
    if isinstance(exc, L.AllDeploymentsFailedError) and exc.last_error is not None:
        return exc.last_error
    if isinstance(exc, L.StreamInterruptedError) and exc.__cause__ is not None:
        return exc.__cause__
    return exc


def _too_large(error: BaseException, limit: str) -> None:
    error = _the_error(error)
    assert isinstance(error, L.ResponseTooLargeError), repr(error)
    assert error.limit == limit and error.max_bytes == KIB
    assert f"({limit} cap)" in str(error)


# ---- chat, embeddings, models.list() -------------------------------------------------------------

LONG_PIECES = [f"word{i:04d} " for i in range(400)]  # about 4 KB of text, in 400 stream chunks


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("operation", ["chat_plain", "chat_stream", "embeddings", "models"])
def test_the_wire_cap_holds_for_every_operation(openai_server: Any, mode: str, operation: str) -> None:
    op = {"chat_plain": _chat_plain, "chat_stream": _chat_stream, "embeddings": _embeddings,
          "models": _models}[operation]
    if operation.startswith("chat"):
        openai_server.push(Reply(pieces=LONG_PIECES))
    elif operation == "models":  # a real list, padded past 1 KiB with models the platform serves
        cards = [{"id": f"model-{i}", "object": "model", "created": 0, "owned_by": "x"} for i in range(60)]
        openai_server.push(Reply(body={"object": "list", "data": cards}), path="/v1/models")
    # embeddings: one 1536-float vector is about 19 KB as it is
    with pytest.raises(L.LLMRouteError) as info:
        _run(mode, _config(openai_server), op, TINY)
    _too_large(info.value, "response_bytes")
    # the same operation within the default caps succeeds: the cap is what refused it
    if operation.startswith("chat"):
        openai_server.push(Reply(pieces=LONG_PIECES))
    elif operation == "models":
        openai_server.push(Reply(body={"object": "list", "data": cards}), path="/v1/models")
    _run(mode, _config(openai_server), op)


@pytest.mark.parametrize("mode", MODES)
def test_the_sse_line_cap_holds_for_a_stream(openai_server: Any, mode: str) -> None:
    openai_server.push(Reply(pieces=["x" * 3000]))  # one event of about 3 KB
    limits = L.ReadLimits(max_response_bytes=1 << 20, max_decoded_bytes=1 << 20, max_sse_line_bytes=KIB)
    with pytest.raises(L.LLMRouteError) as info:
        _run(mode, _config(openai_server), _chat_stream, limits)
    _too_large(info.value, "sse_line_bytes")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("operation", ["embeddings", "models"])
def test_the_decoded_cap_holds_for_a_compressed_body(openai_server: Any, mode: str, operation: str) -> None:
    """A gzip body under 1 KiB on the wire that inflates past 1 KiB: the decoded cap ends it."""
    padded = json.dumps({"object": "list", "data": [], "pad": " " * 50_000}).encode()
    body = gzip.compress(padded)
    assert len(body) < KIB
    path = "/v1/models" if operation == "models" else "/v1/embeddings"
    openai_server.push(Reply(body=body, headers={"Content-Type": "application/json", "Content-Encoding": "gzip"}),
                       path=path)
    limits = L.ReadLimits(max_response_bytes=KIB, max_decoded_bytes=KIB, max_sse_line_bytes=KIB)
    with pytest.raises(L.LLMRouteError) as info:
        _run(mode, _config(openai_server), _models if operation == "models" else _embeddings, limits)
    _too_large(info.value, "decoded_bytes")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("operation", ["chat_plain", "chat_stream", "embeddings", "models"])
def test_the_timeout_holds_for_every_operation(openai_server: Any, mode: str, operation: str) -> None:
    op = {"chat_plain": _chat_plain, "chat_stream": _chat_stream, "embeddings": _embeddings,
          "models": _models}[operation]
    path = {"models": "/v1/models", "embeddings": "/v1/embeddings"}.get(operation)
    openai_server.push(Reply(delay_s=SLOW_S), path=path)
    with pytest.raises(L.LLMRouteError) as info:
        _run(mode, _config(openai_server, timeout_s=1.0), op)
    error = _the_error(info.value)
    assert isinstance(error, L.APITimeoutError), repr(error)
    assert error.seconds is not None and error.seconds <= 1.0


# ---- the batch APIs ------------------------------------------------------------------------------


def _batch_operation(request: RecordedRequest) -> str | None:
    path, method = request.path, request.method
    if method == "POST" and path.endswith("/files"):
        return "upload"
    if method == "GET" and re.search(r"/files/[^/]+/content$", path):
        return "download"
    if method == "GET" and re.search(r"/batches/[^/]+$", path):
        return "poll"
    if method == "POST" and path.endswith("/cancel"):
        return "cancel"
    return None


class _ShapedBatchServer(TogetherBatchServer):
    """Together's loopback batch server; one operation's answers padded past 1 KiB (`pad`) or held
    back for `SLOW_S` (`slow`)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pad: str | None = None
        self.slow: str | None = None
        self.echo: str | None = None  # this operation is refused with a 400 that echoes the request's key

    async def handle(self, request: RecordedRequest) -> Response:  # type: ignore[override]
        response = await super().handle(request)
        operation = _batch_operation(request)
        if operation is not None and operation == self.echo:
            return Response.json({"error": {"message": f"refused for {request.headers.get('authorization')}",
                                            "type": "invalid_request_error"}}, 400)
        if operation is not None and operation == self.pad:
            response.body += b" " * (4 * KIB)  # trailing blanks: still the same JSON / JSONL
        if operation is not None and operation == self.slow:
            response.delay_s = SLOW_S
        return response


@pytest.fixture(scope="module")
def batch_server() -> Iterator[_ShapedBatchServer]:
    server = _ShapedBatchServer().start()
    yield server
    server.stop()


@pytest.fixture
def shaped(batch_server: _ShapedBatchServer) -> Iterator[_ShapedBatchServer]:
    batch_server.reset()
    batch_server.pad = batch_server.slow = batch_server.echo = None
    yield batch_server
    batch_server.pad = batch_server.slow = batch_server.echo = None
    batch_server.reset()


def _batch_config(server: Any, tmp_path: Path) -> dict[str, Any]:
    return {
        "providers": {"tg": provider_entry("together", server)},
        "tiers": {"bulk": {"deployments": [f"tg:{MODELS['together']}"]}},
        "batch": {"store": str(tmp_path / "jobs.sqlite"), "poll_interval_s": 0.001, "max_poll_interval_s": 0.01},
        "ledger": {"path": str(tmp_path / "ledger.sqlite")},
    }


def _batch_steps(batches: Any, operation: str, until: str) -> Any:
    """Drive a job to `operation` (sync `Batches`): the job's view once an event of kind `until` is
    recorded or the job ended."""
    view = batches.create(requests(3), model="bulk")  # uploads and creates the platform job
    if operation == "cancel":
        return batches.cancel(view.id)
    for _ in range(0 if operation == "upload" else 50):  # a poll; the download once the platform job ended
        view = batches.poll(view.id)
        if view.finished or any(e["kind"] == until for e in view.events):
            break
    return view


async def _abatch_steps(batches: Any, operation: str, until: str) -> Any:
    view = await batches.create(requests(3), model="bulk")
    if operation == "cancel":
        return await batches.cancel(view.id)
    for _ in range(0 if operation == "upload" else 50):
        view = await batches.poll(view.id)
        if view.finished or any(e["kind"] == until for e in view.events):
            break
    return view


def _run_batch(mode: str, config: dict[str, Any], operation: str, until: str, **kwargs: Any) -> Any:
    if mode == "sync":
        with L.Client(config) as client:
            batches = Batches(client, **kwargs)
            try:
                return _batch_steps(batches, operation, until)
            finally:
                batches.close()

    async def main() -> Any:
        async with L.AsyncClient(config, transport=mode) as client:
            batches = AsyncBatches(client, **kwargs)
            try:
                return await _abatch_steps(batches, operation, until)
            finally:
                await batches.aclose()

    return asyncio.run(main())


# What the job records when a request of each operation fails for good (refused) or for now (retry).
_EVENT = {"upload": "refused", "poll": "refused", "download": "refused", "cancel": "cancel_error"}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("operation", ["upload", "poll", "download", "cancel"])
def test_the_wire_cap_holds_for_every_batch_operation(shaped: _ShapedBatchServer, tmp_path: Path, mode: str,
                                                      operation: str) -> None:
    shaped.pad = operation
    view = _run_batch(mode, _batch_config(shaped, tmp_path), operation, _EVENT[operation], read_limits=TINY)
    assert any(_batch_operation(r) == operation for r in shaped.requests), "the operation was sent"
    failed = [e["detail"] for e in view.events if e["kind"] == _EVENT[operation]]
    assert failed and all(f"passed {KIB} bytes (response_bytes cap)" in d for d in failed), view.events
    if operation != "cancel":  # the job's requests failed with the typed error
        assert view.failed == 3


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("operation", ["upload", "poll", "download", "cancel"])
def test_the_timeout_holds_for_every_batch_operation(shaped: _ShapedBatchServer, tmp_path: Path, mode: str,
                                                     operation: str) -> None:
    shaped.slow = operation
    limits = Timeouts(connect_s=1.0, ttft_s=1.0, total_s=1.0, read_s=1.0, read_kind="read")
    kind = "cancel_error" if operation == "cancel" else "retry"
    view = _run_batch(mode, _batch_config(shaped, tmp_path), operation, kind, timeouts=limits)
    assert any(_batch_operation(r) == operation for r in shaped.requests), "the operation was sent"
    timed_out = [e["detail"] for e in view.events if e["kind"] == kind]
    assert timed_out and all("timeout" in d.lower() for d in timed_out), view.events
    if operation != "cancel":  # (a cancel the server carried out before its slow answer ends the job anyway)
        assert not view.finished


@pytest.mark.parametrize("mode", MODES)
def test_a_key_echoed_by_a_batch_refusal_is_scrubbed(shaped: _ShapedBatchServer, tmp_path: Path, mode: str) -> None:
    shaped.echo = "upload"
    view = _run_batch(mode, _batch_config(shaped, tmp_path), "upload", "refused")
    refused = [e["detail"] for e in view.events if e["kind"] == "refused"]
    assert refused and all("refused for Bearer ***" in d for d in refused), view.events
    assert shaped.api_key and not any(shaped.api_key in str(e) for e in view.events)


@pytest.mark.parametrize("mode", MODES)
def test_a_key_echoed_by_a_model_list_refusal_is_scrubbed(openai_server: Any, mode: str) -> None:
    key = openai_server.api_key
    assert key
    openai_server.push(Reply(status=401, body={"error": {"message": f"Incorrect API key provided: {key}",
                                                         "type": "invalid_request_error"}}), path="/v1/models")
    with pytest.raises(L.AuthenticationError) as info:
        _run(mode, _config(openai_server), _models)
    assert key not in str(info.value) and key not in repr(info.value) and "***" in str(info.value)


def test_the_batch_defaults_allow_large_result_files() -> None:
    from llmroute.batch.shells import BATCH_READ_LIMITS, BATCH_TIMEOUTS

    assert BATCH_READ_LIMITS.max_response_bytes >= 1 << 30 and BATCH_READ_LIMITS.max_decoded_bytes >= 1 << 30
    assert BATCH_TIMEOUTS.read_kind == "read" and BATCH_TIMEOUTS.total_s > BATCH_TIMEOUTS.read_s


# ---- the sans-I/O pieces the batch path needs ----------------------------------------------------


def test_a_multipart_body_reads_back_field_by_field() -> None:
    ctype, body = encode_multipart({"purpose": "batch"}, {"file": ("p1.jsonl", b'{"a": 1}\n{"b": 2}\n',
                                                                   "application/jsonl")}, "b0undary")
    assert ctype == "multipart/form-data; boundary=b0undary"
    fields = parse_multipart(RecordedRequest(method="POST", path="/", query="", headers={"content-type": ctype},
                                             body=body))
    assert fields == {"purpose": b"batch", "file": b'{"a": 1}\n{"b": 2}\n'}
    with pytest.raises(ValueError):
        encode_multipart(None, {"file": ("f", b"--b0undary", "text/plain")}, "b0undary")


def test_a_redirect_off_the_origin_drops_the_key() -> None:
    request = HttpRequest("GET", "https://api.example.test/v1/files/f1/content",
                          {"Authorization": "Bearer sk-secret-key", "Accept": "*/*"}, None,  # type: ignore[arg-type]
                          False)
    same = redirected(request, 302, {"location": "/v1/files/f1/raw"})
    assert same is not None and same.url == "https://api.example.test/v1/files/f1/raw"
    assert same.headers["Authorization"] == "Bearer sk-secret-key"
    away = redirected(request, 307, {"location": "https://bucket.storage.test/f1?sig=abc"})
    assert away is not None and "Authorization" not in away.headers and away.headers["Accept"] == "*/*"
    post = HttpRequest("POST", "https://api.example.test/v1/x", {"Content-Type": "application/json"}, {"a": 1}, False)
    seen = redirected(post, 303, {"location": "/v1/y"})
    assert seen is not None and seen.method == "GET" and seen.json is None and "Content-Type" not in seen.headers
    assert redirected(request, 200, {"location": "/elsewhere"}) is None


# ---- nothing sends around the path -----------------------------------------------------------------


def test_only_the_send_path_opens_a_transport() -> None:
    """No module outside llmroute/_http imports an HTTP library, and only exchange.py calls a
    transport's `open` (read from the source, function-local imports included)."""
    import ast

    package = Path(L.__file__).resolve().parent
    libraries = {"httpx", "httpcore", "aiohttp", "requests", "urllib3", "urllib.request", "http.client"}
    importers, openers = [], []
    for path in package.rglob("*.py"):
        name = str(path.relative_to(package))
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                mods = [node.module or ""]
            else:
                mods = []
            if any(m in libraries or m.split(".")[0] in libraries for m in mods) and not name.startswith("_http/"):
                importers.append(name)
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "open"
                    and "transport" in ast.unparse(node.func.value).lower()):
                openers.append(name)
    assert importers == []
    assert set(openers) == {"_http/exchange.py"}


# ---- redirects over real sockets (batch downloads) --------------------------------------------------


class _Redirecting:
    """Two loopback HTTP servers (two origins): `/here` on the first redirects to `/there` on itself,
    `/away` to `/file` on the second; each records the Authorization header it was sent."""

    def __init__(self) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        seen: list[tuple[int, str, str | None]] = []
        self.seen = seen
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                port = self.server.server_address[1]
                seen.append((port, self.path, self.headers.get("Authorization")))
                if self.path == "/here":
                    self._answer(302, b"", location="/there")
                elif self.path == "/away":
                    self._answer(307, b"", location=f"http://127.0.0.1:{owner.second.server_address[1]}/file")
                else:
                    self._answer(200, b'{"ok": true}' + b" " * (4 * KIB))

            def _answer(self, status: int, body: bytes, location: str | None = None) -> None:
                self.send_response(status)
                if location:
                    self.send_header("Location", location)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.first = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.second = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        for server in (self.first, self.second):
            threading.Thread(target=server.serve_forever, daemon=True).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.first.server_address[1]}{path}"

    def close(self) -> None:
        for server in (self.first, self.second):
            server.shutdown()
            server.server_close()


@pytest.fixture
def redirecting() -> Iterator[_Redirecting]:
    servers = _Redirecting()
    yield servers
    servers.close()


def _with_transport(mode: str, use: Callable[[Any], Any]) -> Any:
    """`use(transport)` on a fresh transport of `mode` (its result awaited on the async ones), closed after."""
    from llmroute._http.transport import AsyncTransport, SyncTransport

    if mode == "sync":
        transport = SyncTransport()
        try:
            return use(transport)
        finally:
            transport.close()

    async def main() -> Any:
        atransport = AsyncTransport(mode)
        try:
            return await use(atransport)
        finally:
            await atransport.aclose()

    return asyncio.run(main())


def _fetch(mode: str, url: str, limits: L.ReadLimits) -> Any:
    from llmroute._http.exchange import Exchange, afetch, fetch

    key = {"Authorization": "Bearer sk-test-secret-000"}
    request = HttpRequest("GET", url, key, None, False)  # type: ignore[arg-type]
    timeouts = Timeouts(connect_s=5.0, ttft_s=5.0, total_s=5.0, read_s=5.0, read_kind="read")
    ex = Exchange(request, timeouts, limits, provider="batch-test", deployment="batch", max_connections=2)
    return _with_transport(mode, lambda t: (fetch if mode == "sync" else afetch)(t, ex, follow_redirects=True))


@pytest.mark.parametrize("mode", MODES)
def test_a_followed_redirect_keeps_the_key_only_on_its_origin(redirecting: _Redirecting, mode: str) -> None:
    big = L.ReadLimits()
    reply = _fetch(mode, redirecting.url("/here"), big)
    assert reply.status == 200 and reply.body.startswith(b'{"ok": true}')
    reply = _fetch(mode, redirecting.url("/away"), big)
    assert reply.status == 200
    keys = {(port == redirecting.first.server_address[1], path): auth for port, path, auth in redirecting.seen}
    assert keys[(True, "/here")] == keys[(True, "/there")] == keys[(True, "/away")] == "Bearer sk-test-secret-000"
    assert keys[(False, "/file")] is None  # the other origin never saw the key
    with pytest.raises(L.ResponseTooLargeError, match=r"\(response_bytes cap\)"):
        _fetch(mode, redirecting.url("/away"), TINY)  # the redirected body is read within the caps too


@pytest.mark.parametrize("mode", MODES)
def test_the_semantic_cache_embedder_reads_within_the_caps(openai_server: Any, mode: str,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    """A gzip body that inflates past the default 32 MiB decoded cap: the embedder's lookup is a miss
    (None, one failure counted), not 40 MiB in memory."""
    from llmroute.cache.semantic import Embedder

    bomb = gzip.compress(b'{"data": [{"embedding": [' + b" " * (40 << 20) + b"1.0]}]}")
    embedder = Embedder(openai_server.base_url, "text-embedding-3-small", api_key=openai_server.api_key)
    for body in (bomb, None):  # the bomb, then a real answer: the same path reads it
        if body is not None:
            openai_server.push(Reply(body=body, headers={"Content-Type": "application/json",
                                                         "Content-Encoding": "gzip"}), path="/v1/embeddings")
        vector = _with_transport(mode, lambda t: (embedder.embed if mode == "sync" else embedder.aembed)("a prompt", t))
        if body is not None:
            assert vector is None and embedder.failures == 1
            assert "ResponseTooLargeError" in caplog.text and "(decoded_bytes cap)" in caplog.text
        else:
            assert vector is not None and len(vector) == 1536 and embedder.failures == 1
