"""A cold `Client(config)` loads only what its config uses (issue 21: "everything not needed by `Client(...)`
loaded on first use"; benchmarks/RESULTS.md, "Client(config) cold").

A plain config (one provider, one tier, a price, a memory ledger) must not load the routing classifier, the
async shadow runner's event loop, the cache's backends and codec, the SQLite driver, the TOML
parser, difflib, or any transport; nor build a pydantic schema for a section it leaves out. Each check runs in
a fresh interpreter and reads `sys.modules`, so a top-level import added on the construction path fails here
by name instead of slowing every client silently. Nothing is sent: the URL is a closed loopback port.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any, Dict

import pytest

from llmroute import Client, ConfigError
from llmroute.config import EMPTY_IS_DEFAULTS

PLAIN: Dict[str, Any] = {
    "providers": {"bench": {"kind": "openai-compatible", "base_url": "http://127.0.0.1:9/v1", "api_key": "sk-test",
                            "max_connections": 4}},
    "tiers": {"small": {"deployments": ["bench:gpt-4o-mini"]}},
    "pricing": {"bench:gpt-4o-mini": {"input_per_million": 0.15, "output_per_million": 0.6, "currency": "USD"}},
    "ledger": {"sink": "memory"},
}

# Loaded on first use of what needs them, never by a plain client.
LAZY_MODULES = [
    "asyncio",  # the async shadow runner (concurrent.futures is loaded by accounting/tokens.py for tiktoken)
    "sqlite3",  # a SQLite ledger or cache
    "tomllib", "tomli",  # a config file, a price catalogue
    "difflib",  # "did you mean" in an error message
    "httpx", "httpcore", "aiohttp",  # the transport opens with the first call
    "opentelemetry",
    "llmroute.routing.classifier", "llmroute.routing.fitted",  # the first `model="auto"` call
    "llmroute.cache.backends", "llmroute.cache.entry", "llmroute.cache.key", "llmroute.cache.vectors",
    "llmroute.cache.semantic",  # the first call the cache is in play for
    "llmroute.batch", "llmroute.accounting.feedback", "llmroute.accounting.report",
    "llmroute.state.shared_limits", "llmroute.openai_surface.structured",
]

# Section models a plain config leaves out: no schema built for them.
UNBUILT_MODELS = [
    "llmroute.routing.rules.RoutingConfig", "llmroute.routing.shadow.ShadowConfig",
    "llmroute.resilience.policy.ResiliencePolicy", "llmroute.accounting.budgets.BudgetConfig",
    "llmroute.accounting.budgets.GuardConfig", "llmroute.state.backend.StateConfig",
    "llmroute._runtime.telemetry.TelemetryConfig", "llmroute.cache.cache_policy.CacheConfig",
    "llmroute.cache.cache_policy.SemanticConfig",
]

_PROBE = """
import importlib, json, sys
{setup}
out = {{"modules": sorted(sys.modules), "complete": {{}}}}
for name in {models!r}:
    module, _, cls = name.rpartition(".")
    if module in sys.modules:
        out["complete"][name] = bool(getattr(sys.modules[module], cls).__pydantic_complete__)
