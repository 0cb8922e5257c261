"""Self-tests of the loopback platform servers, with plain httpx (never llmroute).

Each test checks one documented wire-format quirk (docs/platforms.md section named in the
test), so a broken server is caught on its own before it misleads llmroute's tests.
Timing checks are lower bounds only (a server cannot send early), never upper bounds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.servers.bailian import NATIVE_PATH
from tests.servers.fault import error_event, malformed, reset_before, reset_during, status, timed
from tests.servers.openai_compat import OpenAICompatServer
from tests.servers.process import spawn
from tests.servers.registry import SERVERS
from tests.servers.script import Reply

ALL = sorted(SERVERS)
AUTHED = ["openai", "together", "fireworks", "siliconflow", "bailian"]
MODEL_CHECKED = [p for p in ALL if p not in ("tgi", "fault")]
MESSAGES = [{"role": "user", "content": "say hello to me"}]  # 4 words -> prompt_tokens 4
# One shared client: a new httpx client per call costs ~50 ms (TLS context setup) and dominated the run.
HTTP = httpx.Client(timeout=10)


@pytest.fixture(scope="module", autouse=True)
def _close_shared_client() -> Iterator[None]:
    yield
    HTTP.close()


@pytest.fixture(params=ALL)
def server(request: pytest.FixtureRequest) -> OpenAICompatServer:
    return request.getfixturevalue(f"{request.param}_server")


def model_of(srv: OpenAICompatServer) -> str:
    return next(iter(srv.models))


def post(srv: OpenAICompatServer, body: dict[str, Any], *, key: str | None = None,
         path: str = "/chat/completions", headers: dict[str, str] | None = None) -> httpx.Response:
    token = key if key is not None else (srv.api_key or "anything")
    hdrs = {"Authorization": f"Bearer {token}", **(headers or {})}
    return HTTP.post(srv.base_url + path, json=body, headers=hdrs, timeout=10)


def body_for(srv: OpenAICompatServer, **extra: Any) -> dict[str, Any]:
    return {"model": model_of(srv), "messages": MESSAGES, **extra}


def stream_events(srv: OpenAICompatServer, body: dict[str, Any], **kw: Any) -> list[Any]:
    """POST a stream and return its data payloads (parsed JSON, or the raw string for [DONE])."""
    r = post(srv, {**body, "stream": True}, **kw)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    out: list[Any] = []
    for line in r.text.split("\n"):
        if line.startswith("data:"):
            data = line[5:].strip()
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def content_of(events: list[Any], field: str = "content") -> str:
    return "".join(
        (e["choices"][0]["delta"].get(field) or "")
        for e in events if isinstance(e, dict) and e.get("choices")
    )


def check_error_shape(platform: str, r: httpx.Response) -> str:
    """Assert the platform's error envelope (docs/platforms.md §11.7) and return its message."""
    body = r.json()
    if platform == "siliconflow":
        assert set(body) == {"code", "message", "data"} and body["data"] is None and isinstance(body["code"], int)
        return body["message"]
    if platform == "tgi":
        assert set(body) == {"error", "error_type"} and isinstance(body["error"], str)
        return body["error"]
    if platform == "sglang":
        assert body["object"] == "error" and body["code"] == r.status_code
        return body["message"]
    err = body["error"]
    assert {"message", "type", "param", "code"} <= set(err)
    if platform == "vllm":
        assert err["code"] == r.status_code
    if platform == "bailian":
        assert body["id"].startswith("chatcmpl-")
    return err["message"]


# -- every platform -------------------------------------------------------------------------------

def test_default_completion_has_consistent_usage(server: OpenAICompatServer) -> None:
    r = post(server, body_for(server))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["choices"][0]["message"]["content"] == f"Hello from {server.platform}"
    assert body["usage"]["prompt_tokens"] == 4
    assert body["usage"]["completion_tokens"] == 3
    assert body["usage"]["total_tokens"] == 7


