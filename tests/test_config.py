"""Config loading: every mistake is a ConfigError naming the file and the key path, raised at load."""

from __future__ import annotations

import textwrap

import pytest

from llmroute import Client, ConfigError
from llmroute.config import load_config

FULL = """
[providers.together]
kind = "together"
api_key = "${TOGETHER_API_KEY}"

[providers.sf]
kind = "siliconflow"
region = "cn"
api_key = "${SILICONFLOW_API_KEY}"

[providers.bailian]
kind = "bailian"
region = "cn-beijing"
protocol = "compatible"
api_key = "${DASHSCOPE_API_KEY}"

[providers.local]
kind = "vllm"
base_url = "http://127.0.0.1:8000/v1"

[tiers.small]
deployments = ["sf:Qwen/Qwen2.5-7B-Instruct", "together:Qwen/Qwen2.5-7B-Instruct-Turbo"]

[tiers.large]
deployments = ["together:meta-llama/Llama-3.3-70B-Instruct-Turbo", "bailian:qwen2.5-72b-instruct"]

[pricing."bailian:qwen2.5-72b-instruct"]
input_per_million = 4
output_per_million = 12
currency = "CNY"

[pricing."local:*"]
input_per_million = 0
output_per_million = 0
"""


@pytest.fixture
def keys(monkeypatch):
    monkeypatch.setenv("TOGETHER_API_KEY", "tg-secret-key-123456")
    monkeypatch.setenv("SILICONFLOW_API_KEY", "sf-secret-key-123456")
    monkeypatch.setenv("DASHSCOPE_API_KEY", "ds-secret-key-123456")


def write(tmp_path, text):
    path = tmp_path / "llmroute.toml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_full_example_loads_with_region_urls(tmp_path, keys):
    config = load_config(write(tmp_path, FULL))
    assert config.providers["sf"].base_url == "https://api.siliconflow.cn/v1"
    assert config.providers["bailian"].base_url == "https://dashscope.aliyuncs.com/compatible-mode/v1"
    assert config.providers["local"].api_key is None
    small = config.tiers["small"].deployments
    assert [d.id for d in small] == ["sf:Qwen/Qwen2.5-7B-Instruct", "together:Qwen/Qwen2.5-7B-Instruct-Turbo"]
    assert small[0].provider.name == "sf" and small[0].model == "Qwen/Qwen2.5-7B-Instruct"


def test_keys_never_in_reprs(tmp_path, keys):
    config = load_config(write(tmp_path, FULL))
    text = repr(config) + str(config.providers) + repr(Client(config))
    for secret in ("tg-secret-key-123456", "sf-secret-key-123456", "ds-secret-key-123456"):
        assert secret not in text
    assert config.providers["together"].api_key.get() == "tg-secret-key-123456"


def test_unknown_provider_names_key_path(tmp_path, keys):
    path = write(tmp_path, FULL.replace('"bailian:qwen2.5-72b-instruct"', '"bailan:qwen2.5-72b-instruct"'))
    with pytest.raises(ConfigError) as info:
        Client.from_config(path)
    msg = str(info.value)
    assert str(path) in msg
    assert "tiers.large.deployments[1]: unknown provider 'bailan'" in msg


def test_missing_env_var_names_it(tmp_path, keys, monkeypatch):
    monkeypatch.delenv("TOGETHER_API_KEY")
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, FULL))
    assert "providers.together.api_key: environment variable TOGETHER_API_KEY is not set" in str(info.value)


