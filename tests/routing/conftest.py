"""Fixtures shared by the routing tests."""

from __future__ import annotations

import pytest

LARGE_MODEL = "meta-llama/Llama-3.3-70B-Instruct"


@pytest.fixture
def servers(vllm_server, sglang_server):
    """A vLLM server for the small tier and an SGLang one for the large tier (a 70B model)."""
    # The session's SGLang server serves a 7B model by default; here it stands in for the 70B tier.
    added = LARGE_MODEL not in sglang_server.models
    sglang_server.models[LARGE_MODEL] = 131_072
    try:
        yield vllm_server, sglang_server
    finally:
        if added:
            sglang_server.models.pop(LARGE_MODEL, None)