def test_stream_text_matches_plain_text(server: OpenAICompatServer) -> None:
    events = stream_events(server, body_for(server, stream_options={"include_usage": True}))
    assert content_of(events) == f"Hello from {server.platform}"
    assert events[-1] == "[DONE]"
    usages = [e["usage"] for e in events if isinstance(e, dict) and e.get("usage")]
    assert usages and usages[-1]["completion_tokens"] == 3 and usages[-1]["prompt_tokens"] == 4


def test_requests_are_recorded(server: OpenAICompatServer) -> None:
    post(server, body_for(server, max_tokens=7), headers={"X-Test": "yes"})
    seen = server.last_request
    assert seen.method == "POST" and seen.path == server.base_path + "/chat/completions"
    assert seen.json["max_tokens"] == 7 and seen.headers["x-test"] == "yes"
    assert seen.bearer == (server.api_key or "anything")
    assert server.chat_requests() == [seen]


def test_scripted_pieces_and_max_tokens_truncation(server: OpenAICompatServer) -> None:
    server.push(Reply(pieces=["a", "b", "c", "d"]))
    field = "max_tokens" if "max_tokens" in server.max_tokens_fields else server.max_tokens_fields[0]
    r = post(server, body_for(server, **{field: 2}))
    body = r.json()
    assert body["choices"][0]["message"]["content"] == "ab"
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 2


def test_reset_before_response(server: OpenAICompatServer) -> None:
    server.push(Reply(reset_before=True))
    with pytest.raises(httpx.TransportError):
        post(server, body_for(server))
    assert post(server, body_for(server)).status_code == 200  # the queue is empty again


def test_reset_during_stream(server: OpenAICompatServer) -> None:
    server.push(Reply(pieces=["x", "y", "z"], reset_after_chunks=2))
    got = []
    with pytest.raises(httpx.TransportError):
        with HTTP.stream("POST", server.base_url + "/chat/completions", json=body_for(server, stream=True),
                          headers={"Authorization": f"Bearer {server.api_key or 'k'}"}, timeout=10) as r:
            for line in r.iter_lines():
                got.append(line)
    assert any('"y"' in line for line in got) and not any('"z"' in line for line in got)


def test_malformed_sse_line(server: OpenAICompatServer) -> None:
    server.push(Reply(pieces=["x", "y"], malformed_at=1))
    r = post(server, body_for(server, stream=True))
    bad = [line for line in r.text.split("\n") if line.startswith("data:") and "chatcmpl-broken" in line]
    assert len(bad) == 1
    with pytest.raises(ValueError):
        json.loads(bad[0][5:])


def test_every_error_kind_renders_in_platform_shape(server: OpenAICompatServer) -> None:
    for kind in server.error_kinds:
        server.push(Reply(error=kind))
        r = post(server, body_for(server))
        assert r.status_code == server.errors[kind].status, kind
        assert check_error_shape(server.platform, r), kind


def test_mid_stream_error_event(server: OpenAICompatServer) -> None:
    server.push(Reply(pieces=["a", "b", "c"], error_at=1))
    r = post(server, body_for(server, stream=True))
    payloads = [json.loads(line[5:]) for line in r.text.split("\n")
                if line.startswith("data:") and line[5:].strip() != "[DONE]"]
    last = payloads[-1]
    assert "choices" not in last and ("error" in last or last.get("object") == "error" or "code" in last)
    assert content_of(payloads[:-1]) == "a"
    assert r.text.rstrip().endswith("[DONE]") == server.done_after_error


def test_keep_alive_reuses_one_connection(server: OpenAICompatServer) -> None:
    before = server.connections_total
    with httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {server.api_key or 'k'}"}) as c:
        for _ in range(5):
            assert c.post("/chat/completions", json=body_for(server)).status_code == 200
            assert stream_ok(c, server)
    assert server.connections_total - before == 1


