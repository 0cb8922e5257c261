"""The openai-python-style programs run twice: once with openai-python's client, once with llmroute's,
both pointed at the same server (the real llama.cpp server, or a loopback platform server). Only the
line that builds the client differs; openai-python is a dev dependency (skipped where absent)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import pytest

import llmroute

PRICES_FREE = {"input_per_million": 0, "output_per_million": 0}

@pytest.fixture(autouse=True)
def _ledger_in_tmp(tmp_path, monkeypatch):
    """A `Client(base_url=...)` keeps its ledger at ./llmroute-ledger.db (the [ledger] default): in tmp."""
    monkeypatch.chdir(tmp_path)


@dataclass
class SDK:
    name: str
    module: Any  # `openai` or `llmroute`: the exception classes are read from it, as user code does
    Client: Any
    AsyncClient: Any
    Timeout: Any  # openai-python 3 builds on httpx2: its `openai.Timeout`; llmroute takes any httpx-like Timeout


def _sdk(name: str) -> SDK:
    if name == "openai":
        openai = pytest.importorskip("openai")
        return SDK("openai", openai, openai.OpenAI, openai.AsyncOpenAI, openai.Timeout)
    import httpx

    return SDK("llmroute", llmroute, llmroute.Client, llmroute.AsyncClient, httpx.Timeout)


@pytest.fixture(params=["openai", "llmroute"])
def sdk(request) -> SDK:
    return _sdk(request.param)


def make(sdk: SDK, base_url: str, model: str, *, is_async: bool = False, **kwargs: Any) -> Any:
    """The one line that differs: the client. llmroute gets the server's prices (0: our own hardware)."""
    cls = sdk.AsyncClient if is_async else sdk.Client
    if sdk.name == "llmroute":
        kwargs.setdefault("prices", {model: PRICES_FREE})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # priced: no warning expected
        return cls(base_url=base_url, api_key="sk-no-key-required", **kwargs)
