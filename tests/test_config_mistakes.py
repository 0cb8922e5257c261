"""Config mistakes that used to load silently are ConfigErrors at load, naming the file and key path."""

from __future__ import annotations

import textwrap

import pytest

from llmroute.config import load_config
from llmroute.errors import ConfigError
from tests.read_only import read_only

PRICING = '[pricing]\nstrict = false\n'  # the deployments here are unpriced on purpose
PROVIDER = PRICING + '[providers.x]\nkind = "vllm"\nbase_url = "http://127.0.0.1:9/v1"\n'
TIER = '[tiers.t]\ndeployments = ["x:m"]\n'
LEDGER_MEMORY = '[ledger]\nsink = "memory"\n'


def write(tmp_path, text: str, name: str = "llmroute.toml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def refused(path) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(path) in str(info.value)  # the file is named
    return info.value


@pytest.mark.parametrize("text,key,words", [
    # weights that are not a finite positive number
    (PROVIDER + '[tiers.t]\ndeployments = [{ id = "x:m", weight = inf }]\n' + LEDGER_MEMORY,
     "tiers.t.deployments[0].weight", "finite"),
    (PROVIDER + '[tiers.t]\ndeployments = [{ id = "x:m", weight = nan }]\n' + LEDGER_MEMORY,
     "tiers.t.deployments[0].weight", ""),
    (PROVIDER + '[tiers.t]\ndeployments = [{ id = "x:m", weight = -1.0 }]\n' + LEDGER_MEMORY,
     "tiers.t.deployments[0].weight", "greater than 0"),
    # a weight so large it takes every request (bounded to 1e6)
    (PROVIDER + '[tiers.t]\ndeployments = [{ id = "x:m", weight = 1e308 }]\n' + LEDGER_MEMORY,
     "tiers.t.deployments[0].weight", "less than or equal to 1000000"),
    (PROVIDER.replace("v1\"\n", 'v1"\ntimeout_s = inf\n') + TIER + LEDGER_MEMORY, "providers.x.timeout_s", "finite"),
    # the same deployment with other settings in two tiers
    (PROVIDER + '[tiers.a]\ndeployments = [{ id = "x:m", timeout_s = 30 }]\n'
                '[tiers.b]\ndeployments = [{ id = "x:m", timeout_s = 60 }]\n' + LEDGER_MEMORY,
     "tiers.b.deployments[0]", "timeout_s"),
    (PROVIDER + '[tiers.a]\ndeployments = [{ id = "x:m", extra_body = { top_k = 1 } }]\n'
                '[tiers.b]\ndeployments = ["x:m"]\n' + LEDGER_MEMORY, "tiers.b.deployments[0]", "extra_body"),
    # an empty key on a cloud kind
    (PRICING + '[providers.x]\nkind = "together"\napi_key = ""\n' + TIER + LEDGER_MEMORY, "providers.x.api_key", "empty"),
    (PRICING + '[providers.x]\nkind = "fireworks"\napi_key = "   "\n' + TIER + LEDGER_MEMORY, "providers.x.api_key", "empty"),
    (PRICING + '[providers.x]\nkind = "together"\napi_key = "abc\\ndef"\n' + TIER + LEDGER_MEMORY, "providers.x.api_key",
     "line break"),
    # ${VAR} not set, in headers, in ledger.path, malformed
    (PROVIDER + 'headers = { "X-Team" = "${LLMROUTE_UNSET_PROBE}" }\n' + TIER + LEDGER_MEMORY,
     "providers.x.headers.X-Team", "LLMROUTE_UNSET_PROBE is not set"),
    (PROVIDER + TIER + '[ledger]\npath = "${LLMROUTE_UNSET_PROBE}/l.db"\n', "ledger.path", "not set"),
    (PROVIDER + '[tiers.t]\ndeployments = ["x:${LLMROUTE_UNSET_PROBE}"]\n' + LEDGER_MEMORY,
     "tiers.t.deployments[0]", "not set"),
    (PROVIDER + 'headers = { "X-Team" = "${LLMROUTE_UNSET_PROBE" }\n' + TIER + LEDGER_MEMORY,
     "providers.x.headers.X-Team", "malformed"),
    (PROVIDER + 'headers = { "X-Team" = "a\\r\\nInjected: 1" }\n' + TIER + LEDGER_MEMORY,
     "providers.x.headers", "line break"),
    (PROVIDER + 'headers = { "X Team" = "a" }\n' + TIER + LEDGER_MEMORY, "providers.x.headers", "header name"),
    # timeouts in an order where one can never fire
    (PROVIDER + '[tiers.t]\ndeployments = [{ id = "x:m", ttft_timeout_s = 90, timeout_s = 30 }]\n' + LEDGER_MEMORY,
     "tiers.t.deployments[0]", "ttft_timeout_s (90) is above timeout_s (30)"),
    (PROVIDER + '[tiers.t]\ndeployments = [{ id = "x:m", connect_timeout_s = 50, timeout_s = 20 }]\n' + LEDGER_MEMORY,
     "tiers.t.deployments[0]", "connect_timeout_s"),
    (PROVIDER + '[tiers.t]\ndeployments = [{ id = "x:m", timeout_s = 200 }]\n[resilience]\ndeadline_s = 100\n'
     + LEDGER_MEMORY, "tiers.t.deployments[0]", "deadline_s"),
    # a deadline (and so every timeout under it) the socket layer's clock overflows on (~1e10 s)
    (PROVIDER + TIER + '[resilience]\ndeadline_s = 1e12\n' + LEDGER_MEMORY, "resilience.deadline_s",
     "less than or equal to 1000000"),
])
def test_config_mistakes_name_the_key(tmp_path, text, key, words):
    error = refused(write(tmp_path, text))
    assert error.key == key, str(error)
    assert words in str(error)


@pytest.mark.parametrize("text,key", [
    # true/false for a number: pydantic's lax mode read them as 1 and 0 (a 1 s timeout, one retry)
    (PROVIDER.replace("v1\"\n", 'v1"\ntimeout_s = true\n') + TIER + LEDGER_MEMORY, "providers.x.timeout_s"),
    (PROVIDER.replace("v1\"\n", 'v1"\nmax_connections = true\n') + TIER + LEDGER_MEMORY,
     "providers.x.max_connections"),
    (PROVIDER + '[tiers.t]\ndeployments = [{ id = "x:m", weight = true }]\n' + LEDGER_MEMORY,
     "tiers.t.deployments[0].weight"),
    (PROVIDER + '[tiers.t]\ndeployments = [{ id = "x:m", context_window = false }]\n' + LEDGER_MEMORY,
     "tiers.t.deployments[0].context_window"),
    (PROVIDER + TIER + LEDGER_MEMORY + '[resilience]\nmax_retries = true\n', "resilience.max_retries"),
    (PROVIDER + TIER + LEDGER_MEMORY + '[resilience]\ndeadline_s = true\n', "resilience.deadline_s"),
    (PROVIDER + '[tiers.t]\ndeployments = ["x:m"]\nmax_retries = true\n' + LEDGER_MEMORY, "tiers.t.max_retries"),
    (PROVIDER + TIER + '[ledger]\nsink = "memory"\nflush_interval_s = true\n', "ledger.flush_interval_s"),
    (PROVIDER + TIER + LEDGER_MEMORY + '[routing]\ndefault = "t"\nthreshold = true\n', "routing.threshold"),
    (PROVIDER + TIER + LEDGER_MEMORY + '[cache]\nenabled = true\nttl_s = true\n', "cache.ttl_s"),
])
def test_a_boolean_for_a_number_names_the_key(tmp_path, text, key):
    error = refused(write(tmp_path, text))
    assert error.key == key and "must be a number, not" in str(error), str(error)


def test_boolean_keys_still_take_booleans(tmp_path):
    text = (PROVIDER + 'include_usage = true\nsplit_think_tags = false\n' + TIER + LEDGER_MEMORY
            + '[cache]\nenabled = true\n[telemetry]\ncapture_content = false\n')
    config = load_config(write(tmp_path, text))
    assert config.providers["x"].include_usage is True


@pytest.mark.parametrize("base_url,words", [
    ("ftp://127.0.0.1/v1", "not an http(s) URL"),
    ("http:///v1", "no host"),
    ("http://127.0.0.1:9/v 1", "whitespace"),
    (" http://127.0.0.1:9/v1", "whitespace"),
    ("http://127.0.0.1:9/v1?x=1", "query"),
    ("http://127.0.0.1:9/v1#frag", "fragment"),
    ("http://127.0.0.1:99999/v1", "not a valid URL"),
    ("http://127.0.0.1:0/v1", "port 0"),
    ("http://user:pw@127.0.0.1:9/v1", "credentials"),
    ("", "empty"),
])
def test_malformed_base_urls(tmp_path, base_url, words):
    text = PRICING + f'[providers.x]\nkind = "vllm"\nbase_url = "{base_url}"\n' + TIER + LEDGER_MEMORY
    error = refused(write(tmp_path, text))
    assert error.key == "providers.x.base_url" and words in str(error), str(error)


def test_env_references_expand_in_every_string(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMROUTE_PROBE_TEAM", "blue")
    monkeypatch.setenv("LLMROUTE_PROBE_DIR", str(tmp_path / "ledgers"))
    monkeypatch.setenv("LLMROUTE_PROBE_PORT", "9")
    path = write(tmp_path, PRICING + '[providers.x]\nkind = "vllm"\nbase_url = "http://127.0.0.1:${LLMROUTE_PROBE_PORT}/v1"\n'
                           'headers = { "X-Team" = "${LLMROUTE_PROBE_TEAM}" }\n' + TIER
                           + '[ledger]\npath = "${LLMROUTE_PROBE_DIR}/l.db"\n')
    config = load_config(path)
    assert config.providers["x"].headers["X-Team"] == "blue"
    assert config.providers["x"].base_url == "http://127.0.0.1:9/v1"
    assert config.sections.ledger.path == f"{tmp_path}/ledgers/l.db"
    assert not list(tmp_path.glob("$*"))  # no file named after a literal ${VAR}


def test_an_empty_key_on_a_self_hosted_kind_means_no_key(tmp_path):
    config = load_config(write(tmp_path, PROVIDER + 'api_key = ""\n' + TIER + LEDGER_MEMORY))
    assert config.providers["x"].api_key is None


def test_the_same_deployment_with_the_same_settings_in_two_tiers_loads(tmp_path):
    text = PROVIDER + ('[tiers.a]\ndeployments = [{ id = "x:m", timeout_s = 30, weight = 1 }]\n'
                       '[tiers.b]\ndeployments = [{ id = "x:m", timeout_s = 30, weight = 3 }]\n') + LEDGER_MEMORY
    config = load_config(write(tmp_path, text))
    assert [d.weight for d in config.tiers["b"].deployments] == [3]


def test_a_non_utf8_config_is_a_config_error(tmp_path):
    path = tmp_path / "llmroute.toml"
    path.write_bytes(PROVIDER.encode() + b'# caf\xe9\n' + TIER.encode())
    error = refused(path)
    assert "UTF-8" in str(error) and "0xe9" in str(error)


def test_a_directory_as_config_is_a_config_error(tmp_path):
    assert "directory" in str(refused(tmp_path))


@pytest.mark.parametrize("ledger,words", [
    ('path = "{dir}"', "is a directory"),
    ('path = "{notdb}"', "not a SQLite database"),
    ('sink = "jsonl"\npath = "{db}"', "SQLite database, not a JSONL"),
    ('path = "{file}/sub/l.db"', "not a directory"),
])
def test_unusable_ledger_paths(tmp_path, ledger, words):
    import sqlite3

    (tmp_path / "notdb").write_text("hello\n")
    (tmp_path / "file").write_text("x")
    sqlite3.connect(tmp_path / "real.db").execute("create table t (x)").connection.close()
    ledger = ledger.format(dir=tmp_path, notdb=tmp_path / "notdb", db=tmp_path / "real.db", file=tmp_path / "file")
    error = refused(write(tmp_path, PROVIDER + TIER + f"[ledger]\n{ledger}\n"))
    assert error.key == "ledger.path" and words in str(error), str(error)


def test_a_ledger_on_a_read_only_place_is_refused_at_load(tmp_path):
    with read_only(tmp_path / "ro") as ro:
        error = refused(write(tmp_path, PROVIDER + TIER + f'[ledger]\npath = "{ro}/l.db"\n'))
        assert error.key == "ledger.path" and "not writable" in str(error)
