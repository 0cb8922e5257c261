"""`with_raw_response` and `with_streaming_response`, as openai-python has them.

`client.chat.completions.with_raw_response.create(...)` makes the same call and returns an
`APIResponse`: the HTTP status, headers and request id of the attempt that answered (after any
retries and failovers: `retries_taken` says how many attempts came before), and `.parse()` for the
`ChatCompletion` (or `Stream`). `with_streaming_response.create(...)` is the same as a context manager
(`.parse()` awaited on the async client), with `iter_lines()` over the answer re-encoded as the
platform's wire (JSON, or SSE `data:` lines for a stream).

This module wraps finished calls; it never sends anything itself and never logs the headers.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable, Dict, Iterator

from llmroute._http.httpx_values import headers_value

if TYPE_CHECKING:
    from llmroute.types import Attempt

__all__ = ["APIResponse", "AsyncAPIResponse", "RawResponses", "AsyncRawResponses", "StreamingResponses",
           "AsyncStreamingResponses"]


def _answering_attempt(result: Any) -> "Attempt" | None:
    """The attempt whose answer `result` (a ChatCompletion or a stream) is."""
    state = getattr(result, "_state", None)
    if state is not None:  # a stream: the attempt being read
        return state.ctx.record  # type: ignore[no-any-return]
    route = getattr(result, "route", None)
    attempts = getattr(route, "attempts", None) or []
    answered = [a for a in attempts if a.status == "ok"]
    return answered[-1] if answered else None


class APIResponse:
    """One call's HTTP answer: `status_code`, `headers`, `request_id`, `retries_taken`, and `parse()`.
    A cache hit has status 200, no headers, and `from_cache` True."""

    def __init__(self, result: Any) -> None:
        self._result = result
        attempt = _answering_attempt(result)
        self.headers = headers_value(attempt.response_headers if attempt is not None else None)
        self.status_code: int = (attempt.http_status if attempt is not None else None) or 200
        route = getattr(result, "route", None)
        self.from_cache = attempt is None and route is not None and route.cache in ("hit", "semantic-hit")
        attempts = getattr(route, "attempts", None) or []
        self.retries_taken = max(0, len(attempts) - 1)
        self.deployment = attempt.deployment if attempt is not None else getattr(route, "deployment", None)
        self._duration_s = attempt.duration_s if attempt is not None else 0.0

    @property
    def elapsed(self) -> Any:
        """How long the answering attempt took (a `timedelta`, as openai-python's); zero for a stream, whose
        attempt is still being read when the response is made."""
        from datetime import timedelta

        return timedelta(seconds=self._duration_s)

    @property
    def request_id(self) -> str | None:
        """The platform's request id (`x-request-id`), as openai-python's `_request_id`."""
        found = self.headers.get("x-request-id") or self.headers.get("request-id")
        return str(found) if found is not None else None

    @property
    def http_request(self) -> None:
        return None  # the request is llmroute's to build per attempt; see `route.attempts`

    def parse(self) -> Any:
        """The call's result: a `ChatCompletion`, or the `Stream` of a `stream=True` call."""
        return self._result

    # -- the answer as bytes (re-encoded from the parsed answer; the platform's own bytes are not kept)

    def iter_lines(self) -> Iterator[str]:
        if hasattr(self._result, "__iter__") and not hasattr(self._result, "choices"):
            for chunk in self._result:
                yield "data: " + chunk.model_dump_json(exclude_unset=True)
                yield ""
            yield "data: [DONE]"
            return
        yield self.text()

    def iter_text(self) -> Iterator[str]:
        for line in self.iter_lines():
            yield line + "\n"

    def iter_bytes(self) -> Iterator[bytes]:
        for text in self.iter_text():
            yield text.encode()

    def text(self) -> str:
        return str(self._result.model_dump_json(exclude_unset=True))

    def json(self) -> Dict[str, Any]:
        return json.loads(self.text())  # type: ignore[no-any-return]

    def read(self) -> bytes:
        return self.text().encode()

    def close(self) -> None:
        close = getattr(self._result, "close", None)
        if close is not None and not hasattr(self._result, "choices"):
            close()

    def __enter__(self) -> "APIResponse":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<APIResponse [{self.status_code}] {self.deployment}>"


class AsyncAPIResponse(APIResponse):
    """`with_streaming_response` on an `AsyncClient`: `await response.parse()`, `async with`."""

    async def parse(self) -> Any:
        return self._result

    async def iter_lines(self) -> AsyncIterator[str]:  # type: ignore[override]
        if not hasattr(self._result, "choices"):
            async for chunk in self._result:
                yield "data: " + chunk.model_dump_json(exclude_unset=True)
                yield ""
            yield "data: [DONE]"
            return
        yield self.text()

    async def aclose(self) -> None:
        aclose = getattr(self._result, "aclose", None)
        if aclose is not None and not hasattr(self._result, "choices"):
            await aclose()

    async def __aenter__(self) -> "AsyncAPIResponse":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


class RawResponses:
    """`completions.with_raw_response`: each method returns an `APIResponse` instead of its result."""

    def __init__(self, completions: Any) -> None:
        self._completions = completions

    def create(self, **kwargs: Any) -> APIResponse:
        return APIResponse(self._completions.create(**kwargs))

    def parse(self, **kwargs: Any) -> APIResponse:
        return APIResponse(self._completions.parse(**kwargs))


class AsyncRawResponses:
    """`with_raw_response` of an `AsyncClient`'s completions: `await ....create(...)`; `parse()` is plain."""

    def __init__(self, completions: Any) -> None:
        self._completions = completions

    async def create(self, **kwargs: Any) -> APIResponse:
        return APIResponse(await self._completions.create(**kwargs))

    async def parse(self, **kwargs: Any) -> APIResponse:
        return APIResponse(await self._completions.parse(**kwargs))


class _SyncManager:
    def __init__(self, call: Callable[[], Any]) -> None:
        self._call = call
        self._response: APIResponse | None = None

    def __enter__(self) -> APIResponse:
        self._response = APIResponse(self._call())
        return self._response

    def __exit__(self, *exc: Any) -> None:
        if self._response is not None:
            self._response.close()


class _AsyncManager:
    def __init__(self, call: Callable[[], Awaitable[Any]]) -> None:
        self._call = call
        self._response: AsyncAPIResponse | None = None

    async def __aenter__(self) -> AsyncAPIResponse:
        self._response = AsyncAPIResponse(await self._call())
        return self._response

    async def __aexit__(self, *exc: Any) -> None:
        if self._response is not None:
            await self._response.aclose()


class StreamingResponses:
    """`completions.with_streaming_response`: `with ....create(...) as response:`."""

    def __init__(self, completions: Any) -> None:
        self._completions = completions

    def create(self, **kwargs: Any) -> _SyncManager:
        return _SyncManager(lambda: self._completions.create(**kwargs))

    def parse(self, **kwargs: Any) -> _SyncManager:
        return _SyncManager(lambda: self._completions.parse(**kwargs))


class AsyncStreamingResponses:
    """`with_streaming_response` of an `AsyncClient`'s completions: `async with ....create(...) as response:`."""

    def __init__(self, completions: Any) -> None:
        self._completions = completions

    def create(self, **kwargs: Any) -> _AsyncManager:
        return _AsyncManager(lambda: self._completions.create(**kwargs))

    def parse(self, **kwargs: Any) -> _AsyncManager:
        return _AsyncManager(lambda: self._completions.parse(**kwargs))
