"""Fault server for the resilience and bench-accuracy tests: OpenAI wire format, scripted outcomes.

Any model id and any (or no) API key is accepted, so a test scripts only the fault it
studies. Builders below return `Reply` objects to push in order, e.g.
`srv.push(status(503), status(429, retry_after=2), timed(0.2, [0.01] * 9))`; when the
queue is empty the server answers normally. Timings are scheduled against absolute
deadlines, so TTFT and gaps match the script within a few milliseconds on an idle
machine. It must never be pointed at, or forward to, anything real.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tests.servers.openai_compat import OpenAICompatServer
from tests.servers.script import Reply


class FaultServer(OpenAICompatServer):
    platform = "fault"
    base_path = "/v1"
    embedding_models = {"fault-embed": 8}
    default_models = {"fault-model": 1_000_000}
    default_api_key = None
    auth_mode = "none"
    status_uses_catalog = False  # a scripted status carries only the headers the test gave it
    chunk_extras: dict[str, Any] = {}

    def accepts_model(self, model: Any) -> bool:
        return isinstance(model, str) and bool(model)

    def check_context(self, body, model, prompt, limit):  # type: ignore[override]
        return limit


def status(code: int, *, retry_after: float | str | None = None, message: str | None = None,
           headers: dict[str, str] | None = None) -> Reply:
    """An HTTP error with an OpenAI-shaped body; `retry_after` sets the Retry-After header (seconds)."""
    hdrs = dict(headers or {})
    if retry_after is not None:
        hdrs["Retry-After"] = str(retry_after)
    return Reply(status=code, headers=hdrs, message=message or f"scripted {code}")


def slow_ttft(seconds: float, pieces: Sequence[str] | None = None) -> Reply:
    """A normal answer whose first piece comes `seconds` after the response headers."""
    return Reply(pieces=pieces, ttft_s=seconds)


def slow_headers(seconds: float, pieces: Sequence[str] | None = None) -> Reply:
    """Nothing at all (not even the status line) for `seconds`, then a normal answer."""
    return Reply(pieces=pieces, delay_s=seconds)


def reset_before() -> Reply:
    """A TCP reset right after the request is read: no status line."""
    return Reply(reset_before=True)


def close_before() -> Reply:
    """The connection closed cleanly right after the request is read, with no response."""
    return Reply(close_before=True)


def stall_after(chunks: int, stall_s: float, pieces: Sequence[str]) -> Reply:
    """A 200 stream that goes silent for `stall_s` after `chunks` content pieces, then finishes."""
    gaps = [0.0] * max(0, len(pieces) - 1)
    gaps[chunks - 1] = stall_s
    return Reply(pieces=pieces, gap_s=gaps)


def reset_during(after_chunks: int, pieces: Sequence[str] | None = None, gap_s: float = 0.0) -> Reply:
    """A 200 stream that is reset after `after_chunks` content pieces."""
    return Reply(pieces=pieces, reset_after_chunks=after_chunks, gap_s=gap_s)


def malformed(at: int = 1, pieces: Sequence[str] | None = None) -> Reply:
    """A stream with an unparseable `data:` line before piece `at` (a plain answer gets a truncated JSON body)."""
    return Reply(pieces=pieces, malformed_at=at)


def error_event(at: int, pieces: Sequence[str] | None = None, message: str | None = None) -> Reply:
    """A stream that sends an OpenAI-shaped `data: {"error": ...}` event after `at` pieces."""
    return Reply(pieces=pieces, error_at=at, message=message)


def timed(ttft_s: float, gaps_s: Sequence[float], *, text: str = " tok") -> Reply:
    """A stream of len(gaps_s) + 1 pieces with the given TTFT and inter-piece gaps (bench accuracy)."""
    return Reply(pieces=[text] * (len(gaps_s) + 1), ttft_s=ttft_s, gap_s=list(gaps_s))
