"""A key never shows: config reprs and dumps, pickles, errors a server echoes a key into (raw,
URL-encoded, JSON-escaped), tracebacks with locals, health (API, table, JSON), spans and the log
records of httpx/httpcore/aiohttp/llmroute. Every check goes through a real loopback server."""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import pickle
import pprint
import subprocess
import sys
import textwrap
import traceback
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest

import llmroute as L
from llmroute.cli import main as cli_main
from llmroute.config import Config
from llmroute._runtime.secrets import SecretStr, install_log_scrubbing, is_secret_header, scrub
from tests.servers.script import Reply

REPO = Path(__file__).resolve().parents[1]
KEY = "live-key-0123456789abcdef"  # not "sk-"-shaped: only registration can mask it
HEADER_KEY = "hdr-token-fedcba9876543210"
AUTH_HEADER = "Token zyx-0a1b2c3d4e5f"
MESSAGES = [{"role": "user", "content": "hi"}]
FORMS = (KEY, quote(KEY, safe=""), quote_plus(KEY), HEADER_KEY, "0a1b2c3d4e5f")


def leaks(text: object) -> list[str]:
    text = str(text)
    return [form for form in FORMS if form in text]


def cfg(server, **provider) -> dict:
    return {
        "providers": {"p": {"kind": "together", "base_url": server.base_url, "api_key": KEY,
                            "headers": {"x-api-key": HEADER_KEY, "X-Custom-Auth": AUTH_HEADER, "X-Team": "blue"},
                            **provider}},
        "tiers": {"t": {"deployments": ["p:gpt-4o-mini"]}},
        "resilience": {"max_retries": 0},
        "pricing": {"strict": False},
        "ledger": {"sink": "memory"},
    }


def echo_401(server) -> None:
    message = f"Incorrect API key provided: {KEY} (as sent: {quote(KEY, safe='')}; header {HEADER_KEY})"
    server.push(Reply(status=401, body={"error": {"message": message, "type": "invalid_request_error",
                                                  "code": "invalid_api_key"}}))


@pytest.fixture
def server(make_server):
    return make_server("openai", api_key=KEY)


# -- the type -----------------------------------------------------------------------------------------


def test_secret_str_masks_every_rendering():
    s = SecretStr(KEY)
    assert s.get() == KEY
    for shown in (repr(s), str(s), f"{s}", f"{s:>40}", pprint.pformat({"k": s}), repr(copy.deepcopy(s))):
        assert not leaks(shown), shown
    revived = pickle.loads(pickle.dumps(s))
    assert not leaks(pickle.dumps(s)) and not leaks(repr(revived))
    with pytest.raises(L.ConfigError, match="masked when it was pickled"):
        revived.get()


@pytest.mark.parametrize("form", [KEY, quote(KEY, safe=""), quote_plus(KEY + " x"), json.dumps(KEY + '"')[1:-1]])
def test_scrub_catches_raw_url_encoded_and_json_escaped_forms(form):
    SecretStr(KEY)
    SecretStr(KEY + " x")
    SecretStr(KEY + '"')
    assert "***" in scrub(f"the server said: {form}.")
    assert KEY not in scrub(f"the server said: {form}.")


def test_scrub_catches_unregistered_key_shapes():
    text = scrub("Authorization: Basic dXNlcjpwYXNzd29yZA== url https://h/v1?key=abc123secret&x=1 sk-abcdefghijkl")
    assert "dXNlcjpwYXNzd29yZA" not in text and "abc123secret" not in text and "sk-abcdefghijkl" not in text
    assert "x=1" in text


@pytest.mark.parametrize("name,secret", [("Authorization", True), ("x-api-key", True), ("X-DashScope-Api-Key", True),
                                         ("X-Auth-Token", True), ("api-key", True), ("X-Team", False),
                                         ("Content-Type", False), ("X-Request-Id", False)])
def test_secret_header_names(name, secret):
    assert is_secret_header(name) is secret


