"""Tool calls read by `parse()` and `stream()` as openai-python reads them, side by side with openai-python
on the loopback OpenAI server: a `pydantic_function_tool` into its model, another strict tool into JSON,
a tool that is not strict refused by `parse()` before anything is sent."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel

import llmroute
from tests.dropin.conftest import KEY, MODEL
from tests.servers.script import Reply

MESSAGES = [{"role": "user", "content": "Weather in Paris?"}]


class GetWeather(BaseModel):
    """The weather in a city."""

    city: str
    days: int


LOOKUP = {"type": "function", "function": {"name": "lookup", "strict": True, "parameters": {
    "type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"], "additionalProperties": False}}}


def _tool_call_body(*calls: tuple[str, dict]) -> dict:
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": MODEL,
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": None,
                "tool_calls": [{"id": f"call_{i}", "type": "function",
                                "function": {"name": name, "arguments": json.dumps(args)}}
                               for i, (name, args) in enumerate(calls)]}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}}


def _tool_call_stream(*calls: tuple[str, dict]) -> Reply:
    """The same calls streamed as the platform streams them: a name first, the arguments in two pieces."""
    def chunk(delta: dict, finish: str | None = None) -> str:
        return "data: " + json.dumps({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                                      "model": MODEL, "choices": [{"index": 0, "delta": delta,
                                                                   "finish_reason": finish}]}) + "\n\n"
    events = [chunk({"role": "assistant", "content": None})]
    for i, (name, args) in enumerate(calls):
        text = json.dumps(args)
        events.append(chunk({"tool_calls": [{"index": i, "id": f"call_{i}", "type": "function",
                                             "function": {"name": name, "arguments": ""}}]}))
        for piece in (text[:len(text) // 2], text[len(text) // 2:]):
            events.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}))
    events.append(chunk({}, "tool_calls"))
    return Reply(body="".join(events) + "data: [DONE]\n\n", headers={"content-type": "text/event-stream"})


def _clients(server):
    openai = pytest.importorskip("openai")
    theirs = openai.OpenAI(base_url=server.base_url, api_key=KEY, max_retries=0)
    ours = llmroute.Client(base_url=server.base_url, api_key=KEY, max_retries=0,
                           prices={MODEL: {"input_per_million": 0, "output_per_million": 0}})
    return openai, theirs, ours


def test_parse_reads_each_tool_call_as_its_tool_says_like_openai(openai_server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default ledger file
    openai, theirs, ours = _clients(openai_server)
    results = []
    for sdk, client in ((openai, theirs), (llmroute, ours)):
        openai_server.push(Reply(body=_tool_call_body(("GetWeather", {"city": "Paris", "days": 2}),
                                                      ("lookup", {"q": "paris"}))))
        with client:
            completion = client.chat.completions.parse(
                model=MODEL, messages=MESSAGES, tools=[sdk.pydantic_function_tool(GetWeather), LOOKUP])
        calls = completion.choices[0].message.tool_calls
        results.append([(c.function.name, c.function.arguments, c.function.parsed_arguments) for c in calls])
        sent = json.loads(openai_server.last_request.body)
        assert sent["tools"][0]["function"]["parameters"]["required"] == ["city", "days"]
        assert sent["tools"][0]["function"]["strict"] is True
    assert results[0] == results[1]
    assert results[1][0][2] == GetWeather(city="Paris", days=2) and results[1][1][2] == {"q": "paris"}


def test_our_helper_sends_the_same_tool_as_openais():
    openai = pytest.importorskip("openai")
    assert json.loads(json.dumps(llmroute.pydantic_function_tool(GetWeather))) == \
        json.loads(json.dumps(openai.pydantic_function_tool(GetWeather)))
    with pytest.raises(llmroute.InvalidRequestError, match="model"):
        llmroute.pydantic_function_tool({"type": "object"})


def test_parse_refuses_a_tool_that_is_not_strict_before_sending(openai_server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    loose = {"type": "function", "function": {"name": "loose", "parameters": {"type": "object"}}}
    with llmroute.Client(base_url=openai_server.base_url, api_key=KEY,
                         prices={MODEL: {"input_per_million": 0, "output_per_million": 0}}) as client:
        with pytest.raises(llmroute.InvalidRequestError, match=r"tools\[1\] \('loose'\) is not strict") as err:
            client.chat.completions.parse(model=MODEL, messages=MESSAGES, tools=[LOOKUP, loose])
    assert err.value.param == "tools" and openai_server.requests == []


def test_stream_events_carry_the_tools_parsed_arguments(openai_server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    openai, theirs, ours = _clients(openai_server)
    loose = {"type": "function", "function": {"name": "loose", "parameters": {"type": "object"}}}
    results = []
    for sdk, client in ((openai, theirs), (llmroute, ours)):
        openai_server.push(_tool_call_stream(("GetWeather", {"city": "Oslo", "days": 1}), ("loose", {"x": 1})))
        with client, client.chat.completions.stream(
                model=MODEL, messages=MESSAGES, tools=[sdk.pydantic_function_tool(GetWeather), loose]) as stream:
            done = [(e.name, e.parsed_arguments) for e in stream if e.type == "tool_calls.function.arguments.done"]
            final = stream.get_final_completion().choices[0].message.tool_calls
        results.append((done, [c.function.parsed_arguments for c in final]))
    assert results[0] == results[1]
    assert results[1][0] == [("GetWeather", GetWeather(city="Oslo", days=1)), ("loose", None)]


def test_stream_logprobs_events_like_openai(openai_server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    openai, theirs, ours = _clients(openai_server)
    seen = []
    for client in (theirs, ours):
        openai_server.push(Reply(pieces=["Hel", "lo", "!"]))
        with client, client.chat.completions.stream(model=MODEL, messages=MESSAGES, logprobs=True,
                                                    top_logprobs=1) as stream:
            events = [e for e in stream if e.type.startswith("logprobs.")]
        seen.append([(e.type, [t.token for t in (e.content or [])],
                      [t.token for t in (getattr(e, "snapshot", None) or [])]) for e in events])
    assert seen[0] == seen[1]
    assert [t for t, _, _ in seen[1]] == ["logprobs.content.delta"] * 3 + ["logprobs.content.done"]
    assert seen[1][-1][1] == ["Hel", "lo", "!"] and seen[1][1][2] == ["Hel", "lo"]
