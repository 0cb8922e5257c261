"""A hostile HTTP server on 127.0.0.1, for the bounded-read tests: raw sockets, one behaviour at a time.

`HostileServer().start()` listens on a free loopback port; `server.mode = "trickle_body"` picks what
the next requests get. Every behaviour is bounded in bytes and seconds (`MAX_SECONDS`, and each
one's own byte budget), so a client that fails to cut it off still ends. It must never be pointed
at, or forward to, anything real.

Behaviours:
- `trickle_headers`: a status line, then one header byte per `trickle_s`.
- `trickle_body`: headers promising 10,000 bytes, then one byte per `trickle_s`.
- `huge_body`: a 200 with `huge_bytes` bytes of JSON-looking padding, sent as fast as it is read.
- `gzip_bomb`: a 200 whose gzip body inflates to `bomb_bytes` of zeros.
- `long_sse_line`: an event stream whose first line is `huge_bytes` long, in 64 KiB writes.
- `runaway_sse`: a valid event stream that never ends, up to `huge_bytes`.
- `long_sse:<chars>`: a valid, complete event stream of `<chars>` characters in 4-character pieces,
  with usage (one token a piece) in its last chunk.
- `sse_then_nothing`: a 200 event stream whose body ends at once, with no event.
- `empty_sse`: an event stream of chunks with empty deltas (no content ever), up to `huge_bytes`.
- `choices:<n>`: a 200 completion with `<n>` choices (streamed as chunks when the request streams).
- `tool_args:<chars>`: a streamed tool call whose arguments run to `<chars>` characters.
- `error_usage:<status>`: an error status whose JSON body also reports `usage` (the platform billed).
- `gzip_sse`: a valid, complete event stream, gzip-compressed.
- `nested_json`: a 200 whose body is 100,000 nested lists.
- `empty_choices`: a 200 completion with `choices: []` and usage.
- `usage:<n>`: a normal completion reporting `<n>` prompt and completion tokens.
- `redirect:<code>`: a redirect to another path.
"""

from __future__ import annotations

import gzip
import json
import socket
import socketserver
import threading
import time
import zlib
from typing import Any

__all__ = ["HostileServer"]

MAX_SECONDS = 30.0
CHUNK = 64 * 1024


def _completion(text: str = "hello", usage: dict | None = None, choices: bool = True) -> bytes:
    body = {
        "id": "cmpl-h", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]
        if choices else [],
        "usage": usage or {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
    }
    return json.dumps(body).encode()


def _chunk(text: str) -> bytes:
    payload = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
               "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def _sse_stream(pieces: int) -> bytes:
    end = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
           "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    return b"".join(_chunk(f" tok{i}") for i in range(pieces)) + b"data: " + json.dumps(end).encode() + \
        b"\n\ndata: [DONE]\n\n"