def stream_ok(client: httpx.Client, srv: OpenAICompatServer) -> bool:
    with client.stream("POST", "/chat/completions", json=body_for(srv, stream=True)) as r:
        return r.status_code == 200 and "[DONE]" in r.read().decode()


def test_chunked_request_body_is_accepted(server: OpenAICompatServer) -> None:
    data = json.dumps(body_for(server)).encode()
    r = HTTP.post(server.base_url + "/chat/completions", content=iter([data[:10], data[10:]]),
                   headers={"Authorization": f"Bearer {server.api_key or 'k'}", "Content-Type": "application/json"})
    assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == 4


@pytest.mark.parametrize("platform", AUTHED)
def test_wrong_key_gets_platform_401(platform: str, request: pytest.FixtureRequest) -> None:
    srv = request.getfixturevalue(f"{platform}_server")
    r = post(srv, body_for(srv), key="wrong")
    assert r.status_code == 401
    check_error_shape(platform, r)


@pytest.mark.parametrize("platform", MODEL_CHECKED)
def test_unknown_model_gets_platform_not_found(platform: str, request: pytest.FixtureRequest) -> None:
    srv = request.getfixturevalue(f"{platform}_server")
    r = post(srv, {"model": "no/such-model", "messages": MESSAGES})
    assert r.status_code == srv.errors["not_found"].status
    check_error_shape(platform, r)


def test_script_lookup_order_and_reset(openai_server: OpenAICompatServer) -> None:
    srv = openai_server
    srv.push(Reply(pieces=["global"]))
    srv.push(Reply(pieces=["by-model"]), model="gpt-4o")
    srv.push(Reply(pieces=["by-path"]), path="/v1/chat/completions")
    assert srv.script.pending() == 3
    text = lambda m: post(srv, {"model": m, "messages": MESSAGES}).json()["choices"][0]["message"]["content"]  # noqa: E731
    assert [text("gpt-4o"), text("gpt-4o"), text("gpt-4o"), text("gpt-4o")] == \
        ["by-path", "by-model", "global", "Hello from openai"]
    srv.default_reply = Reply(pieces=["dflt"])
    assert text("gpt-4o-mini") == "dflt"
    srv.reset()
    assert text("gpt-4o-mini") == "Hello from openai" and len(srv.requests) == 1


def test_raw_body_and_usage_override(openai_server: OpenAICompatServer) -> None:
    openai_server.push(Reply(status=418, body={"weird": True}, headers={"X-A": "1"}))
    r = post(openai_server, body_for(openai_server))
    assert (r.status_code, r.json(), r.headers["x-a"]) == (418, {"weird": True}, "1")
    openai_server.push(Reply(usage={"prompt_tokens": 100, "completion_tokens": 9, "cached_tokens": 40}))
    usage = post(openai_server, body_for(openai_server)).json()["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]) == (100, 9, 109)
    assert usage["prompt_tokens_details"]["cached_tokens"] == 40
    openai_server.push(Reply(omit_usage=True))
    assert "usage" not in post(openai_server, body_for(openai_server)).json()


# -- §0 OpenAI ---------------------------------------------------------------------------------

def test_openai_usage_only_with_flag_on_empty_chunk(openai_server: OpenAICompatServer) -> None:
    plain = stream_events(openai_server, body_for(openai_server))
    assert all("usage" not in e for e in plain if isinstance(e, dict))
    events = [e for e in stream_events(openai_server, body_for(openai_server, stream_options={"include_usage": True}))
              if isinstance(e, dict)]
    assert events[-1]["choices"] == [] and events[-1]["usage"]["total_tokens"] == 7
    assert all(e["usage"] is None for e in events[:-1])
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}  # role chunk first


# -- §1 Together -------------------------------------------------------------------------------

