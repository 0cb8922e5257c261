"""A call's values before anything is sent: `PreparedCall` (the checked arguments) and `Target` (where it may
go). Plain data and one pure function (`prepare_call`); no state, no I/O."""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping

from llmroute.config import Config, Deployment
from llmroute.providers.base import CallInput
from llmroute._call.validate import check_create_args

__all__ = ["PreparedCall", "Target", "prepare_call"]

# A call's `request_id`: 128 random bits as 32 hex digits, drawn from a generator of llmroute's own,
# seeded from os.urandom and seeded again in a forked child, so ids never repeat across processes
# and an application's `random.seed(...)` does not make them repeat across runs. (An `os.urandom`
# system call per call cost ~1-3 µs here; ids need to be unique, not secret.)
_ids = random.Random()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_ids.seed)


@dataclass
class Target:
    """Where a call may go: the tier (if any), its candidate deployments in order, and why."""

    deployments: List[Deployment]
    tier: str | None
    reason: str
    score: float | None = None
    pool: str | None = None
    fallback: List[Deployment] = field(default_factory=list)
    fallback_tier: str | None = None


@dataclass
class PreparedCall:
    model: str
    call: CallInput
    stream: bool
    feature: str | None
    metadata: Dict[str, str]
    pool: str
    timeout_s: float | None
    request_id: str
    target: Target | None = None
    input_tokens: int | None = None
    cache: Any = None  # the call's `CacheCall` (llmroute/_call/cache_step.py), when the cache is in play
    operation: str = "chat"  # "embeddings" for `embeddings.PreparedEmbedding`
    max_retries: int | None = None  # the client's `max_retries` option: overrides the policies' for this call

    @property
    def messages(self) -> List[Dict[str, Any]]:
        return self.call.messages


def prepare_call(config: Config, kwargs: Mapping[str, Any]) -> PreparedCall:
    """Check `create()`'s arguments (`validate.check_create_args`): `InvalidRequestError` naming the
    argument, or `TypeError` for an argument `create()` does not take. Nothing is sent before this."""
    args = check_create_args(kwargs, pools=config.sections.pool_names)
    return PreparedCall(
        model=args.model,
        call=CallInput(messages=args.messages, params=args.params, extra_body=args.extra_body,
                       extra_headers=args.extra_headers, extra_query=args.extra_query),
        stream=args.stream,
        feature=args.feature,
        metadata=args.metadata,
        pool=args.pool,
        timeout_s=args.timeout_s,
        request_id=f"{_ids.getrandbits(128):032x}",
    )
