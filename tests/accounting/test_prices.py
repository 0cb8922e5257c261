"""The shipped price table, the [pricing] config section and the lookup over both."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from decimal import Decimal

import pydantic
import pytest

from llmroute.accounting.prices import (
    DeploymentRef,
    ExchangeRates,
    PriceBook,
    PricingConfig,
    load_price_table,
    normalize_region,
    parse_price_table,
)
from llmroute.errors import ConfigError

ISSUE_EXAMPLE = """
[pricing]
strict = true
reporting_currency = "USD"

[pricing.exchange_rates]
CNY = 0.14

[pricing."together:my-finetune"]       # provider name from [providers], then the model id
input_per_million = 0.88
output_per_million = 0.88
cached_input_per_million = 0.44        # optional; absent means cached tokens cost the input price
currency = "USD"                       # USD | CNY
"""


def pricing(text: str) -> PricingConfig:
    return PricingConfig.model_validate(tomllib.loads(text)["pricing"])


def test_shipped_table_has_version_dates_and_sources():
    table = load_price_table()
    assert table.version and table.read_on
    assert len(table.entries) >= 10
    for p in table.entries:
        assert p.source, p.model
        assert p.version == table.version
        assert p.currency in ("USD", "CNY")
        assert p.input_per_million >= 0 and p.output_per_million >= 0


def test_unconfirmed_figures_are_marked_as_providers_md_marks_them():
    table = load_price_table()
    # SiliconFlow's price pages could not be read, so its figures are unconfirmed; Together's confirmed ones
    # are read off its own pages (the serverless catalogue, or a model page), and say so.
    for p in table.entries:
        if p.kind in ("together", "siliconflow") and p.confirmed:
            assert p.kind == "together" and p.source.startswith(
                ("together.ai/models/", "docs.together.ai/docs/serverless/models")), p.model
    assert table.get("together", None, "moonshotai/Kimi-K3").cached_input_per_million == Decimal("0.30")
    assert not table.get("together", None, "deepseek-ai/DeepSeek-R1").confirmed  # no longer on the page
    assert not table.get("fireworks", None, "accounts/fireworks/models/qwen2p5-72b-instruct").confirmed
    assert table.get("bailian", "singapore", "qwen-plus").confirmed
    # qwen-plus and qwen-max in Beijing are on the official model list (help.aliyun.com/zh/model-studio/models).
    assert table.get("bailian", "cn-beijing", "qwen-plus").confirmed
    assert table.get("bailian", "cn-beijing", "qwen-max").confirmed


def test_siliconflow_and_bailian_are_priced_per_region_in_their_currency():
    table = load_price_table()
    sf = table.get("siliconflow", "cn", "Qwen/Qwen2.5-72B-Instruct")
    assert sf.currency == "CNY" and sf.input_per_million == Decimal("4.13")
    # International SiliconFlow bills in USD, its own figures (not the CNY ones converted); a model it does not
    # list there is not priced from the China table.
    intl = table.get("siliconflow", "intl", "deepseek-ai/DeepSeek-V3.2")
    assert intl.currency == "USD" and intl.input_per_million == Decimal("0.27") and not intl.confirmed
    assert table.get("siliconflow", "intl", "Qwen/Qwen2.5-72B-Instruct") is None
    assert table.get("bailian", "singapore", "qwen-max").currency == "USD"
    assert table.get("bailian", "cn-beijing", "qwen-max").currency == "CNY"
    # Bailian US (Virginia): the US mode's -us models and the Global mode's plain ids, from Alibaba's models page;
    # qwen-max is not served there.
    us = table.get("bailian", "virginia", "qwen-plus-us")
    assert (us.currency, us.input_per_million, us.output_per_million, us.confirmed) == ("USD", Decimal("0.4"),
                                                                                      Decimal("1.2"), True)
    assert table.get("bailian", "us", "qwen-flash").input_per_million == Decimal("0.022")
    assert table.get("bailian", "us", "qwen-max") is None


def test_bailian_cache_rates_follow_the_context_cache_page():
    # alibabacloud.com/help/en/model-studio/context-cache (2026): implicit hits 20% of input, explicit-cache
    # creation 125%, explicit hits 10%, in every input-length tier. Models whose pages name no cache
    # support ship none (cached tokens then cost the input price), never a guessed one. qwen-long keeps
    # the 40% of its older official page.
    table = load_price_table()
    checked = 0
    for p in table.entries:
        if p.kind != "bailian" or p.mode != "chat" or p.explicit_cached_input_per_million is None:
            continue
        for rates in (p, *p.tiers):
            assert rates.cached_input_per_million == rates.input_per_million * Decimal("0.2"), p.model
            assert rates.explicit_cached_input_per_million == rates.input_per_million * Decimal("0.1"), p.model
            assert rates.cache_write_per_million == rates.input_per_million * Decimal("1.25"), p.model
            checked += 1
    assert checked >= 20
    for model in ("qwen-turbo", "qwen-plus", "qwen-max"):
        assert table.get("bailian", "singapore", model).cached_input_per_million is not None, model
    assert table.get("bailian", "us", "qwen-plus-us").cached_rate == Decimal("0.08")
    assert table.get("bailian", "us", "qwen-flash-us").cached_rate == Decimal("0.05")  # no cache rate ships
    assert table.get("bailian", "cn-beijing", "qwen-long").cached_rate == Decimal("0.2")


def test_self_hosted_kinds_have_no_shipped_price():
    kinds = {p.kind for p in load_price_table().entries}
    assert kinds == {"together", "fireworks", "siliconflow", "bailian"}


def test_issue_example_parses_exactly():
    cfg = pricing(ISSUE_EXAMPLE)
    assert cfg.strict is True and cfg.reporting_currency == "USD"
    assert cfg.exchange_rates == {"CNY": Decimal("0.14")}
    ov = cfg.prices["together:my-finetune"]
    # 0.88 typed in TOML is the decimal 0.88, not the binary float.
    assert ov.input_per_million == Decimal("0.88") and ov.cached_input_per_million == Decimal("0.44")


@pytest.mark.parametrize(
    "text",
    [
        '[pricing]\nstrcit = true',  # typo of a scalar key
        '[pricing."together:x"]\ninput_per_million = 1\noutput_per_million = 1\nprice = 3',
        '[pricing."together:x"]\ninput_per_million = 1',  # output price missing
        '[pricing."together:x"]\ninput_per_million = -1\noutput_per_million = 1',
        '[pricing."together:x"]\ninput_per_million = 1\noutput_per_million = 1\ncurrency = "EUR"',
        '[pricing.":x"]\ninput_per_million = 1\noutput_per_million = 1',
        '[pricing]\nreporting_currency = "USD"\n[pricing.exchange_rates]\nCNY = 0',
        '[pricing.exchange_rates]\nCNY = 0.14',  # rates with no reporting currency
    ],
)
def test_bad_pricing_sections_are_rejected(text):
    with pytest.raises(pydantic.ValidationError):
        pricing(text)


def test_lookup_order_override_then_wildcard_then_region_then_plain():
    cfg = pricing(
        """