# -- config surfaces ----------------------------------------------------------------------------------


def test_config_reprs_dumps_and_pickles_never_show_a_key(server):
    with L.Client(config=cfg(server)) as client:
        config = client.config
        raw = config.raw
        surfaces = {
            "repr": repr(config), "str": str(config), "pprint": pprint.pformat(config),
            "provider": repr(config.providers["p"]), "raw repr": repr(raw),
            "model_dump": raw.model_dump(), "model_dump_json": raw.model_dump_json(),
            "provider model_dump": raw.providers["p"].model_dump(), "client": repr(client),
            "pickle": pickle.dumps(config), "deployment": repr(config.all_deployments()),
        }
        for name, text in surfaces.items():
            assert not leaks(text), name
        assert raw.providers["p"].model_dump()["headers"] == {"x-api-key": "***", "X-Custom-Auth": "***",
                                                               "X-Team": "blue"}
        # ... and the keys still go on the wire, each in its own header.
        client.chat.completions.create(model="p:gpt-4o-mini", messages=MESSAGES)
        sent = server.last_request.headers
        assert sent["authorization"] == f"Bearer {KEY}"
        assert sent["x-api-key"] == HEADER_KEY and sent["x-custom-auth"] == AUTH_HEADER and sent["x-team"] == "blue"


def test_a_key_from_an_env_reference_is_masked_too(server, monkeypatch):
    monkeypatch.setenv("LLMROUTE_TEST_KEY", KEY)
    data = cfg(server, api_key="${LLMROUTE_TEST_KEY}")
    config = Config.from_dict(data)
    assert config.providers["p"].api_key.get() == KEY
    assert not leaks(repr(config)) and not leaks(config.raw.model_dump_json())


@pytest.mark.parametrize("base_url", [
    f"http://user:{KEY}@127.0.0.1:9/v1",
    f"http://{KEY}@127.0.0.1:9/v1",
    f"http://127.0.0.1:9/v1?key={KEY}",
    f"http://127.0.0.1:9/v1?api_key={quote(KEY)}&x=1",
])
def test_credentials_in_base_url_are_refused_without_echoing_them(base_url, caplog):
    caplog.set_level(logging.DEBUG)
    with pytest.raises(L.ConfigError) as info:
        Config.from_dict({"providers": {"p": {"kind": "vllm", "base_url": base_url}},
                          "tiers": {"t": {"deployments": ["p:gpt-4o-mini"]}}, "ledger": {"sink": "memory"}})
    assert info.value.key == "providers.p.base_url"
    assert "credentials" in str(info.value) or "query" in str(info.value)
    assert not leaks(str(info.value)) and not leaks(repr(info.value)) and not leaks(caplog.text)


# -- a key a server echoes back -----------------------------------------------------------------------


def test_an_echoed_key_is_scrubbed_from_every_error_surface(server, caplog):
    caplog.set_level(logging.DEBUG)
    echo_401(server)
    with L.Client(config=cfg(server)) as client:
        with pytest.raises(L.AuthenticationError) as info:
            client.chat.completions.create(model="p:gpt-4o-mini", messages=MESSAGES)
        error = info.value
        assert "Incorrect API key provided" in error.provider_message  # the message itself is kept
        revived = pickle.loads(pickle.dumps(error))
        tb_locals = traceback.TracebackException.from_exception(error, capture_locals=True)
        our_frames = [f for f in tb_locals.stack if "/llmroute/" in f.filename]
        assert our_frames
        health = client.health()
        surfaces = {
            "str": str(error), "repr": repr(error), "provider_message": error.provider_message,
            "args": error.args, "pickle bytes": pickle.dumps(error), "unpickled": f"{revived} {revived.provider_message}",
            "traceback": "".join(traceback.format_exception(error)),
            "locals": "".join(f"{f.name} {f.locals}" for f in our_frames),
            "health": repr(health), "health dicts": json.dumps({d: s.as_dict() for d, s in health.items()}, default=str),
            "logs": caplog.text,
        }
        for name, text in surfaces.items():
            assert not leaks(text), name
        assert health["p:gpt-4o-mini"].last_error  # there is an error to show, and it is shown scrubbed


