"""No API key in a stack frame's locals: error trackers (Sentry, rich, `traceback` with
`capture_locals=True`) print every local of every frame of a traceback. Errors are raised at each
stage of a call (config, send, read, failover, ledger, a KeyboardInterrupt while the request is on the
wire) against loopback servers, formatted with captured locals, and searched for the keys: the
provider's `api_key` and a key sent in a configured header."""

from __future__ import annotations

import asyncio
import logging
import traceback
from typing import Any

import pytest

import llmroute as L
from tests.servers.fault import reset_during, slow_headers, status

KEY = "sk-frame-test-0123456789abcdefXYZ"
HEADER_KEY = "hk-frame-test-9876543210zyxwvuABC"
MESSAGES = [{"role": "user", "content": "hello"}]


def _config(*servers: Any, **deployment: Any) -> dict[str, Any]:
    names = [f"p{i}" for i in range(len(servers))]
    return {
        "providers": {name: {"kind": "openai-compatible", "base_url": s if isinstance(s, str) else s.base_url,
                             "api_key": KEY, "headers": {"X-Api-Key": HEADER_KEY}}
                      for name, s in zip(names, servers)},
        "tiers": {"t": {"deployments": [{"id": f"{name}:m", **deployment} for name in names]}},
        "resilience": {"max_retries": 0},
        "pricing": {f"{name}:*": {"input_per_million": 1, "output_per_million": 1} for name in names},
        "ledger": {"sink": "memory"},
    }


def _assert_no_key(error: BaseException) -> None:
    te = traceback.TracebackException.from_exception(error, capture_locals=True)
    frames = 0
    seen: set[int] = set()
    while te is not None and id(te) not in seen:
        seen.add(id(te))
        for frame in te.stack:
            if frame.filename == __file__:
                continue  # this test's own locals hold the config it wrote, keys included
            frames += 1
            shown = f"{frame.filename}:{frame.lineno} {frame.name} {frame.locals}"
            assert KEY not in shown and HEADER_KEY not in shown, _leak(shown)
        te = te.__cause__ or te.__context__  # type: ignore[assignment]
    assert frames > 0  # frames of llmroute were formatted with their locals


def _leak(text: str) -> str:
    for name in ("KEY", "HEADER_KEY"):
        key = globals()[name]
        at = text.find(key)
        if at >= 0:
            return text[:200] + " ... " + text[max(0, at - 300):at + 50]
    return ""


def _raised(fn: Any) -> BaseException:
    try:
        fn()
    except BaseException as exc:  # noqa: BLE001 - what the stage raised, formatted below
        return exc
    pytest.fail("nothing was raised")



def test_config_stage(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Keys from the environment (`${VAR}`), in a dict and in a TOML file, and written in the file.
    monkeypatch.setenv("FRAME_TEST_KEY", KEY)
    monkeypatch.setenv("FRAME_TEST_HEADER_KEY", HEADER_KEY)
    bad = _config("http://127.0.0.1:9/v1")
    bad["providers"]["p0"].update(api_key="${FRAME_TEST_KEY}", headers={"X-Api-Key": "${FRAME_TEST_HEADER_KEY}"})
    bad["tiers"]["t"]["deployments"][0]["weight"] = -1
    _assert_no_key(_raised(lambda: L.Client(config=bad)))
    for key, header_key in (("${FRAME_TEST_KEY}", "${FRAME_TEST_HEADER_KEY}"), (KEY, HEADER_KEY)):
        path = tmp_path / "llmroute.toml"
        path.write_text(f'[providers.p]\nkind = "vllm"\nbase_url = "http://127.0.0.1:9/v1"\napi_key = "{key}"\n'
                        f'headers = {{ "X-Api-Key" = "{header_key}" }}\n[tiers.t]\ndeployments = ["p:m", "q:m"]\n',
                        encoding="utf-8")
        _assert_no_key(_raised(lambda: L.Client.from_config(path)))
        _assert_no_key(_raised(lambda: L.Client(config=str(path))))


@pytest.mark.parametrize("mode", ["sync", "aiohttp", "httpx"])
def test_send_read_and_failover_stages(mode: str, fault_server: Any, make_server: Any) -> None:
    refused = "http://127.0.0.1:9/v1"  # nothing listens on the discard port: connection refused
    second = make_server("fault")
    cases = [
        ("send", _config(refused), None),
        ("read", _config(fault_server), reset_during(2, ["one", " two", " three"], gap_s=0.01)),
        ("timeout", _config(fault_server, ttft_timeout_s=0.2), slow_headers(2.0)),
        ("failover", _config(fault_server, second), status(500)),
    ]
    for stage, config, reply in cases:
        if reply is not None:
            fault_server.push(reply)
            second.push(status(503))
        error = _call(mode, config, stream=stage == "read")
        assert isinstance(error, L.LLMRouteError), (stage, repr(error))
        _assert_no_key(error)


def _call(mode: str, config: dict[str, Any], *, stream: bool) -> BaseException:
    if mode == "sync":
        def run() -> None:
            with L.Client(config=config) as client:
                out = client.chat.completions.create(model="t", messages=MESSAGES, stream=stream)
                if stream:
                    list(out)
        return _raised(run)

    async def main() -> None:
        async with L.AsyncClient(config=config, transport=mode) as client:
            out = await client.chat.completions.create(model="t", messages=MESSAGES, stream=stream)
            if stream:
                async for _ in out:
                    pass

    return _raised(lambda: asyncio.run(main()))


def test_keyboard_interrupt_while_the_request_is_on_the_wire(fault_server: Any, alarm: Any) -> None:
    fault_server.push(slow_headers(3.0))
    with L.Client(config=_config(fault_server)) as client:
        alarm(0.3)
        error = _raised(lambda: client.chat.completions.create(model="t", messages=MESSAGES))
    assert isinstance(error, KeyboardInterrupt)
    _assert_no_key(error)


def test_async_cancellation_while_the_request_is_on_the_wire(fault_server: Any) -> None:
    fault_server.push(slow_headers(3.0))

    async def main() -> None:
        async with L.AsyncClient(config=_config(fault_server)) as client:
            await asyncio.wait_for(client.chat.completions.create(model="t", messages=MESSAGES), 0.3)

    error = _raised(lambda: asyncio.run(main()))
    assert isinstance(error, (asyncio.TimeoutError, TimeoutError))
    _assert_no_key(error)


def test_ledger_stage(fault_server: Any, caplog: pytest.LogCaptureFixture) -> None:
    def broken_sink(record: Any) -> None:
        raise RuntimeError("the ledger store is down")

    with caplog.at_level(logging.ERROR, logger="llmroute.ledger"):
        with L.Client(config=_config(fault_server), ledger=broken_sink) as client:
            client.chat.completions.create(model="t", messages=MESSAGES)
    logged = [r for r in caplog.records if r.exc_info]
    assert logged
    for record in logged:
        _assert_no_key(record.exc_info[1])  # type: ignore[index]