[pricing."sf-cn:Qwen/Qwen2.5-72B-Instruct"]
input_per_million = 3
output_per_million = 5
currency = "CNY"
[pricing."gpu-box:*"]
input_per_million = 0
output_per_million = 0
"""
    )
    book = PriceBook(cfg)
    assert book.lookup("sf-cn", "siliconflow", "cn", "Qwen/Qwen2.5-72B-Instruct").input_per_million == 3
    assert book.lookup("sf-other", "siliconflow", "cn", "Qwen/Qwen2.5-72B-Instruct").input_per_million == Decimal("4.13")
    assert book.lookup("sf-other", "siliconflow", "china", "Qwen/Qwen2.5-72B-Instruct").origin == "table"
    assert book.lookup("gpu-box", "vllm", None, "anything/at-all").output_per_million == 0
    assert book.lookup("other-box", "vllm", None, "anything/at-all") is None
    # Region-less table entries match whatever the region.
    assert book.lookup("tg", "together", "whatever", "meta-llama/Llama-3.3-70B-Instruct-Turbo") is not None
    # Ollama model ids hold a colon: the key splits on the first one only.
    cfg2 = pricing('[pricing."ollama:qwen2.5:7b"]\ninput_per_million = 0\noutput_per_million = 0')
    assert PriceBook(cfg2).lookup("ollama", "ollama", None, "qwen2.5:7b") is not None


def test_override_version_follows_its_figures():
    a = PriceBook(pricing('[pricing."p:m"]\ninput_per_million = 1\noutput_per_million = 2'))
    b = PriceBook(pricing('[pricing."p:m"]\ninput_per_million = 1\noutput_per_million = 3'))
    va, vb = (x.lookup("p", "vllm", None, "m").version for x in (a, b))
    assert va.startswith("config:") and va != vb


def test_region_aliases():
    assert normalize_region("bailian", "cn") == "cn-beijing"
    assert normalize_region("bailian", "ap-southeast-1") == "singapore"
    assert normalize_region("siliconflow", "com") == "intl"
    assert normalize_region("together", None) is None


DEPS = [
    DeploymentRef("tg:meta-llama/Llama-3.3-70B-Instruct-Turbo", "tg", "together", None,
                  "meta-llama/Llama-3.3-70B-Instruct-Turbo", "tiers.large.deployments[0]"),
    DeploymentRef("local:Qwen/Qwen2.5-7B-Instruct", "local", "vllm", None, "Qwen/Qwen2.5-7B-Instruct",
                  "tiers.small.deployments[1]"),
]  # fmt: skip


def test_strict_refuses_an_unpriced_deployment_naming_it():
    book = PriceBook()
    with pytest.raises(ConfigError) as e:
        book.check_priced(DEPS)
    assert e.value.key == "tiers.small.deployments[1]"
    assert "local:Qwen/Qwen2.5-7B-Instruct" in str(e.value)
    assert '[pricing."local:Qwen/Qwen2.5-7B-Instruct"]' in str(e.value)


def test_not_strict_allows_it_and_priced_self_hosted_passes_strict():
    PriceBook(pricing("[pricing]\nstrict = false")).check_priced(DEPS)
    book = PriceBook(pricing('[pricing."local:*"]\ninput_per_million = 0\noutput_per_million = 0'))
    book.check_priced(DEPS)


def test_override_for_unknown_provider_is_a_config_error():
    book = PriceBook(pricing('[pricing."tgg:x"]\ninput_per_million = 1\noutput_per_million = 1'))
    with pytest.raises(ConfigError) as e:
        book.check_priced(DEPS)
    assert e.value.key == 'pricing."tgg:x"'


def test_exchange_rates_convention():
    rates = ExchangeRates("USD", {"CNY": Decimal("0.14")})
    assert rates.convert(Decimal("100"), "CNY") == Decimal("14.00")
    assert rates.convert(Decimal("14"), "USD", "CNY") == Decimal("100")
    assert rates.convert(Decimal("5"), "USD") == Decimal("5")
    assert ExchangeRates("USD").convert(Decimal(1), "CNY") is None


def test_model_classes_and_price_for_class():
    book = PriceBook()
    assert book.class_of("meta-llama/Llama-3.3-70B-Instruct-Turbo") == "70b"
    assert book.class_of("Qwen/Qwen2.5-7B-Instruct") == "7b"
    assert book.class_of("qwen-plus") is None
    fw = book.price_for_class("fireworks", "70b")
    assert fw.model == "accounts/fireworks/models/llama-v3p3-70b-instruct"  # confirmed entry first
    intl = book.price_for_class("siliconflow", "7b", "intl")  # its own USD figure, never the CNY one
    assert (intl.model, intl.currency, intl.region) == ("Qwen/Qwen3.5-9B", "USD", "intl")
    assert book.price_for_class("bailian", "7b", "us") is None
    assert book.price_for_class("siliconflow", "70b").currency == "CNY"


def test_bad_table_entries_name_the_entry():
    with pytest.raises(ConfigError) as e:
        parse_price_table('version = "x"\n[[price]]\nkind = "a"\nmodel = "m"\ncurrency = "USD"\ninput_per_million = 1')
    assert e.value.key == "price[0]"
    with pytest.raises(ConfigError):
        parse_price_table("[[price]]\nkind = 'a'")


def test_import_has_no_side_effects():
    code = (
        "import sys, threading\n"
        "import llmroute.accounting.prices as p, llmroute.accounting.cost, llmroute.accounting.ledger, "
        "llmroute.accounting.budgets, llmroute.accounting.report\n"
        "assert threading.active_count() == 1, threading.enumerate()\n"
        "assert p.load_price_table.cache_info().currsize == 0\n"
        "assert 'tiktoken' not in sys.modules\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr


# -- the catalogue: every platform and region, with sources -------------------------------------------------


def test_catalogue_covers_each_platform_region_with_sources_and_batch_where_published():
    table = load_price_table()
    chat = {(p.kind, p.region) for p in table.entries if p.mode == "chat"}
    assert {("together", None), ("fireworks", None), ("siliconflow", "cn"), ("bailian", "singapore"),
            ("bailian", "cn-beijing")} <= chat
    embedding = {(p.kind, p.region) for p in table.entries if p.mode == "embedding"}
    assert {("fireworks", None), ("bailian", "singapore")} <= embedding
    for p in table.entries:
        assert p.source and p.source_date, p.model
        if p.kind == "fireworks" and p.batch_input_per_million is not None:
            # docs.fireworks.ai/serverless/pricing: batch is 50% of serverless on input and output.
            assert p.batch_input_per_million == p.input_per_million / 2, p.model
            assert p.batch_output_per_million == p.output_per_million / 2, p.model
    # Current models named in the issue's platforms resolve (a config naming them loads).
    for kind, region, model in [("together", None, "openai/gpt-oss-120b"),
                                ("fireworks", None, "accounts/fireworks/models/gpt-oss-20b"),
                                ("siliconflow", "cn", "Qwen/Qwen3-8B"), ("bailian", "cn-beijing", "qwen-flash"),
                                ("bailian", "singapore", "text-embedding-v4")]:
        assert table.get(kind, region, model) is not None, model


def test_table_entries_must_name_a_source_and_a_known_mode():
    base = 'version = "t"\n[[price]]\nkind = "together"\nmodel = "m"\ninput_per_million = 1\n' \
           'output_per_million = 1\ncurrency = "USD"\n'
    with pytest.raises(ConfigError, match="source"):
        parse_price_table(base)
    with pytest.raises(ConfigError, match="mode"):
        parse_price_table(base + 'source = "p"\nmode = "rerank"\n')
    t = parse_price_table(base + 'source = "p"\nbatch_input_per_million = 0.5\nbatch_output_per_million = 0.5\n')
    assert t.entries[0].batch_input_per_million == Decimal("0.5") and t.entries[0].mode == "chat"


# -- create(model="provider:model") is held to the same strictness as configured deployments ---------------


def _together_config(server, tmp_path, strict: bool) -> dict:
    from tests.accounting._client import config, provider

    return config({"tg": provider("together", server)}, {"t": ["tg:Qwen/Qwen2.5-7B-Instruct-Turbo"]},
                  pricing={"strict": strict}, ledger={"path": str(tmp_path / "ledger.db")})


def test_unpriced_model_named_in_create_is_a_config_error_before_sending(together_server, tmp_path):
    from llmroute import Client
    from tests.accounting._client import MESSAGES

    with Client(config=_together_config(together_server, tmp_path, strict=True)) as client:
        with pytest.raises(ConfigError) as info:
            client.chat.completions.create(model="tg:acme/unpriced-chat", messages=MESSAGES)
    message = str(info.value)
    assert "tg:acme/unpriced-chat" in message and 'pricing.\"tg:acme/unpriced-chat\"' in message and "strict" in message
    assert together_server.requests == []


def test_unpriced_model_named_in_create_runs_flagged_when_strict_is_off(together_server, tmp_path):
    from llmroute import Client, report
    from tests.accounting._client import MESSAGES

    with Client(config=_together_config(together_server, tmp_path, strict=False)) as client:
        resp = client.chat.completions.create(model="tg:acme/unpriced-chat", messages=MESSAGES, feature="f")
    assert resp.cost.amount is None and resp.cost.priced is False and str(resp.cost) == "unpriced"
    assert resp.route.deployment == "tg:acme/unpriced-chat"
    assert resp.route.attempts[-1].cost.priced is False  # flagged on the route's attempt too
    import sqlite3

    db = sqlite3.connect(tmp_path / "ledger.db")
    assert db.execute("SELECT deployment, priced, cost FROM ledger").fetchall() == [("tg:acme/unpriced-chat", 0, None)]
    db.close()
    rows = report(str(tmp_path / "ledger.db"), by=("deployment",))
    row = next(r for r in rows if r.get("deployment") == "tg:acme/unpriced-chat")
    assert row["unpriced_attempts"] == 1 and row["cost"] is None


# -- llmroute prices ---------------------------------------------------------------------------------------


def test_prices_command_lists_matches_within_120_columns_and_a_config_charge(tmp_path):
    out = subprocess.run([sys.executable, "-m", "llmroute.cli", "prices", "gpt-oss"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert max(len(line) for line in lines) <= 120
    assert any("openai/gpt-oss-120b" in line and "0.15" in line and "0.6" in line for line in lines)
    assert any("accounts/fireworks/models/gpt-oss-20b" in line and "0.035" in line for line in lines)
    assert not any("qwen-plus" in line for line in lines)
    # Both SiliconFlow regions are listed, each in its own currency.
    out_sf = subprocess.run([sys.executable, "-m", "llmroute.cli", "prices", "siliconflow"], capture_output=True,
                            text=True, timeout=60).stdout
    assert any("siliconflow/intl" in line and "DeepSeek-V4-Flash" in line and "USD" in line for line in out_sf.splitlines())
    assert any("Qwen/Qwen3-8B" in line and "CNY" in line for line in out_sf.splitlines())
    # What does not ship is said, not left for the user to guess: a region the table leaves empty on purpose.
    gap = parse_price_table('version = "t"\n[[missing]]\nkind = "siliconflow"\nregion = "intl"\n'
                            'reason = "no page to cite"\n')
    intl = DeploymentRef("sf:Qwen/Qwen3-8B", "sf", "siliconflow", "intl", "Qwen/Qwen3-8B", "tiers.t.deployments[0]")
    with pytest.raises(ConfigError, match="nothing ships for siliconflow/intl: no page to cite"):
        PriceBook(table=gap).check_priced([intl])
    with pytest.raises(ConfigError, match="has no price") as info:  # the shipped table prices intl, not this model
        PriceBook().check_priced([intl])
    assert "nothing ships" not in str(info.value)
    cfg = tmp_path / "c.toml"
    cfg.write_text('[providers.tg]\nkind = "together"\napi_key = "k"\n[providers.gpu]\nkind = "vllm"\n'
                   'base_url = "http://127.0.0.1:9/v1"\n[tiers.t]\ndeployments = ["tg:openai/gpt-oss-120b", '
                   '"gpu:mine"]\n[pricing]\nstrict = false\n')
    out = subprocess.run([sys.executable, "-m", "llmroute.cli", "prices", "--config", str(cfg)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    charged = {line.split()[0]: line for line in out.stdout.splitlines()[2:]}
    assert "table" in charged["tg:openai/gpt-oss-120b"] and "0.15" in charged["tg:openai/gpt-oss-120b"]
    assert "UNPRICED" in charged["gpu:mine"] and "no price" in out.stderr


# -- every platform's current embedding models: priced with a source, or a typed error naming the model ---------

# The platforms' own embedding model lists (docs/embeddings.md "Prices" names each list and its date).
CURRENT_EMBEDDING_MODELS = [
    ("together", None, "intfloat/multilingual-e5-large-instruct"),
    *[("fireworks", None, m) for m in (
        "nomic-ai/nomic-embed-text-v1.5", "nomic-ai/nomic-embed-text-v1", "WhereIsAI/UAE-Large-V1", "thenlper/gte-large",
        "thenlper/gte-base", "BAAI/bge-base-en-v1.5", "BAAI/bge-small-en-v1.5", "mixedbread-ai/mxbai-embed-large-v1",
        "sentence-transformers/all-MiniLM-L6-v2", "sentence-transformers/paraphrase-multilingual-MiniLM-L12-v2",
        "accounts/fireworks/models/qwen3-embedding-8b")],
    *[("siliconflow", "cn", m) for m in (
        "BAAI/bge-m3", "Pro/BAAI/bge-m3", "BAAI/bge-large-zh-v1.5", "BAAI/bge-large-en-v1.5",
        "netease-youdao/bce-embedding-base_v1", "Qwen/Qwen3-Embedding-8B", "Qwen/Qwen3-Embedding-4B",
        "Qwen/Qwen3-Embedding-0.6B")],
    *[("siliconflow", "intl", m) for m in (
        "BAAI/bge-m3", "Qwen/Qwen3-Embedding-8B", "Qwen/Qwen3-Embedding-4B", "Qwen/Qwen3-Embedding-0.6B")],
    *[("bailian", region, m) for region in ("cn-beijing", "singapore", "us")
      for m in ("text-embedding-v4", "text-embedding-v3")],
    ("bailian", "cn-beijing", "text-embedding-v2"),
    ("bailian", "cn-beijing", "text-embedding-v1"),
]  # fmt: skip


@pytest.mark.parametrize("kind,region,model", CURRENT_EMBEDDING_MODELS)
def test_current_embedding_models_price_with_a_source_or_fail_naming_the_model_and_why(kind, region, model):
    table = load_price_table()
    price = table.get(kind, region, model)
    ref = DeploymentRef(f"p:{model}", "p", kind, region, model, "tiers.embed.deployments[0]")
    if price is not None:
        assert price.mode == "embedding" and price.output_per_million == 0
        assert price.source and price.source_date
        assert (kind, normalize_region(kind, region), model) not in table.missing_models
        PriceBook().check_priced([ref])
        return
    # Not shipped on purpose: named in a [[missing]] entry, so the typed error says which model and why.
    assert (kind, normalize_region(kind, region), model) in table.missing_models, (kind, region, model)
    with pytest.raises(ConfigError) as info:
        PriceBook().check_priced([ref])
    message = str(info.value)
    assert info.value.key == "tiers.embed.deployments[0]"
    assert f"no shipped price for {model}" in message and f'[pricing."p:{model}"]' in message
    with pytest.raises(ConfigError, match="no shipped price for"):
        PriceBook().check_call_priced(ref)


def test_embedding_figures_added_in_this_version_are_the_pages_figures():
    table = load_price_table()
    expect = {  # (kind, region, model): (input per million, currency, batch input, confirmed)
        ("bailian", "cn-beijing", "text-embedding-v3"): ("0.5", "CNY", "0.25", True),
        ("bailian", "cn-beijing", "text-embedding-v2"): ("0.7", "CNY", "0.35", True),
        ("bailian", "cn-beijing", "text-embedding-v1"): ("0.7", "CNY", "0.35", True),
        ("bailian", "singapore", "text-embedding-v3"): ("0.07", "USD", None, True),
        ("together", None, "intfloat/multilingual-e5-large-instruct"): ("0.02", "USD", None, True),
        ("siliconflow", "cn", "BAAI/bge-m3"): ("0", "CNY", None, False),
        ("fireworks", None, "WhereIsAI/UAE-Large-V1"): ("0.016", "USD", None, False),
        ("fireworks", None, "BAAI/bge-small-en-v1.5"): ("0.008", "USD", None, False),
    }
    for (kind, region, model), (rate, currency, batch, confirmed) in expect.items():
        p = table.get(kind, region, model)
        assert p is not None and p.region == region, model
        assert (p.input_per_million, p.currency, p.confirmed) == (Decimal(rate), currency, confirmed), model
        assert p.batch_input_per_million == (None if batch is None else Decimal(batch)), model


def test_missing_models_must_name_a_list_and_never_a_priced_model():
    base = ('version = "t"\n[[price]]\nkind = "together"\nmodel = "m"\nmode = "embedding"\n'
            'input_per_million = 1\noutput_per_million = 0\ncurrency = "USD"\nsource = "p"\n')
    with pytest.raises(ConfigError, match="both priced and listed"):
        parse_price_table(base + '[[missing]]\nkind = "together"\nmodels = ["m"]\nreason = "r"\n')
    with pytest.raises(ConfigError, match="models"):
        parse_price_table(base + '[[missing]]\nkind = "together"\nmodels = "m2"\nreason = "r"\n')
    t = parse_price_table(base + '[[missing]]\nkind = "together"\nmodels = ["m2"]\nreason = "no page"\n')
    assert t.missing == {} and t.missing_models == {("together", None, "m2"): "no page"}


def test_prices_command_says_which_embedding_models_do_not_ship_within_120_columns():
    out = subprocess.run([sys.executable, "-m", "llmroute.cli", "prices", "siliconflow"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert max(len(line) for line in text.splitlines()) <= 120
    assert "not shipped on siliconflow/cn" in text and "Pro/BAAI/bge-m3" in text
    assert "not shipped on siliconflow/intl" in text
