"""The prompt embedder of the semantic cache: one POST to an OpenAI-compatible `/embeddings`
endpoint (a llama.cpp server started with `--embedding`, vLLM, TEI, a platform's API), sent through
the client's own transport on the one send path (`_http/exchange.py`). Request building and
response parsing are sans-I/O; `embed`/`aembed` are the thin shells. An embedder that fails (down,
slow, a bad body) makes the lookup an exact-only miss: a warning and a count, never a failed call.
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any, Dict, List

from llmroute._http.bounded import DEFAULT_READ_LIMITS
from llmroute._http.exchange import Exchange, afetch, fetch
from llmroute._http.request import HttpRequest
from llmroute._http.timeouts import Timeouts

if TYPE_CHECKING:
    from llmroute._http.transport import AsyncTransport, SyncTransport

__all__ = ["Embedder"]

log = logging.getLogger("llmroute.cache")


class Embedder:
    """`Embedder(base_url, model)`: `embed(text, transport)` -> the vector, or None on failure."""

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, timeout_s: float = 2.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._api_key = api_key
        self.timeout_s = timeout_s
        self.failures = 0
        self._warned_at = 0.0

    def __repr__(self) -> str:  # never the key
        return f"Embedder({self.base_url!r}, model={self.model!r})"

    def request(self, text: str) -> HttpRequest:
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return HttpRequest("POST", f"{self.base_url}/embeddings", headers, {"model": self.model, "input": text}, False)

    def timeouts(self) -> Timeouts:
        t = self.timeout_s
        return Timeouts(connect_s=t, ttft_s=t, total_s=t, read_s=t, read_kind="total")

    @staticmethod
    def parse(status: int, content: bytes) -> List[float]:
        """The first vector of an OpenAI embeddings response. Raises ValueError otherwise."""
        if status != 200:
            raise ValueError(f"HTTP {status}")
        doc: Dict[str, Any] = json.loads(content)
        vector = doc["data"][0]["embedding"]
        if not isinstance(vector, list) or not vector or not all(isinstance(x, (int, float)) for x in vector):
            raise ValueError("the response holds no embedding vector")
        return [float(x) for x in vector]

    def _failed(self, exc: BaseException) -> None:
        self.failures += 1
        now = time.monotonic()
        if now - self._warned_at > 60:
            self._warned_at = now
            log.warning("llmroute cache: the embeddings endpoint failed (%s: %s); semantic lookup skipped",
                        type(exc).__name__, exc)

    def exchange(self, text: str) -> Exchange:
        """The embeddings request on the one send path (`_http/exchange.py`): its timeout and the default
        read caps (a vector is a few KB; a runaway body ends at the cap, a miss)."""
        return Exchange(self.request(text), self.timeouts(), DEFAULT_READ_LIMITS, provider="llmroute-embeddings",
                        deployment="llmroute-embeddings", max_connections=8)

    def embed(self, text: str, transport: SyncTransport) -> List[float] | None:
        try:
            reply = fetch(transport, self.exchange(text))
            return self.parse(reply.status, reply.body)
        except Exception as exc:  # noqa: BLE001 - never fails the call
            self._failed(exc)
            return None

    async def aembed(self, text: str, transport: AsyncTransport) -> List[float] | None:
        try:
            reply = await afetch(transport, self.exchange(text))
            return self.parse(reply.status, reply.body)
        except Exception as exc:  # noqa: BLE001
            self._failed(exc)
            return None