def test_together_usage_on_finish_chunk_without_flag(together_server: OpenAICompatServer) -> None:
    events = [e for e in stream_events(together_server, body_for(together_server)) if isinstance(e, dict)]
    assert all(e["choices"] for e in events)  # no choices:[] chunk
    last = events[-1]
    assert last["choices"][0]["finish_reason"] == "eos"
    assert last["usage"]["completion_tokens"] == 3 and "cached_tokens" in last["usage"]
    assert last["usage"]["prompt_tokens_details"] is None
    assert all(e["usage"] is None for e in events[:-1])


def test_together_kimi_needs_include_usage(together_server: OpenAICompatServer) -> None:
    body = {"model": "moonshotai/Kimi-K3", "messages": MESSAGES}
    assert not [e for e in stream_events(together_server, body) if isinstance(e, dict) and e.get("usage")]
    flagged = stream_events(together_server, {**body, "stream_options": {"include_usage": True}})
    assert [e for e in flagged if isinstance(e, dict) and e.get("usage")]


def test_together_reasoning_cached_and_errors(together_server: OpenAICompatServer) -> None:
    together_server.push(Reply(reasoning=["think"], pieces=["ok"], cached_tokens=2))
    events = stream_events(together_server, body_for(together_server))
    assert content_of(events, "reasoning") == "think" and content_of(events) == "ok"
    assert events[-2]["usage"]["cached_tokens"] == 2
    together_server.push(Reply(error="rate_limit"))
    r = post(together_server, body_for(together_server))
    assert r.status_code == 429 and r.json()["error"]["type"] == "dynamic_request_limited"
    assert r.headers["x-ratelimit-reset"] == "1"
    small = {"model": "Qwen/Qwen2.5-7B-Instruct-Turbo", "messages": MESSAGES, "max_tokens": 40_000}
    r = post(together_server, small)
    assert r.status_code == 403 and "context length" in r.json()["error"]["message"]
    r = post(together_server, {**small, "context_length_exceeded_behavior": "truncate"})
    assert r.status_code == 200
    assert post(together_server, body_for(together_server, max_completion_tokens=1)).json()["usage"][
        "completion_tokens"] == 3  # max_completion_tokens is not a Together field


# -- §2 Fireworks ------------------------------------------------------------------------------

def test_fireworks_path_usage_and_reasoning(fireworks_server: OpenAICompatServer) -> None:
    assert fireworks_server.base_url.endswith("/inference/v1")
    fireworks_server.push(Reply(reasoning=["hm"], pieces=["yes"], cached_tokens=1))
    events = [e for e in stream_events(fireworks_server, body_for(fireworks_server, perf_metrics_in_response=True))
              if isinstance(e, dict)]
    assert content_of(events, "reasoning_content") == "hm"
    assert [e for e in events if "usage" in e] == [events[-1]]  # only the finish chunk, no flag needed
    assert events[-1]["choices"][0]["finish_reason"] == "stop"
    assert events[-1]["perf_metrics"]["cached-prompt-tokens"] == 1
    assert events[-1]["usage"]["prompt_tokens_details"]["cached_tokens"] == 1


def test_fireworks_inline_think_max_fields_and_truncation(make_server: Any) -> None:
    model = "accounts/fireworks/models/qwen2p5-72b-instruct"
    srv = make_server("fireworks", inline_think_models=frozenset({model}),
                      models={model: 10, "accounts/fireworks/models/llama-v3p1-8b-instruct": 131_072})
    srv.push(Reply(reasoning=["hm"], pieces=["yes"]))
    r = post(srv, {"model": model, "messages": MESSAGES})
    assert r.json()["choices"][0]["message"]["content"] == "<think>hm</think>yes"
    assert r.headers["fireworks-prompt-tokens"] == "4"
    r = post(srv, {"model": model, "messages": MESSAGES, "max_tokens": 3, "max_completion_tokens": 3})
    assert r.status_code == 400
    srv.push(Reply(pieces=list("abcdefgh")))
    r = post(srv, {"model": model, "messages": MESSAGES, "max_tokens": 100})  # 4 + 100 > 10: silently cut to 6
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 6
    r = post(srv, {"model": model, "messages": MESSAGES, "max_tokens": 100, "context_length_exceeded_behavior": "error"})
    assert r.status_code == 400 and "too long" in r.json()["error"]["message"]
    r = post(srv, {"model": "accounts/fireworks/models/nope", "messages": MESSAGES})
    assert r.json()["error"]["code"] == "NOT_FOUND"


