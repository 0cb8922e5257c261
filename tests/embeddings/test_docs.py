"""docs/embeddings.md's config and code blocks run: the TOML loads, and the Python runs against the
loopback SiliconFlow and Bailian servers put in place of the platforms' URLs."""

from __future__ import annotations

import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

import llmroute as L

DOC = Path(__file__).resolve().parents[2] / "docs" / "embeddings.md"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def test_the_documented_config_and_calls_run(siliconflow_server, bailian_server, monkeypatch):
    monkeypatch.setenv("SILICONFLOW_API_KEY", siliconflow_server.api_key)
    monkeypatch.setenv("DASHSCOPE_API_KEY", bailian_server.api_key)
    (toml,) = _blocks("toml")
    config = tomllib.loads(toml)
    config["providers"]["sf"]["base_url"] = siliconflow_server.base_url
    config["providers"]["bl"]["base_url"] = bailian_server.base_url
    config["ledger"] = {"sink": "memory"}
    (code,) = _blocks("python")
    with L.Client(config) as client:
        scope = {"client": client}
        exec(compile(code, str(DOC), "exec"), scope)  # noqa: S102 - the documented example, on loopback
    resp = scope["resp"]
    assert len(scope["vectors"]) == 2 and resp.route.deployment == "sf:BAAI/bge-m3"
    assert resp.cost.currency == "CNY" and resp.cost.amount == 0  # the documented price: 0
    assert [r.path for r in siliconflow_server.requests] == ["/v1/embeddings", "/v1/embeddings"]
