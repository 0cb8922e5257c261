"""Shadow comparisons: for a sample of calls the router sent to the small tier, the same request
also goes to the large tier in the background, and an optional judge compares the two answers.

Config (off by default):

    [routing.shadow]
    rate = 0.02          # share of classifier-routed small-tier calls to shadow (0: off)
    judge = "large"      # tier or "provider:model" that compares the answers; none: no verdict
    max_in_flight = 2    # shadow jobs running at once; a sample beyond it is dropped, never queued

What happens, on the sync `Client` (the async client does not shadow yet):

* only a plain (non-streamed) call with `model="auto"` that the classifier (or a fitted router)
  sent to `routing.small_tier` is a candidate, sampled at `rate`; its answer has already been
  returned, so the caller never waits for the shadow;
* the shadow call is the same request sent to `routing.large_tier`, with `metadata.shadow = "1"`
  (its ledger records carry that mark, so reports and SQL can leave it out); the judge call also;
* with a judge, `judge_messages` asks for a one-letter verdict under the fixed rubric `RUBRIC`
  (answer A is the small tier's, B the large tier's); `parse_verdict` reads its first word. The verdict is
  stored as feedback on the original call (source "shadow", label "judge: A|B|tie"): score 1.0
  when the small answer is as good or better, 0.0 when the large one is better, with the
  conversation, so `llmroute router fit --ledger` learns from it;
* failures of shadow or judge calls are logged and dropped; they never reach the caller.

`should_shadow`, `judge_messages` and `parse_verdict` are pure; `ShadowRunner` owns the thread pool.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ShadowConfig", "RUBRIC", "should_shadow", "judge_messages", "parse_verdict", "ShadowRunner"]

log = logging.getLogger("llmroute.shadow")

RUBRIC = (
    "You compare two answers to the same request. Judge only correctness and completeness for what "
    "the request asks; ignore length, style and politeness. Reply with exactly one character: "
    "A if answer A is better, B if answer B is better, T if they are equally good or equally bad."
)


class ShadowConfig(BaseModel):
    """The `[routing.shadow]` section."""

    model_config = ConfigDict(extra="forbid")

    rate: float = Field(default=0.0, ge=0.0, le=1.0)
    judge: str | None = None
    max_in_flight: int = Field(default=2, ge=1, le=64)


def should_shadow(*, tier: str | None, score: float | None, small_tier: str, rate: float, draw: float) -> bool:
    """Whether a finished call is a shadow sample: routed by a scorer (score not None) to the small
    tier, and `draw` (uniform in [0, 1)) below `rate`."""
    return rate > 0.0 and score is not None and tier == small_tier and draw < rate


def judge_messages(messages: Sequence[Mapping[str, Any]], small_answer: str, large_answer: str) -> list[dict[str, str]]:
    """The judge's conversation: the rubric, the request's last user text, answer A (small), B (large)."""
    request = ""
    for message in messages:
        if isinstance(message, Mapping) and message.get("role") == "user" and isinstance(message.get("content"), str):
            request = message["content"]
    return [
        {"role": "system", "content": RUBRIC},
        {"role": "user", "content": f"Request:\n{request}\n\nAnswer A:\n{small_answer}\n\nAnswer B:\n{large_answer}\n\nVerdict (A, B or T):"},
    ]


def parse_verdict(text: str | None) -> str | None:
    """"A", "B" or "tie" from the judge's reply: its first word (letters only) must be A, B, T or TIE;
    anything else ("Answer: B", an essay) is no verdict (None)."""
    word = ""
    for char in (text or "").strip().upper()[:40]:
        if char.isalpha():
            word += char
        elif word:
            break
        elif not char.isspace() and char not in "*_\"'`([":
            return None
    if word in ("A", "B"):
        return word
    return "tie" if word in ("T", "TIE") else None


def _text(response: Any) -> str:
    try:
        return response.choices[0].message.content or ""
    except (AttributeError, IndexError):
        return ""


class ShadowRunner:
    """Runs shadow jobs for one sync client on its own small thread pool."""

    def __init__(self, client: Any, config: ShadowConfig, *, small_tier: str, large_tier: str,
                 rng: random.Random | None = None) -> None:
        self._client = client
        self.config = config
        self.small_tier = small_tier
        self.large_tier = large_tier
        self._rng = rng or random.Random()
        self._slots = threading.BoundedSemaphore(config.max_in_flight)
        self._pool = ThreadPoolExecutor(max_workers=config.max_in_flight, thread_name_prefix="llmroute-shadow")
        self.submitted = 0
        self.dropped = 0

    def offer(self, kwargs: Mapping[str, Any], response: Any) -> None:
        """Consider a finished call (its original keyword arguments and its response) for shadowing."""
        route = getattr(response, "route", None)
        if route is None or kwargs.get("stream") or not should_shadow(
            tier=route.tier, score=route.score, small_tier=self.small_tier, rate=self.config.rate, draw=self._rng.random()
        ):
            return
        if not self._slots.acquire(blocking=False):
            self.dropped += 1
            return
        self.submitted += 1
        try:
            self._pool.submit(self._run, dict(kwargs), response)
        except RuntimeError:  # the pool is shut down: the client is closing
            self._slots.release()

    def _run(self, kwargs: dict[str, Any], response: Any) -> None:
        try:
            metadata = {**(kwargs.get("metadata") or {}), "shadow": "1"}
            large = self._client.chat.completions.create(**{**kwargs, "model": self.large_tier, "metadata": metadata})
            if self.config.judge is None:
                return
            messages = kwargs.get("messages") or []
            verdict_reply = self._client.chat.completions.create(
                model=self.config.judge, messages=judge_messages(messages, _text(response), _text(large)),
                max_tokens=4, temperature=0, metadata=metadata, feature=kwargs.get("feature"),
            )
            verdict = parse_verdict(_text(verdict_reply))
            if verdict is None:
                log.warning("shadow: the judge's reply is not a verdict; no outcome recorded")
                return
            self._client.feedback(response, 0.0 if verdict == "B" else 1.0, label=f"judge: {verdict}",
                                  messages=list(messages), source="shadow")
        except Exception:  # noqa: BLE001 - a shadow never reaches the caller
            log.exception("shadow comparison failed")
        finally:
            self._slots.release()

    def close(self, wait: bool = True) -> None:
        """Stop taking jobs; with `wait`, let the running ones finish."""
        self._pool.shutdown(wait=wait)
