"""Errors a platform sends inside a 200 stream, in each envelope it uses (docs/platforms.md §11.7):
OpenAI-style `{"error": {...}}`, the flat `{"object": "error", ...}` (SGLang, older vLLM) and
SiliconFlow's `{"code", "message", "data"}`. Each must interrupt the stream with the platform's
error as the cause, whether or not `[DONE]` follows it: a partial answer is never a success."""

from __future__ import annotations

import pytest

import llmroute as L
from tests.providers.helpers import MESSAGES, TIER, drain, make_client
from tests.servers.script import Reply

MODEL = "Qwen/Qwen2.5-7B-Instruct"


@pytest.mark.parametrize("platform,options", [
    ("sglang", {}), ("vllm", {"legacy_errors": True}), ("vllm", {}), ("siliconflow", {}),
])
@pytest.mark.parametrize("done_after_error", [False, True])
def test_a_mid_stream_error_interrupts_in_every_envelope(make_server, platform, options, done_after_error):
    server = make_server(platform, **options)
    server.done_after_error = done_after_error
    server.push(Reply(pieces=["x", " y", " z"], error_at=2))
    with make_client(platform, server.base_url, MODEL, api_key=getattr(server, "default_api_key", None)) as client:
        stream = client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True)
        with pytest.raises(L.StreamInterruptedError) as info:
            drain(stream)
    assert info.value.partial_text == "x y"
    assert isinstance(info.value.__cause__, L.ProviderError)
    assert not isinstance(info.value.__cause__, L.StreamInterruptedError)


@pytest.mark.parametrize("kind,expected", [
    ("rate_limit", L.RateLimitError), ("context", L.ContextLengthError), ("server", L.ServerError),
])
def test_siliconflow_in_stream_codes_keep_their_meaning(make_server, kind, expected):
    server = make_server("siliconflow")
    server.push(Reply(pieces=["a", " b", " c"], error_at=2, error=kind))
    with make_client("siliconflow", server.base_url, MODEL, api_key=server.default_api_key) as client:
        stream = client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True)
        with pytest.raises(L.StreamInterruptedError) as info:
            drain(stream)
    assert type(info.value.__cause__) is expected
    assert info.value.__cause__.code is not None