class _Handler(socketserver.BaseRequestHandler):
    server: "_TCPServer"

    def _read_request(self) -> None:
        sock = self.request
        data = b""
        while b"\r\n\r\n" not in data:
            got = sock.recv(65536)
            if not got:
                return
            data += got
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        while len(body) < length:
            got = sock.recv(65536)
            if not got:
                return
            body += got
        if b"\r\nx-llmroute-probe:" not in head.lower():  # llmroute's identification GETs are not the test's calls
            self.server.owner.requests += 1

    def _send(self, data: bytes) -> bool:
        try:
            self.request.sendall(data)
            return True
        except OSError:
            return False

    def _headers(self, status: str = "200 OK", extra: str = "", length: int | None = None,
                 content_type: str = "application/json") -> bytes:
        size = f"Content-Length: {length}\r\n" if length is not None else "Transfer-Encoding: chunked\r\n"
        return (f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n{size}{extra}"
                f"Connection: close\r\n\r\n").encode()

    def _chunked(self, data: bytes) -> bool:
        return self._send(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    def handle(self) -> None:
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._read_request()
        owner = self.server.owner
        mode, started = owner.mode, time.monotonic()

        def alive() -> bool:
            return time.monotonic() - started < MAX_SECONDS and not owner.stopping

        if mode == "trickle_headers":
            self._send(b"HTTP/1.1 200 OK\r\n")
            for byte in b"X-Slow: " + b"a" * 10_000:
                if not alive() or not self._send(bytes([byte])):
                    return
                time.sleep(owner.trickle_s)
        elif mode == "trickle_body":
            self._send(self._headers(length=10_000))
            for _ in range(10_000):
                if not alive() or not self._send(b" "):
                    return
                time.sleep(owner.trickle_s)
        elif mode == "huge_body":
            self._send(self._headers(length=owner.huge_bytes))
            self._send(b'{"pad": "')
            sent, block = 9, b"x" * CHUNK
            while sent < owner.huge_bytes and alive():
                if not self._send(block):
                    return
                sent += len(block)
        elif mode == "gzip_bomb":
            body = owner.bomb()
            self._send(self._headers(length=len(body), extra="Content-Encoding: gzip\r\n"))
            self._send(body)
        elif mode in ("long_sse_line", "runaway_sse"):
            self._send(self._headers(content_type="text/event-stream"))
            sent = 0
            if mode == "long_sse_line":
                self._chunked(b"data: ")
            while sent < owner.huge_bytes and alive():
                piece = b"y" * CHUNK if mode == "long_sse_line" else _chunk(" tok") * 256
                if not self._chunked(piece):
                    return
                sent += len(piece)
            self._send(b"0\r\n\r\n")
        elif mode == "gzip_sse":
            body = gzip.compress(_sse_stream(50))
            self._send(self._headers(content_type="text/event-stream", extra="Content-Encoding: gzip\r\n"))
            for i in range(0, len(body), 97):  # many small writes: the client must inflate as it goes
                self._chunked(body[i:i + 97])
            self._send(b"0\r\n\r\n")
        elif mode == "nested_json":
            body = b"[" * 100_000 + b"]" * 100_000
            self._send(self._headers(length=len(body)) + body)
        elif mode == "empty_choices":
            body = _completion(choices=False)
            self._send(self._headers(length=len(body)) + body)
        elif mode.startswith("usage:"):
            n = int(mode.split(":", 1)[1])
            body = _completion(usage={"prompt_tokens": n, "completion_tokens": n, "total_tokens": 2 * n})
            self._send(self._headers(length=len(body)) + body)
        elif mode.startswith("long_sse:"):
            chars = int(mode.split(":", 1)[1])
            self._send(self._headers(content_type="text/event-stream"))
            piece, sent = _chunk("abcd"), 0
            while sent < chars and alive():
                count = min(256, (chars - sent + 3) // 4)
                if not self._chunked(piece * count):
                    return
                sent += 4 * count
            usage = {"prompt_tokens": 5, "completion_tokens": chars // 4, "total_tokens": 5 + chars // 4}
            end = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                   "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": usage}
            self._chunked(b"data: " + json.dumps(end).encode() + b"\n\ndata: [DONE]\n\n")
            self._send(b"0\r\n\r\n")
        elif mode == "sse_then_nothing":
            self._send(self._headers(content_type="text/event-stream") + b"0\r\n\r\n")
        elif mode == "empty_sse":
            self._send(self._headers(content_type="text/event-stream"))
            empty = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                     "choices": [{"index": 0, "delta": {}, "finish_reason": None}]}
            piece, sent = (b"data: " + json.dumps(empty).encode() + b"\n\n") * 256, 0
            while sent < owner.huge_bytes and alive():
                if not self._chunked(piece):
                    return
                sent += len(piece)
            self._send(b"0\r\n\r\n")
        elif mode.startswith("choices:"):
            n = int(mode.split(":", 1)[1])
            choice = '{"index": %d, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}'
            usage = json.dumps({"prompt_tokens": 5, "completion_tokens": n, "total_tokens": 5 + n})
            body = ('{"id": "c", "object": "chat.completion", "created": 1, "model": "m", "choices": ['
                    + ", ".join(choice % i for i in range(n)) + '], "usage": ' + usage + "}").encode()
            self._send(self._headers(length=len(body)) + body)
        elif mode.startswith("tool_args:"):
            chars = int(mode.split(":", 1)[1])
            self._send(self._headers(content_type="text/event-stream"))

            def call(arguments: str, first: bool = False) -> bytes:
                function = {"name": "f", "arguments": arguments} if first else {"arguments": arguments}
                tool = {"index": 0, "function": function, **({"id": "call_1", "type": "function"} if first else {})}
                payload = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                           "choices": [{"index": 0, "delta": {"tool_calls": [tool]}, "finish_reason": None}]}
                return b"data: " + json.dumps(payload).encode() + b"\n\n"

            self._chunked(call("{\"a\": \"", first=True))
            sent = 0
            while sent < chars and alive():
                if not self._chunked(call("x" * 4096) * 16):
                    return
                sent += 4096 * 16
            self._chunked(b"data: [DONE]\n\n")
            self._send(b"0\r\n\r\n")
        elif mode.startswith("error_usage:"):
            code = mode.split(":", 1)[1]
            body = json.dumps({"error": {"message": "the server failed after reading the prompt", "type": "server_error"},
                               "usage": {"prompt_tokens": 1234, "completion_tokens": 56, "total_tokens": 1290}}).encode()
            self._send(self._headers(f"{code} Error", length=len(body)) + body)
        elif mode.startswith("redirect:"):
            code = mode.split(":", 1)[1]
            reason = {"301": "Moved Permanently", "302": "Found", "307": "Temporary Redirect",
                      "308": "Permanent Redirect"}.get(code, "Redirect")
            self._send(self._headers(f"{code} {reason}", extra="Location: http://127.0.0.1:9/v2/chat/completions\r\n",
                                     length=0))
        else:
            body = _completion()
            self._send(self._headers(length=len(body)) + body)


class _TCPServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    owner: "HostileServer"


class HostileServer:
    def __init__(self) -> None:
        self.mode = "ok"
        self.trickle_s = 0.25
        self.huge_bytes = 64 << 20
        self.bomb_bytes = 256 << 20
        self.requests = 0
        self.stopping = False
        self._bomb: bytes | None = None
        self._server: _TCPServer | None = None

    def bomb(self) -> bytes:
        if self._bomb is None:
            packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
            zeros = bytes(1 << 20)
            self._bomb = b"".join(packer.compress(zeros) for _ in range(self.bomb_bytes >> 20)) + packer.flush()
        return self._bomb

    def start(self) -> "HostileServer":
        self._server = _TCPServer(("127.0.0.1", 0), _Handler)
        self._server.owner = self
        threading.Thread(target=self._server.serve_forever, name="hostile-server", daemon=True).start()
        return self

    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def stop(self) -> None:
        self.stopping = True
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> "HostileServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
