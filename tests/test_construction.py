"""Building a client as openai-python users do: `Client(base_url=..., api_key=...)`, `Client()` from
`$LLMROUTE_CONFIG` or `./llmroute.toml`, bare model ids, `with_options`, and the response surface
(`with_raw_response` headers, `to_dict`, server extras) on the real llama.cpp server."""

from __future__ import annotations

import gc
import warnings

import pytest

import llmroute as L
from tests.servers.llamacpp import MODEL_ALIAS, llama_config

MESSAGES = [{"role": "user", "content": "hi"}]
FREE = {"input_per_million": 0, "output_per_million": 0}

@pytest.fixture(autouse=True)
def _ledger_in_tmp(tmp_path, monkeypatch):
    """A `Client(base_url=...)` keeps its ledger at ./llmroute-ledger.db (the [ledger] default): in tmp."""
    monkeypatch.chdir(tmp_path)


def _toml(base_url: str) -> str:
    return "\n".join(['[providers.local]', 'kind = "llamacpp"', f'base_url = "{base_url}"', "",
                      '[tiers.small]', f'deployments = ["local:{MODEL_ALIAS}"]', "",
                      '[pricing."local:*"]', "input_per_million = 0", "output_per_million = 0", ""])


def test_client_with_no_arguments_reads_the_env_then_the_working_directory(llama_server, tmp_path, monkeypatch):
    monkeypatch.delenv("LLMROUTE_CONFIG", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(L.ConfigError) as info:
        L.Client()
    assert "LLMROUTE_CONFIG" in str(info.value) and "llmroute.toml" in str(info.value)
    (tmp_path / "llmroute.toml").write_text(_toml(llama_server.base_url))
    with L.Client() as c:
        assert c.config.source.endswith("llmroute.toml") and list(c.config.tiers) == ["small"]
        assert c.chat.completions.create(model="small", messages=MESSAGES, max_tokens=2).choices
    elsewhere = tmp_path / "other.toml"
    elsewhere.write_text(_toml(llama_server.base_url).replace("tiers.small", "tiers.named"))
    monkeypatch.setenv("LLMROUTE_CONFIG", str(elsewhere))
    with L.Client() as c:  # the env wins over the working directory
        assert list(c.config.tiers) == ["named"]
    monkeypatch.setenv("LLMROUTE_CONFIG", str(tmp_path / "missing.toml"))
    with pytest.raises(L.ConfigError, match="missing.toml: config file not found"):
        L.Client()


def test_base_url_client_calls_the_server_by_its_own_model_ids(llama_server):
    with L.Client(base_url=llama_server.base_url, api_key="sk-local", prices={MODEL_ALIAS: FREE}) as c:
        resp = c.chat.completions.create(model=MODEL_ALIAS, messages=MESSAGES, max_tokens=2)
        assert resp.route.deployment == f"default:{MODEL_ALIAS}" and resp.cost.amount == 0
        assert [m.id for m in c.models.list()] == [MODEL_ALIAS]
        assert str(c.base_url) == llama_server.base_url + "/"
        import httpx

        assert c.chat.completions.create(model=MODEL_ALIAS, messages=MESSAGES, max_tokens=2,
                                         timeout=httpx.Timeout(20.0, connect=2.0)).choices  # per call, too
        with pytest.raises(L.InvalidRequestError, match="timeout"):
            c.chat.completions.create(model=MODEL_ALIAS, messages=MESSAGES, timeout=httpx.Timeout(-1.0))
        with pytest.raises(L.ConfigError, match="no price"):  # priced: another model id is refused before sending
            c.chat.completions.create(model="other-model", messages=MESSAGES, max_tokens=2)


def test_an_unpriced_server_warns_once_and_records_no_cost(llama_server):
    url = llama_server.base_url.replace("127.0.0.1", "localhost")  # a server no other test warned about
    with pytest.warns(UserWarning, match="has no prices") as caught:
        c1 = L.Client(base_url=url)
    assert len(caught) == 1 and "sk-" not in str(caught[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c2 = L.Client(base_url=url)  # once per server
    with c1, c2:
        resp = c1.chat.completions.create(model=MODEL_ALIAS, messages=MESSAGES, max_tokens=2)
    assert resp.cost.amount is None


def test_construction_mistakes_are_config_errors_before_any_io(monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(L.ConfigError, match="base_url"):
        L.Client(api_key="sk-secret-value")
    with pytest.raises(L.ConfigError, match="not both"):
        L.Client({"providers": {}}, base_url="http://127.0.0.1:9/v1")
    with pytest.raises(L.ConfigError, match="max_retries"):
        L.Client(base_url="http://127.0.0.1:9/v1", max_retries=-1, prices={})
    with pytest.raises(L.ConfigError, match="timeout"):
        L.Client(base_url="http://127.0.0.1:9/v1", timeout="soon", prices={})
    with pytest.raises(L.ConfigError) as info:
        L.Client(base_url="http://user:sk-secret-value@127.0.0.1:9/v1", prices={})
    assert "sk-secret-value" not in str(info.value)


def test_a_bare_model_id_served_by_one_configured_deployment(llama_server, vllm_server):
    cfg = llama_config(llama_server.base_url)
    with L.Client(cfg) as c:
        resp = c.chat.completions.create(model=MODEL_ALIAS, messages=MESSAGES, max_tokens=2)
        assert resp.route.deployment == f"local:{MODEL_ALIAS}" and resp.route.reason.startswith("model:")
        with pytest.raises(L.RoutingError, match="no configured deployment serves"):
            c.chat.completions.create(model="not-served", messages=MESSAGES)
    two = {**cfg, "providers": {**cfg["providers"], "other": {"kind": "vllm", "base_url": vllm_server.base_url}},
           "tiers": {**cfg["tiers"], "extra": {"deployments": [f"other:{MODEL_ALIAS}"]}},
           "pricing": {**cfg["pricing"], "other:*": FREE}}
    with L.Client(two) as c:
        with pytest.raises(L.RoutingError, match="several configured deployments"):
            c.chat.completions.create(model=MODEL_ALIAS, messages=MESSAGES)


def test_with_options_shares_the_client_and_sets_call_defaults(llama_server, fault_server):
    from tests.servers.fault import status

    with L.Client(base_url=fault_server.base_url, prices={"fault-model": FREE}, max_retries=3) as c:
        fault_server.push(status(500), status(500))
        quick = c.with_options(max_retries=0, timeout=30)
        assert quick.max_retries == 0 and quick.timeout == 30 and c.max_retries == 3
        with pytest.raises(L.LLMRouteError) as info:
            quick.chat.completions.create(model="fault-model", messages=MESSAGES)
        assert len(info.value.attempts) == 1  # no retry: max_retries=0 for this view's calls
        assert quick._engine is c._engine and quick._transport is c._transport
        del quick
        gc.collect()  # a view's end closes nothing of its client
        resp = c.chat.completions.create(model="fault-model", messages=MESSAGES)  # the 2nd 500, then an answer
        assert [a.status for a in resp.route.attempts] == ["error", "ok"]


def test_raw_response_has_the_answering_attempts_status_and_headers(fault_server):
    from tests.servers.fault import status

    with L.Client(base_url=fault_server.base_url, prices={"fault-model": FREE}, max_retries=2) as c:
        fault_server.push(status(503))
        raw = c.chat.completions.with_raw_response.create(model="fault-model", messages=MESSAGES)
    assert raw.status_code == 200 and raw.retries_taken == 1
    assert raw.elapsed.total_seconds() > 0
    assert raw.headers.get("content-type", "").startswith(("text/event-stream", "application/json"))
    assert raw.parse().choices[0].message.content
    assert "chat.completion" in raw.text() and raw.json()["object"] == "chat.completion"


def test_plain_answers_keep_server_extras_and_declare_openai_fields(llama_server):
    with L.Client(llama_config(llama_server.base_url)) as c:
        resp = c.chat.completions.create(model="small", messages=MESSAGES, max_tokens=2)
    assert "timings" in resp.model_extra and resp.to_dict()["timings"]["predicted_n"] >= 1
    assert resp.service_tier is None and resp.choices[0].message.function_call is None
    assert resp.choices[0].message.annotations is None and resp.choices[0].message.audio is None
    assert "route" not in resp.to_dict() and "cost" not in resp.to_json()


def _sse(*events: dict) -> str:
    import json

    return "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"


def test_a_tool_only_answer_keeps_the_empty_content_the_server_sent(fault_server):
    from tests.servers.script import Reply

    base = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "fault-model"}
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    body = _sse({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
                {**base, "choices": [{"index": 0, "delta": {"tool_calls": [call]}}]},
                {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}], "x_server": 7},
                {**base, "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}})
    with L.Client(base_url=fault_server.base_url, prices={"fault-model": FREE}) as c:
        fault_server.push(Reply(body=body, headers={"Content-Type": "text/event-stream"}))
        resp = c.chat.completions.create(model="fault-model", messages=MESSAGES)
        fault_server.push(Reply(body=body.replace('"content": ""', '"content": null'),
                                headers={"Content-Type": "text/event-stream"}))
        absent = c.chat.completions.create(model="fault-model", messages=MESSAGES)
    message = resp.choices[0].message
    assert message.content == "" and message.tool_calls[0].function.name == "f"
    assert resp.model_extra["x_server"] == 7  # a server's own top-level field, kept on the assembled answer
    assert absent.choices[0].message.content is None  # not sent: None, as before


def test_async_with_options_and_base_url_client(llama_server):
    import asyncio

    async def main():
        async with L.AsyncClient(base_url=llama_server.base_url, prices={MODEL_ALIAS: FREE}) as c:
            quick = c.with_options(max_retries=0, timeout=30)
            resp = await quick.chat.completions.create(model=MODEL_ALIAS, messages=MESSAGES, max_tokens=2)
            listed = await quick.models.list()
            return resp, [m.id for m in listed], quick.max_retries, c.max_retries

    resp, ids, view_retries, client_retries = asyncio.run(main())
    assert resp.route.deployment == f"default:{MODEL_ALIAS}" and ids == [MODEL_ALIAS]
    assert (view_retries, client_retries) == (0, None)


def test_client_options_reach_embeddings(fault_server):
    from tests.servers.fault import status

    with L.Client(base_url=fault_server.base_url, prices={"fault-embed": FREE}) as c:
        fault_server.push(status(500), model="fault-embed")
        with pytest.raises(L.LLMRouteError) as info:
            c.with_options(max_retries=0).embeddings.create(model="fault-embed", input="x")
        assert len(info.value.attempts) == 1
        assert c.embeddings.create(model="fault-embed", input="x").data  # the client itself: its own retries


def test_models_list_resends_once_after_a_dropped_keep_alive_connection(fault_server):
    from tests.servers.script import Reply

    with L.Client(base_url=fault_server.base_url, prices={"fault-model": FREE}) as c:
        assert "fault-model" in [m.id for m in c.models.list()]  # opens a connection the next list reuses
        fault_server.push(Reply(close_before=True), path="/v1/models")
        assert "fault-model" in [m.id for m in c.models.list()]
        fault_server.push(Reply(close_before=True), Reply(close_before=True), path="/v1/models")
        with pytest.raises(L.APIConnectionError):  # once only
            c.models.list()


def test_stream_helper_gives_tool_call_argument_events(fault_server):
    from tests.servers.script import Reply

    base = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "fault-model"}
    first = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"ci'}}
    rest = {"index": 0, "function": {"arguments": 'ty": "Paris"}'}}
    body = _sse({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [first]}}]},
                {**base, "choices": [{"index": 0, "delta": {"tool_calls": [rest]}}]},
                {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    with L.Client(base_url=fault_server.base_url, prices={"fault-model": FREE}) as c:
        fault_server.push(Reply(body=body, headers={"Content-Type": "text/event-stream"}))
        tool = {"type": "function", "function": {"name": "get_weather", "strict": True, "parameters": {
            "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
            "additionalProperties": False}}}
        with c.chat.completions.stream(model="fault-model", messages=MESSAGES, tools=[tool]) as stream:
            events = [e for e in stream if e.type.startswith("tool_calls")]
            final = stream.get_final_completion()
    assert [e.arguments_delta for e in events[:-1]] == ['{"ci', 'ty": "Paris"}']
    done = events[-1]
    assert done.type == "tool_calls.function.arguments.done" and done.name == "get_weather"
    assert done.parsed_arguments == {"city": "Paris"}  # a strict tool: JSON (openai-python's rule)
    assert final.choices[0].message.tool_calls[0].function.arguments == '{"city": "Paris"}'


def test_client_with_no_arguments_and_no_config_calls_openai_base_url(llama_server, tmp_path, monkeypatch):
    monkeypatch.delenv("LLMROUTE_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_BASE_URL", llama_server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    with L.Client(prices={MODEL_ALIAS: FREE}) as c:  # as OpenAI() reads its two variables
        assert c.config.default_provider == "default" and c.config.providers["default"].api_key.get() == "sk-from-env"
        assert c.chat.completions.create(model=MODEL_ALIAS, messages=MESSAGES, max_tokens=2).choices


def test_a_cache_hit_raw_response_says_so(llama_server):
    cfg = {**llama_config(llama_server.base_url), "cache": {"enabled": True}}
    with L.Client(cfg) as c:
        call = dict(model="small", messages=MESSAGES, max_tokens=2, temperature=0)
        first = c.chat.completions.with_raw_response.create(**call)
        again = c.chat.completions.with_raw_response.create(**call)
    assert first.from_cache is False and first.headers.get("server") == "llama.cpp"
    assert again.parse().route.cache == "hit"
    assert again.from_cache is True and again.status_code == 200 and len(again.headers) == 0


def test_a_timeout_too_long_for_the_clock_is_refused_before_any_io(fault_server):
    # 1e10 s overflowed the socket layer's clock: a bare OverflowError from httpcore on the first request.
    import httpx

    for timeout in (1e10, 86_401, httpx.Timeout(1e10)):
        with pytest.raises(L.ConfigError, match="at most 86400"):
            L.Client(base_url=fault_server.base_url, prices={"fault-model": FREE}, timeout=timeout)
        with L.Client(base_url=fault_server.base_url, prices={"fault-model": FREE}) as c:
            with pytest.raises(L.ConfigError, match="at most 86400"):
                c.with_options(timeout=timeout)
    assert fault_server.chat_requests() == []
    # a day per attempt, with its retries, still makes a client that answers
    with L.Client(base_url=fault_server.base_url, prices={"fault-model": FREE}, timeout=86_400, max_retries=20) as c:
        assert c.chat.completions.create(model="fault-model", messages=MESSAGES).choices[0].message.content


def test_a_base_url_clients_timeout_is_each_attempts(fault_server):
    from tests.servers.fault import slow_ttft

    with L.Client(base_url=fault_server.base_url, prices={"fault-model": FREE}, timeout=2.0, max_retries=1) as c:
        assert c.timeout == 2.0
        fault_server.push(slow_ttft(8.0))  # the first attempt times out; the retry has its own 2 s
        resp = c.chat.completions.create(model="fault-model", messages=MESSAGES)
    assert [a.status for a in resp.route.attempts] == ["error", "ok"]
    assert resp.route.attempts[0].error_type == "APITimeoutError"
