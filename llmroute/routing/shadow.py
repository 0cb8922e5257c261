"""Shadow comparisons: for a sample of calls the router sent to the small tier, the same request
also goes to the large tier in the background, and an optional judge compares the two answers.

Config (off by default):

    [routing.shadow]
    rate = 0.02          # share of classifier-routed small-tier calls to shadow (0: off)
    judge = "large"      # tier or "provider:model" that compares the answers; none: no verdict
    max_in_flight = 2    # shadow jobs running at once; a sample beyond it is dropped, never queued

What happens, on `Client` (`ShadowRunner`: a thread pool of `max_in_flight` threads) and on
`AsyncClient` (`AsyncShadowRunner`: tasks on the client's event loop):

* a call with `model="auto"` that the classifier (or a fitted router) sent to `routing.small_tier`
  is a candidate, sampled at `rate`: a plain call once its answer is returned, a streamed one once
  the stream has ended (a stream closed before its end has no answer to compare and is not
  offered); the caller never waits for the shadow, and a sample arriving while `max_in_flight`
  shadows run is dropped, never queued;
* the shadow call is the same request sent to `routing.large_tier` as a plain call
  (`shadow_request`), with `metadata.shadow = "1"` (its ledger records carry that mark, and
  `llmroute report` leaves them out unless `--include-shadow`); the judge call also;
* with a judge, `judge_messages` asks for a one-letter verdict under the fixed rubric `RUBRIC`
  (answer A is the small tier's, B the large tier's); `parse_verdict` reads its first word. The verdict is
  stored as feedback on the original call (source "shadow", label "judge: A|B|tie"): score 1.0
  when the small answer is as good or better, 0.0 when the large one is better, with the
  conversation, so `llmroute router fit --ledger` learns from it;
* failures of shadow or judge calls are logged and dropped; they never reach the caller.

`should_shadow`, `judge_messages`, `parse_verdict`, `shadow_request` and `judge_request` are pure;
`ShadowRunner` owns its thread pool, `AsyncShadowRunner` its tasks; closing the client waits for the
running shadows.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from llmroute.accounting.ledger import SHADOW_METADATA_KEY
from llmroute._runtime.forksafe import renew_at_fork

if TYPE_CHECKING:
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from llmroute.types import ChatAccess

__all__ = ["ShadowConfig", "RUBRIC", "should_shadow", "judge_messages", "parse_verdict", "shadow_request",
           "judge_request", "ShadowRunner", "AsyncShadowRunner"]

log = logging.getLogger("llmroute.shadow")

RUBRIC = (
    "You compare two answers to the same request. Judge only correctness and completeness for what "
    "the request asks; ignore length, style and politeness. Reply with exactly one character: "
    "A if answer A is better, B if answer B is better, T if they are equally good or equally bad."
)


class ShadowConfig(BaseModel):
    """The `[routing.shadow]` section."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

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


def shadow_request(kwargs: Mapping[str, Any], large_tier: str) -> dict[str, Any]:
    """The shadow call's keyword arguments: the original request sent to `large_tier`, as a plain
    (non-streamed) call, with `metadata.shadow = "1"`."""
    request = {key: value for key, value in kwargs.items() if key not in ("stream", "stream_options")}
    request["model"] = large_tier
    request["metadata"] = {**(kwargs.get("metadata") or {}), SHADOW_METADATA_KEY: "1"}
    return request


def judge_request(kwargs: Mapping[str, Any], judge: str, small_answer: Any, large_answer: Any) -> dict[str, Any]:
    """The judge call's keyword arguments for two responses (or streams' assembled responses)."""
    return dict(
        model=judge, messages=judge_messages(kwargs.get("messages") or [], _text(small_answer), _text(large_answer)),
        max_tokens=4, temperature=0, metadata={**(kwargs.get("metadata") or {}), SHADOW_METADATA_KEY: "1"},
        feature=kwargs.get("feature"),
    )


class ShadowClient(Protocol):
    """What a runner uses of its `Client` or `AsyncClient` (client.py imports this module, not the reverse)."""

    @property
    def chat(self) -> ChatAccess: ...

    def feedback(self, request_id_or_response: Any, score: float | bool, *, label: str | None = None,
                 comment: str | None = None, messages: list[Mapping[str, Any]] | None = None,
                 source: str = "user") -> None: ...