print(json.dumps(out))
"""


def _fresh(setup: str, models: Any = ()) -> Dict[str, Any]:
    code = _PROBE.format(setup=setup, models=list(models))
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, got.stderr[-2000:]
    result: Dict[str, Any] = json.loads(got.stdout.strip().splitlines()[-1])
    return result


def _loaded(modules: list[str], name: str) -> bool:
    return any(m == name or m.startswith(name + ".") for m in modules)


def test_import_llmroute_loads_none_of_its_modules_and_no_pydantic() -> None:
    modules = _fresh("import llmroute")["modules"]
    assert [m for m in modules if m.startswith("llmroute.")] == []
    assert not _loaded(modules, "pydantic")


def test_a_plain_client_loads_none_of_what_its_config_does_not_use() -> None:
    got = _fresh(f"from llmroute import Client\nClient(config={PLAIN!r}).close()", UNBUILT_MODELS)
    modules = got["modules"]
    assert "llmroute.client" in modules and "llmroute.config" in modules  # the probe did build a client
    assert [name for name in LAZY_MODULES if _loaded(modules, name)] == []
    assert {name: built for name, built in got["complete"].items() if built} == {}


def test_what_a_plain_client_left_out_loads_when_it_is_used() -> None:
    """The same probe sees the lazy parts arrive: a routed call's classifier, a config file's parser, the
    schema of a section the config sets (so the checks above cannot pass on a probe that sees nothing)."""
    setup = (f"import os, tempfile\nfrom llmroute import Client\nfrom llmroute.config import load_config\n"
             f"from llmroute.routing.rules import RouteQuery, decide\n"
             f"client = Client(config={{**{PLAIN!r}, 'routing': {{'default': 'auto', 'small_tier': 'small', "
             f"'large_tier': 'small'}}}})\n"
             f"decide(client.config.sections.routing, RouteQuery(messages=[{{'role': 'user', 'content': 'hi'}}]))\n"
             f"client.close()\n"
             f"path = os.path.join(tempfile.mkdtemp(), 'c.toml')\n"
             f"open(path, 'w').write('[providers.p]\\nkind = \"vllm\"\\nbase_url = \"http://127.0.0.1:9/v1\"\\n')\n"
             f"load_config(path)\n")
    got = _fresh(setup, ["llmroute.routing.rules.RoutingConfig"])
    assert _loaded(got["modules"], "llmroute.routing.classifier")
    assert _loaded(got["modules"], "tomllib") or _loaded(got["modules"], "tomli")
    assert got["complete"] == {"llmroute.routing.rules.RoutingConfig": True}


def test_the_first_call_of_a_plain_client_loads_no_classifier_and_no_cache_module(openai_server: Any) -> None:
    """The call path estimates every prompt's tokens (`routing/token_estimate.py`): the classifier's tables load
    only for a call the classifier scores, and the cache's modules only for a call the cache is in play for."""
    config = {**PLAIN, "providers": {"bench": {**PLAIN["providers"]["bench"], "base_url": openai_server.base_url,
                                               "api_key": "sk-test-openai"}}}
    setup = (f"from llmroute import Client\nc = Client(config={config!r})\n"
             "r = c.chat.completions.create(model='small', messages=[{'role': 'user', 'content': 'hi'}], max_tokens=8)\n"
             "assert r.choices[0].message.content, r\nc.close()")
    modules = _fresh(setup)["modules"]
    assert "httpx" in modules or "aiohttp" in modules  # the call was sent
    lazy = ["llmroute.routing.classifier", "llmroute.routing.fitted", "llmroute.cache.entry", "llmroute.cache.key",
            "llmroute.cache.backends", "llmroute.cache.semantic", "sqlite3", "tomllib", "difflib"]
    assert [name for name in lazy if _loaded(modules, name)] == []
    assert len(openai_server.requests) == 1


def _model(name: str) -> Any:
    import importlib

    module, _, cls = name.rpartition(".")
    return getattr(importlib.import_module(module), cls)


@pytest.mark.parametrize("name", sorted(EMPTY_IS_DEFAULTS | {"llmroute.resilience.policy.ResiliencePolicy",
                                                             "llmroute.routing.shadow.ShadowConfig",
                                                             "llmroute.cache.cache_policy.SemanticConfig"}))
def test_an_empty_section_built_without_its_schema_is_its_validated_defaults(name: str) -> None:
    """`config._validated` (and `policy.default_policy`, and the nested defaults) use `model_construct()` for an
    empty table: that must be exactly what validating `{}` gives, or the shortcut would change a config."""
    model = _model(name)
    constructed, validated = model.model_construct(), model.model_validate({})
    assert constructed == validated
    assert constructed.model_fields_set == validated.model_fields_set
    assert constructed.__pydantic_extra__ == validated.__pydantic_extra__
    assert constructed.__pydantic_private__ == validated.__pydantic_private__
    assert constructed.model_dump() == validated.model_dump()


def test_the_default_resilience_policy_is_the_validated_one() -> None:
    from llmroute.resilience.policy import ResiliencePolicy, default_policy, policy_from_config

    assert default_policy() == ResiliencePolicy()
    assert policy_from_config({}) == ResiliencePolicy()
    assert policy_from_config({"max_retries": 4}).max_retries == 4


@pytest.mark.parametrize("section,key", [("routing", "routing.bogus"), ("state", "state.bogus"),
                                         ("telemetry", "telemetry.bogus"), ("cache", "cache.bogus"),
                                         ("ledger", "ledger.bogus"), ("resilience", "resilience.bogus")])
def test_a_section_that_is_not_empty_is_still_validated(section: str, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        Client(config={**PLAIN, section: {"bogus": 1}})
    assert info.value.key == key