# -- §3 SiliconFlow ----------------------------------------------------------------------------

def test_siliconflow_cumulative_usage_every_chunk(siliconflow_server: OpenAICompatServer) -> None:
    events = [e for e in stream_events(siliconflow_server, body_for(siliconflow_server)) if isinstance(e, dict)]
    completions = [e["usage"]["completion_tokens"] for e in events]
    assert completions == [0, 1, 2, 3, 3]  # role chunk, three pieces, finish chunk
    assert {e["usage"]["prompt_tokens"] for e in events} == {4}
    assert all(e["system_fingerprint"] == "" for e in events)


def test_siliconflow_errors_and_reasoning_budget(siliconflow_server: OpenAICompatServer) -> None:
    r = post(siliconflow_server, {"model": "nope", "messages": MESSAGES})
    assert (r.status_code, r.json()["code"]) == (400, 20012)
    siliconflow_server.push(Reply(error="real_name"))
    assert post(siliconflow_server, body_for(siliconflow_server)).status_code == 403
    siliconflow_server.push(Reply(error="rate_limit"))
    r = post(siliconflow_server, body_for(siliconflow_server))
    assert r.status_code == 429 and "TPM" in r.json()["message"]
    siliconflow_server.push(Reply(reasoning=["r1", "r2", "r3"], pieces=["a", "b"]))
    body = post(siliconflow_server, body_for(siliconflow_server, max_tokens=2)).json()
    assert body["choices"][0]["message"]["content"] == "ab"  # reasoning does not count against max_tokens
    assert body["usage"]["completion_tokens"] == 5


# -- §4a Bailian compat ------------------------------------------------------------------------

def test_bailian_compat_usage_only_with_flag(bailian_server: OpenAICompatServer) -> None:
    plain = [e for e in stream_events(bailian_server, body_for(bailian_server)) if isinstance(e, dict)]
    assert all(e["usage"] is None and e["system_fingerprint"] is None for e in plain)
    assert all(e["choices"] for e in plain)
    bailian_server.push(Reply(cached_tokens=3))
    flagged = [e for e in stream_events(bailian_server, body_for(bailian_server, stream_options={"include_usage": True}))
               if isinstance(e, dict)]
    assert flagged[-1]["choices"] == [] and flagged[-1]["usage"]["prompt_tokens_details"]["cached_tokens"] == 3
    assert flagged[0]["id"].startswith("chatcmpl-") and len(flagged[0]["id"]) == len("chatcmpl-") + 36


def test_bailian_compat_errors(bailian_server: OpenAICompatServer, make_server: Any) -> None:
    bailian_server.push(Reply(pieces=["a", "b"], error_at=1))
    r = post(bailian_server, body_for(bailian_server, stream=True))
    assert '"code": "data_inspection_failed"' in r.text and "[DONE]" not in r.text
    for kind, status_code, code in [("arrearage", 400, "Arrearage"), ("content_filter", 400, "data_inspection_failed"),
                                    ("rate_limit", 429, "limit_requests")]:
        bailian_server.push(Reply(error=kind))
        r = post(bailian_server, body_for(bailian_server))
        assert (r.status_code, r.json()["error"]["code"]) == (status_code, code)
    r = post(bailian_server, body_for(bailian_server, model="qwen-max", max_tokens=40_000))
    assert r.status_code == 400 and "Range of input length should be [1, 32768]" in r.json()["error"]["message"]
    strict = make_server("bailian", max_tokens_policy="max_completion_tokens")
    assert post(strict, body_for(strict, max_tokens=5)).status_code == 400
    assert post(strict, body_for(strict, max_completion_tokens=2)).json()["usage"]["completion_tokens"] == 2