def test_cloud_provider_without_key_or_env(tmp_path, monkeypatch):
    monkeypatch.delenv("FIREWORKS_API_KEY", raising=False)
    path = write(tmp_path, '[providers.fw]\nkind = "fireworks"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert "providers.fw.api_key" in str(info.value) and "FIREWORKS_API_KEY" in str(info.value)


def test_kind_default_key_variable_is_read(tmp_path, monkeypatch):
    monkeypatch.setenv("FIREWORKS_API_KEY", "fw-key-abcdefgh")
    config = load_config(write(tmp_path, '[providers.fw]\nkind = "fireworks"\n'))
    assert config.providers["fw"].api_key.get() == "fw-key-abcdefgh"
    assert config.providers["fw"].base_url == "https://api.fireworks.ai/inference/v1"


@pytest.mark.parametrize(
    "text, expected",
    [
        ('[providers.x]\nkind = "vllm"\nbase_url = "http://127.0.0.1:1/v1"\ncolour = "red"\n', "providers.x.colour: unknown key"),
        ('[providers.x]\nkind = "vlm"\n', "providers.x.kind: unknown provider kind 'vlm'"),
        ('[provider.x]\nkind = "vllm"\n', "provider: unknown key"),
        ('[providers.x]\nkind = "siliconflow"\nregion = "eu"\napi_key = "k"\n', "providers.x.region: unknown region 'eu'"),
        ('[providers.x]\nkind = "together"\nregion = "cn"\napi_key = "k"\n', "providers.x.region: kind 'together' has no regions"),
        ('[providers.x]\nkind = "together"\nprotocol = "native"\napi_key = "k"\n', "providers.x.protocol"),
        ('[providers.x]\nkind = "openai-compatible"\n', "providers.x.base_url: kind 'openai-compatible' needs a base_url"),
        ('[providers.x]\nkind = "vllm"\nbase_url = "localhost:8000"\n', "providers.x.base_url: base_url 'localhost:8000' is not an http(s) URL"),
        ('[providers.x]\nkind = "vllm"\n[tiers.small]\ndeployments = ["x"]\n', "tiers.small.deployments[0]: deployment id 'x' is not of the form"),
        ('[providers.x]\nkind = "vllm"\n[tiers.small]\ndeployments = []\n', "tiers.small.deployments"),
        ('[providers.x]\nkind = "vllm"\n[tiers.small]\ndeployments = ["x:m"]\nfallback_tier = "big"\n', "tiers.small.fallback_tier: unknown tier 'big'"),
        ('[providers.x]\nkind = "vllm"\n[tiers.small]\ndeployments = [{ id = "x:m", timeout_s = -1 }]\n', "tiers.small.deployments[0].timeout_s"),
        ('[providers.x]\nkind = "vllm"\n[tiers.small]\ndeployments = ["x:m", "x:m"]\n', "listed twice"),
        ("[providers.x\n", "invalid TOML"),
    ],
)
def test_config_mistakes(tmp_path, text, expected):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert expected in str(info.value)
    assert str(path) in str(info.value)


def test_missing_file_names_it(tmp_path):
    with pytest.raises(ConfigError) as info:
        Client.from_config(tmp_path / "nope.toml")
    assert "nope.toml" in str(info.value) and "not found" in str(info.value)


def test_deployment_table_and_bailian_native_root(tmp_path, monkeypatch):
    monkeypatch.setenv("DASHSCOPE_API_KEY", "ds-key-abcdefgh")
    config = load_config(write(tmp_path, """
        [providers.sf]
        kind = "siliconflow"
        region = "intl"
        api_key = "k-123456"
        connect_timeout_s = 3
        [providers.ds]
        kind = "bailian"
        region = "singapore"
        protocol = "native"
        [pricing]
        strict = false
        [tiers.small]
        deployments = [{ id = "sf:Qwen/Qwen2.5-7B-Instruct", ttft_timeout_s = 10, timeout_s = 120, context_window = 32768, extra_body = { top_k = 20 } }, "ds:qwen-plus"]
    """))
    first, second = config.tiers["small"].deployments
    assert first.provider.base_url == "https://api.siliconflow.com/v1"
    assert (first.connect_timeout_s, first.ttft_timeout_s, first.timeout_s) == (3, 10, 120)
    assert first.context_window == 32768 and first.extra_body == {"top_k": 20}
    assert second.provider.base_url == "https://dashscope-intl.aliyuncs.com/api/v1"


def test_dict_config_errors_say_dict():
    with pytest.raises(ConfigError) as info:
        Client(config={"providers": {"x": {"kind": "nope"}}})
    assert "<dict>: providers.x.kind" in str(info.value)


def test_model_ids_with_colons(tmp_path):
    config = load_config(write(tmp_path, """
        [providers.ol]
        kind = "ollama"
        [pricing."ol:*"]
        input_per_million = 0
        output_per_million = 0
        [tiers.small]
        deployments = ["ol:qwen2.5:7b"]
    """))
    dep = config.tiers["small"].deployments[0]
    assert dep.provider.name == "ol" and dep.model == "qwen2.5:7b"
