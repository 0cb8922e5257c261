"""Errors and policies shared by the resilience tests."""

from __future__ import annotations

from llmroute import errors as E
from llmroute.resilience.policy import ResiliencePolicy

DEP = "p:m"


def server_error(dep: str = DEP) -> E.ServerError:
    return E.ServerError("boom", provider=dep.split(":")[0], deployment=dep, status=500)


def rate_limited(retry_after: float | None = None, dep: str = DEP) -> E.RateLimitError:
    return E.RateLimitError("slow down", provider=dep.split(":")[0], deployment=dep, status=429, retry_after=retry_after)


def bad_request(dep: str = DEP) -> E.BadRequestError:
    return E.BadRequestError("bad", provider=dep.split(":")[0], deployment=dep, status=400)


def auth_error(dep: str = DEP) -> E.AuthenticationError:
    return E.AuthenticationError("Incorrect API key provided: sk-abcdefghijklmnop", provider=dep.split(":")[0], deployment=dep, status=401)


def context_error(dep: str = DEP) -> E.ContextLengthError:
    return E.ContextLengthError("too long", provider=dep.split(":")[0], deployment=dep, status=400)


def policy(**kw) -> ResiliencePolicy:
    return ResiliencePolicy(**kw)