# -- §4b Bailian native -------------------------------------------------------------------------

def native(srv: OpenAICompatServer, body: dict[str, Any], sse: bool = False, key: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key or srv.api_key}"}
    if sse:
        headers.update({"X-DashScope-SSE": "enable", "Accept": "text/event-stream"})
    return HTTP.post(srv.url(NATIVE_PATH), json=body, headers=headers, timeout=10)


def native_events(text: str) -> list[dict[str, Any]]:
    events = []
    for block in text.strip().split("\n\n"):
        fields: dict[str, Any] = {"comments": []}
        for line in block.split("\n"):
            if line.startswith(":"):
                fields["comments"].append(line[1:])
            else:
                name, _, value = line.partition(":")
                fields[name] = json.loads(value) if name == "data" else value
        events.append(fields)
    return events


def test_bailian_native_plain_and_body_shape(bailian_server: OpenAICompatServer) -> None:
    body = {"model": "qwen-plus", "input": {"messages": MESSAGES}, "parameters": {"max_tokens": 2}}
    r = native(bailian_server, body)
    out = r.json()
    assert out["output"] == {"text": "Hello from", "finish_reason": "length"}
    assert out["usage"] == {"input_tokens": 4, "output_tokens": 2, "total_tokens": 6} and out["request_id"]
    r = native(bailian_server, {"model": "qwen-plus", "messages": MESSAGES})
    assert r.status_code == 400 and r.json()["code"] == "InvalidParameter"
    assert "messages must exist" in r.json()["message"]
    r = native(bailian_server, body, key="bad")
    assert r.status_code == 401 and set(r.json()) == {"code", "message", "request_id"}
    assert r.json()["code"] == "InvalidApiKey"


def test_bailian_native_stream_framing(bailian_server: OpenAICompatServer) -> None:
    body = {"model": "qwen-plus", "input": {"messages": MESSAGES}, "parameters": {"result_format": "message"}}
    assert native(bailian_server, body).headers["content-type"] == "application/json"  # no SSE header -> plain
    r = native(bailian_server, body, sse=True)
    assert "[DONE]" not in r.text
    events = native_events(r.text)
    assert [e["id"] for e in events] == ["1", "2", "3", "4"]
    assert all(e["event"] == "result" and e["comments"] == ["HTTP_STATUS/200"] for e in events)
    texts = [e["data"]["output"]["choices"][0]["message"]["content"] for e in events]
    assert texts == ["Hello", "Hello from", "Hello from bailian", "Hello from bailian"]  # cumulative
    finishes = [e["data"]["output"]["choices"][0]["finish_reason"] for e in events]
    assert finishes == ["null", "null", "null", "stop"]
    assert [e["data"]["usage"]["output_tokens"] for e in events] == [1, 2, 3, 3]
    body["parameters"]["incremental_output"] = True
    events = native_events(native(bailian_server, body, sse=True).text)
    assert [e["data"]["output"]["choices"][0]["message"]["content"] for e in events] == ["Hello", " from", " bailian", ""]


def test_bailian_native_error_event(bailian_server: OpenAICompatServer) -> None:
    bailian_server.push(Reply(pieces=["a", "b"], error_at=1), path=NATIVE_PATH)
    events = native_events(native(bailian_server, {"model": "qwen-plus", "input": {"messages": MESSAGES}}, sse=True).text)
    assert events[-1]["event"] == "error" and events[-1]["data"]["code"] == "DataInspectionFailed"
    assert events[-1]["comments"] == ["HTTP_STATUS/400"] and len(events) == 2


# -- §5 vLLM -----------------------------------------------------------------------------------