def test_llmroute_health_table_and_json_never_show_the_key(server, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LLMROUTE_TEST_KEY", KEY)
    path = tmp_path / "llmroute.toml"
    path.write_text(textwrap.dedent(f"""
        [providers.p]
        kind = "together"
        base_url = "{server.base_url}"
        api_key = "${{LLMROUTE_TEST_KEY}}"
        headers = {{ "x-api-key" = "{HEADER_KEY}" }}
        [tiers.t]
        deployments = ["p:gpt-4o-mini"]
        [resilience]
        max_retries = 0
        [pricing]
        strict = false
        [ledger]
        sink = "memory"
    """), encoding="utf-8")
    for extra in ([], ["--json"]):
        echo_401(server)
        rc = cli_main(["health", "--config", str(path), *extra])
        out = capsys.readouterr()
        assert rc == 1
        assert "AuthenticationError" in out.out + out.err
        assert not leaks(out.out) and not leaks(out.err), extra
        if not extra:
            assert "ledger: MemorySink(): 1 written, 0 waiting, 0 lost" in out.out
    data = json.loads(out.out)
    assert data["ledger"]["lost"] == 0 and "p:gpt-4o-mini" in data


def test_async_client_on_aiohttp_scrubs_the_echo_and_its_logs(server, caplog):
    pytest.importorskip("aiohttp")
    caplog.set_level(logging.DEBUG)

    async def run() -> L.AuthenticationError:
        async with L.AsyncClient(config=cfg(server), transport="aiohttp") as client:
            echo_401(server)
            with pytest.raises(L.AuthenticationError) as info:
                await client.chat.completions.create(model="p:gpt-4o-mini", messages=MESSAGES)
            assert not leaks(repr(client.health()))
            return info.value

    error = asyncio.run(run())
    assert not leaks(str(error)) and not leaks(error.provider_message) and not leaks(caplog.text)


def test_log_filter_scrubs_http_client_loggers(caplog):
    SecretStr(KEY)
    install_log_scrubbing()
    caplog.set_level(logging.DEBUG)
    for name in ("httpx", "httpcore.http11", "aiohttp.client", "llmroute.ledger"):
        logging.getLogger(name).info("HTTP Request: POST http://127.0.0.1/v1?key=%s %s", quote(KEY), KEY)
    try:
        raise RuntimeError(f"upstream said {KEY}")
    except RuntimeError:
        logging.getLogger("llmroute.ledger").exception("failed with %s", quote_plus(KEY))
    assert caplog.records and not leaks(caplog.text)
    assert caplog.text.count("HTTP Request") == 4 and "upstream said ***" in caplog.text


def test_span_status_and_attributes_never_show_the_key(make_server):
    # A child process: the tracer provider is process-global.
    code = textwrap.dedent("""
        import json
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        exporter = InMemorySpanExporter()
        provider = TracerProvider(); provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        import llmroute as L
        from tests.servers.registry import SERVERS
        from tests.test_secrets import MESSAGES, cfg, echo_401, KEY
        server = SERVERS["openai"](api_key=KEY).start()
        try:
            with L.Client(config=cfg(server)) as client:
                echo_401(server)
                try:
                    client.chat.completions.create(model="p:gpt-4o-mini", messages=MESSAGES)
                except L.AuthenticationError:
                    pass
        finally:
            server.stop()
        spans = exporter.get_finished_spans()
        print(json.dumps([{"status": s.status.description, "attributes": dict(s.attributes),
                           "events": [dict(e.attributes or {}) for e in s.events]} for s in spans], default=str))
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    spans = json.loads(out.stdout.strip().splitlines()[-1])
    assert spans and any(s["status"] for s in spans)
    assert not leaks(out.stdout) and not leaks(out.stderr)
