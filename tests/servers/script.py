"""What a loopback platform server answers next, and what it was sent.

A test scripts replies (`Reply`) into a `Script` — per path, per model, or
globally — and reads back every `RecordedRequest`. A reply describes an outcome
in platform-neutral terms (an error *kind* such as "rate_limit", a list of text
pieces, timings, faults); each platform module renders it in its own wire
format. This module holds data only: it must never do I/O or know a platform.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Reply:
    """One scripted answer. Every field has a neutral default; set only what the test needs.

    Outcome (pick one; the first that is set wins):
      reset_before   close the connection with a TCP RST right after reading the request.
      close_before   close the connection cleanly (FIN) right after reading the request, with
                     no response: what a server does to a keep-alive connection it drops.
      body           raw body (dict/list -> JSON, str/bytes as is) sent with `status`;
                     bypasses all platform formatting.
      error          a platform error kind ("auth", "not_found", "bad_request", "context",
                     "rate_limit", "overloaded", "server", plus platform ones: see
                     `server.error_kinds`), rendered in that platform's shape and status.
                     `status` overrides the kind's status when not 200.
      otherwise      a completion: `pieces` (None -> the server's default text), optional
                     `reasoning` pieces streamed first, `finish_reason` (None -> "stop", or
                     "length" when max_tokens cut the text; platform default may differ).

    Timing (seconds): `delay_s` before the status line; for streams `ttft_s` between the
    headers and the first piece and `gap_s` between pieces (a float, or one float per gap).
    Timings are scheduled against absolute deadlines so they do not drift.

    Stream faults: `reset_after_chunks=N` sends N pieces then a TCP RST; `malformed_at=N`
    inserts an unparseable `data:` line before piece N; `error_at=N` sends the platform's
    mid-stream error event (kind `error`, default per platform) after N pieces and ends;
    `omit_done` ends a complete stream (finish reason sent) without its `[DONE]` line.

    Usage: `usage` overrides numbers (keys prompt_tokens, completion_tokens,
    cached_tokens, reasoning_tokens, cache_creation_tokens and explicit_cache (1: an explicit
    context cache), rendered by the platforms that report them; total is recomputed unless given); `omit_usage`
    drops usage everywhere; `cached_tokens` sets the cached prompt tokens reported.
    `stream` forces a streamed or a plain answer regardless of the request.
    """

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None
    error: str | None = None
    message: str | None = None
    pieces: Sequence[str] | None = None
    reasoning: Sequence[str] = ()
    finish_reason: str | None = None
    usage: dict[str, int] | None = None
    omit_usage: bool = False
    cached_tokens: int = 0
    delay_s: float = 0.0
    ttft_s: float = 0.0
    gap_s: float | Sequence[float] = 0.0
    reset_before: bool = False
    close_before: bool = False
    reset_after_chunks: int | None = None
    malformed_at: int | None = None
    error_at: int | None = None
    omit_done: bool = False
    stream: bool | None = None

    def gap_after(self, index: int) -> float:
        """Seconds to wait after piece `index` (0-based) before the next one."""
        if isinstance(self.gap_s, (int, float)):
            return float(self.gap_s)
        gaps = list(self.gap_s)
        if not gaps:
            return 0.0
        return float(gaps[index] if index < len(gaps) else gaps[-1])


@dataclass
class RecordedRequest:
    """One request as the server received it. Header names are lower-case."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        """The body parsed as JSON, or None if it is empty or not JSON."""
        if not self.body:
            return None
        try:
            return json.loads(self.body)
        except ValueError:
            return None

    @property
    def bearer(self) -> str | None:
        """The token from `Authorization: Bearer <token>`, if any."""
        auth = self.headers.get("authorization", "")
        return auth[7:] if auth[:7].lower() == "bearer " else None


class Script:
    """Thread-safe queues of replies (tests push from their thread, the server pops from its loop).

    Lookup order for a request: the queue for its path, then the queue for its model,
    then the global queue, then `default` (None -> the platform's normal behaviour).
    """

    def __init__(self, record_limit: int = 100_000) -> None:
        self._lock = threading.Lock()
        self._by_path: dict[str, deque[Reply]] = {}
        self._by_model: dict[str, deque[Reply]] = {}
        self._global: deque[Reply] = deque()
        self.default: Reply | None = None
        # Bounded so a long benchmark run cannot grow memory without limit.
        self.requests: deque[RecordedRequest] = deque(maxlen=record_limit)

    def push(self, *replies: Reply, path: str | None = None, model: str | None = None) -> None:
        if path is not None and model is not None:
            raise ValueError("script a reply by path or by model, not both")
        with self._lock:
            if path is not None:
                queue = self._by_path.setdefault(path, deque())
            elif model is not None:
                queue = self._by_model.setdefault(model, deque())
            else:
                queue = self._global
            queue.extend(replies)

    def pop(self, path: str, model: str | None) -> Reply | None:
        with self._lock:
            for queue in (self._by_path.get(path), self._by_model.get(model or "")):
                if queue:
                    return queue.popleft()
            if self._global:
                return self._global.popleft()
            return self.default

    def pending(self) -> int:
        """Scripted replies not yet consumed (the default reply is not counted)."""
        with self._lock:
            return (
                len(self._global)
                + sum(map(len, self._by_path.values()))
                + sum(map(len, self._by_model.values()))
            )

    def record(self, request: RecordedRequest) -> None:
        self.requests.append(request)

    def reset(self) -> None:
        with self._lock:
            self._by_path.clear()
            self._by_model.clear()
            self._global.clear()
            self.default = None
            self.requests.clear()