def test_vllm_stream_options_default_and_continuous(vllm_server: OpenAICompatServer) -> None:
    none = stream_events(vllm_server, body_for(vllm_server))
    assert not [e for e in none if isinstance(e, dict) and "usage" in e]
    events = [e for e in stream_events(vllm_server, body_for(vllm_server, stream_options={})) if isinstance(e, dict)]
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == 3  # include_usage defaults true
    cont = [e for e in stream_events(vllm_server, body_for(vllm_server, stream_options={"continuous_usage_stats": True}))
            if isinstance(e, dict)]
    assert [e["usage"]["completion_tokens"] for e in cont] == [0, 1, 2, 3, 3, 3]


def test_vllm_errors_reasoning_and_endpoints(vllm_server: OpenAICompatServer, make_server: Any) -> None:
    vllm_server.push(Reply(reasoning=["r"], pieces=["c"]))
    assert content_of(stream_events(vllm_server, body_for(vllm_server)), "reasoning") == "r"
    long = [{"role": "user", "content": "w " * 40_000}]
    r = post(vllm_server, {"model": model_of(vllm_server), "messages": long})
    assert r.status_code == 400 and r.json()["error"]["code"] == 400
    assert r.json()["error"]["message"] == "Input length (40000) exceeds model's maximum context length (32768)."
    assert HTTP.get(vllm_server.url("/health")).status_code == 200
    vllm_server.engine_dead = True
    assert HTTP.get(vllm_server.url("/health")).status_code == 503
    card = HTTP.get(vllm_server.base_url + "/models").json()["data"][0]
    assert card["max_model_len"] == 32_768
    assert "vllm:num_requests_running" in HTTP.get(vllm_server.url("/metrics")).text
    old = make_server("vllm", legacy_errors=True, api_key="secret")
    r = post(old, {"model": "nope", "messages": MESSAGES}, key="secret")
    assert r.json()["object"] == "error" and r.json()["code"] == 404
    r = post(old, body_for(old), key="wrong")
    assert (r.status_code, r.json()) == (401, {"error": "Unauthorized"})


# -- §6 SGLang ---------------------------------------------------------------------------------

def test_sglang_usage_off_by_default_abort_and_flat_errors(sglang_server: OpenAICompatServer) -> None:
    none = stream_events(sglang_server, body_for(sglang_server, stream_options={}))
    assert not [e for e in none if isinstance(e, dict) and "usage" in e]
    events = stream_events(sglang_server, body_for(sglang_server, stream_options={"include_usage": True}))
    assert events[-2]["choices"] == [] and "reasoning_tokens" in events[-2]["usage"]
    sglang_server.push(Reply(pieces=["a"], finish_reason="abort"))
    events = stream_events(sglang_server, body_for(sglang_server))
    assert events[-2]["choices"][0]["finish_reason"] == "abort"
    r = post(sglang_server, {"model": "nope", "messages": MESSAGES})
    assert r.json()["object"] == "error" and r.json()["code"] == 404
    assert HTTP.get(sglang_server.url("/health_generate")).status_code == 200


# -- §7 TGI ------------------------------------------------------------------------------------

def test_tgi_any_model_errors_and_health(tgi_server: OpenAICompatServer) -> None:
    r = post(tgi_server, {"model": "whatever", "messages": MESSAGES})
    assert r.status_code == 200 and r.json()["model"] == "tgi"
    r = post(tgi_server, {"model": "x", "messages": MESSAGES, "max_tokens": 5000})
    assert r.status_code == 422 and r.json()["error_type"] == "validation" and "max_new_tokens" in r.json()["error"]
    tgi_server.push(Reply(error="overloaded"))
    assert post(tgi_server, body_for(tgi_server)).status_code == 429
    tgi_server.push(Reply(pieces=["a", "b"], error_at=1))
    r = post(tgi_server, body_for(tgi_server, stream=True))
    assert '"error_type":"generation"' in r.text
    events = [e for e in stream_events(tgi_server, body_for(tgi_server, stream_options={"include_usage": True}))
              if isinstance(e, dict)]
    assert events[-1]["usage"] == {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7}
    tgi_server.healthy = False
    r = HTTP.get(tgi_server.url("/health"))
    assert (r.status_code, r.json()) == (503, {"error": "unhealthy", "error_type": "healthcheck"})