class _Runner:
    """What the sync and async runners share: sampling, the in-flight bound and the verdict's record."""

    def __init__(self, client: ShadowClient, config: ShadowConfig, *, small_tier: str, large_tier: str,
                 rng: random.Random | None = None) -> None:
        self._client = client
        self.config = config
        self.small_tier = small_tier
        self.large_tier = large_tier
        self._rng = rng or random.Random()
        self._slots = threading.BoundedSemaphore(config.max_in_flight)
        self.submitted = 0
        self.dropped = 0
        renew_at_fork(self)

    def _after_fork_in_child(self) -> None:
        """A forked child: the shadow jobs in flight are the parent's; the child has all its slots."""
        self._slots = threading.BoundedSemaphore(self.config.max_in_flight)

    def _admit(self, response: Any) -> bool:
        """Whether a finished call (its response, or a stream's assembled response) is shadowed now;
        True holds one in-flight slot, which the job releases."""
        route = getattr(response, "route", None)
        if route is None or not should_shadow(
            tier=route.tier, score=route.score, small_tier=self.small_tier, rate=self.config.rate, draw=self._rng.random()
        ):
            return False
        if not self._slots.acquire(blocking=False):
            self.dropped += 1
            return False
        self.submitted += 1
        return True

    def _record(self, kwargs: Mapping[str, Any], response: Any, verdict_reply: Any) -> None:
        verdict = parse_verdict(_text(verdict_reply))
        if verdict is None:
            log.warning("shadow: the judge's reply is not a verdict; no outcome recorded")
            return
        self._client.feedback(response, 0.0 if verdict == "B" else 1.0, label=f"judge: {verdict}",
                              messages=list(kwargs.get("messages") or []), source="shadow")


class ShadowRunner(_Runner):
    """Runs shadow jobs for one sync client on its own small thread pool."""

    def __init__(self, client: ShadowClient, config: ShadowConfig, *, small_tier: str, large_tier: str,
                 rng: random.Random | None = None) -> None:
        super().__init__(client, config, small_tier=small_tier, large_tier=large_tier, rng=rng)
        self._pool = self._new_pool()

    def _new_pool(self) -> ThreadPoolExecutor:
        from concurrent.futures import ThreadPoolExecutor  # loaded with a shadowing client only

        return ThreadPoolExecutor(max_workers=self.config.max_in_flight, thread_name_prefix="llmroute-shadow")

    def _after_fork_in_child(self) -> None:
        """Also a pool of its own: the parent's worker threads do not exist in the child."""
        super()._after_fork_in_child()
        self._pool = self._new_pool()

    def offer(self, kwargs: Mapping[str, Any], response: Any) -> None:
        """Consider a finished call (its original keyword arguments and its response, or a stream's
        assembled response once the stream ended) for shadowing."""
        if not self._admit(response):
            return
        try:
            self._pool.submit(self._run, dict(kwargs), response)
        except RuntimeError:  # the pool is shut down: the client is closing
            self._slots.release()

    def _run(self, kwargs: dict[str, Any], response: Any) -> None:
        try:
            create = self._client.chat.completions.create
            large = create(**shadow_request(kwargs, self.large_tier))
            if self.config.judge is not None:
                self._record(kwargs, response, create(**judge_request(kwargs, self.config.judge, response, large)))
        except Exception:  # noqa: BLE001 - a shadow never reaches the caller
            log.exception("shadow comparison failed")
        finally:
            self._slots.release()

    def close(self, wait: bool = True) -> None:
        """Stop taking jobs; with `wait`, let the running ones finish."""
        self._pool.shutdown(wait=wait)


class AsyncShadowRunner(_Runner):
    """Runs shadow jobs for one `AsyncClient` as tasks on its event loop: `offer` only creates the
    task (the caller never awaits it); at most `max_in_flight` run at once, a sample beyond that is
    dropped."""

    def __init__(self, client: ShadowClient, config: ShadowConfig, *, small_tier: str, large_tier: str,
                 rng: random.Random | None = None) -> None:
        super().__init__(client, config, small_tier=small_tier, large_tier=large_tier, rng=rng)
        self._tasks: set[asyncio.Task[None]] = set()  # strong references until each task ends
        self._closed = False

    def _after_fork_in_child(self) -> None:
        """Also: the parent's tasks belong to the parent's event loop."""
        super()._after_fork_in_child()
        self._tasks = set()

    def offer(self, kwargs: Mapping[str, Any], response: Any) -> None:
        """Consider a finished call for shadowing (called on the event loop's thread)."""
        if self._closed or not self._admit(response):
            return
        import asyncio  # loaded with a shadowing client only (the routing config stays light)

        task = asyncio.get_running_loop().create_task(self._run(dict(kwargs), response), name="llmroute-shadow")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, kwargs: dict[str, Any], response: Any) -> None:
        try:
            create = self._client.chat.completions.create
            large = await create(**shadow_request(kwargs, self.large_tier))
            if self.config.judge is not None:
                self._record(kwargs, response, await create(**judge_request(kwargs, self.config.judge, response, large)))
        except Exception:  # noqa: BLE001 - a shadow never reaches the caller
            log.exception("shadow comparison failed")
        finally:
            self._slots.release()

    async def aclose(self) -> None:
        """Stop taking jobs and wait for the running ones."""
        self._closed = True
        if self._tasks:
            import asyncio  # tasks ran, so offer() loaded it already

            await asyncio.gather(*self._tasks, return_exceptions=True)