# -- §9 Ollama ---------------------------------------------------------------------------------

def test_ollama_reasoning_usage_and_root(ollama_server: OpenAICompatServer) -> None:
    ollama_server.push(Reply(reasoning=["r"], pieces=["c"]))
    body = post(ollama_server, body_for(ollama_server), key="ignored").json()
    assert body["choices"][0]["message"]["reasoning"] == "r"
    events = [e for e in stream_events(ollama_server, body_for(ollama_server, stream_options={"include_usage": True}))
              if isinstance(e, dict)]
    assert events[-1]["choices"] == [] and all("usage" not in e for e in events[:-1])
    r = post(ollama_server, {"model": "nope:1b", "messages": MESSAGES})
    assert r.json()["error"]["type"] == "not_found_error"
    assert HTTP.get(ollama_server.url("/")).text == "Ollama is running"


# -- fault server ----------------------------------------------------------------------------------

def test_fault_statuses_with_and_without_retry_after(fault_server: OpenAICompatServer) -> None:
    fault_server.push(status(503), status(429, retry_after=2), reset_before())
    r1 = post(fault_server, {"model": "any", "messages": MESSAGES})
    r2 = post(fault_server, {"model": "any", "messages": MESSAGES})
    assert (r1.status_code, "retry-after" in r1.headers) == (503, False)
    assert (r2.status_code, r2.headers["retry-after"]) == (429, "2")
    assert not [h for h in r2.headers if h.startswith("x-ratelimit")]
    with pytest.raises(httpx.TransportError):
        post(fault_server, {"model": "any", "messages": MESSAGES})
    fault_server.push(reset_during(1), malformed(1), error_event(1))
    with pytest.raises(httpx.TransportError):
        post(fault_server, {"model": "any", "messages": MESSAGES, "stream": True})
    assert "chatcmpl-broken" in post(fault_server, {"model": "any", "messages": MESSAGES, "stream": True}).text
    assert '"error"' in post(fault_server, {"model": "any", "messages": MESSAGES, "stream": True}).text


def test_fault_timed_stream_never_early(fault_server: OpenAICompatServer) -> None:
    gaps = [0.01, 0.02, 0.0, 0.015]
    fault_server.push(timed(0.05, gaps))
    start = time.perf_counter()
    arrivals = []
    with HTTP.stream("POST", fault_server.base_url + "/chat/completions", timeout=10,
                      json={"model": "m", "messages": MESSAGES, "stream": True}) as r:
        for line in r.iter_lines():
            if '"content":" tok"' in line:
                arrivals.append(time.perf_counter() - start)
    assert len(arrivals) == 5
    scheduled = [0.05 + sum(gaps[:i]) for i in range(5)]
    # Lower bounds only: the server schedules against absolute deadlines and cannot send early.
    assert all(a >= s - 0.002 for a, s in zip(arrivals, scheduled))


def test_run_module_serves_in_a_separate_process() -> None:
    with spawn("fault", tokens=2) as url:
        r = HTTP.post(url + "/chat/completions", json={"model": "m", "messages": MESSAGES}, timeout=10)
        assert r.json()["choices"][0]["message"]["content"] == " tok tok"


def test_bare_status_uses_the_platform_catalog(together_server: OpenAICompatServer) -> None:
    together_server.push(Reply(status=402), Reply(status=503, headers={"Retry-After": "3"}))
    r = post(together_server, body_for(together_server))
    assert r.status_code == 402 and r.json()["error"]["code"] == "credit_limit"
    r = post(together_server, body_for(together_server))
    assert r.status_code == 503 and r.headers["retry-after"] == "3" and "overloaded" in r.json()["error"]["message"]
