"""The price model's tiers, thinking and cache rates; team catalogues laid over the shipped table, their
errors (file and line), and `llmroute prices check` / `llmroute prices diff`."""

from __future__ import annotations

import hashlib
import json
from decimal import Decimal as D

import pytest

from llmroute.accounting.catalogue import diff_tables, lint_table, load_catalogue
from llmroute.accounting.cost import compute_cost, sum_costs
from llmroute.accounting.prices import PriceBook, PricingConfig, load_price_table, parse_price_table
from llmroute.batch.pricing import batch_price
from llmroute.cli.prices_command import main as prices_main
from llmroute.errors import ConfigError

HEAD = 'version = "team-1"\nread_on = "2026-12-04"\n\n'
TIERED = HEAD + """[[price]]
kind = "bailian"
region = "cn-beijing"
model = "qwen-plus"
input_per_million = 0.8
output_per_million = 2
thinking_output_per_million = 8
cached_input_per_million = 0.16
explicit_cached_input_per_million = 0.08
cache_write_per_million = 1
currency = "CNY"
confirmed = true
source = "our contract"

[[price.tiers]]
above = 131072
input_per_million = 2.4
output_per_million = 20
thinking_output_per_million = 24

[[price.tiers]]
above = 262144
input_per_million = 4.8
output_per_million = 48
"""


def test_the_tier_is_chosen_by_prompt_tokens_and_prices_every_part():
    price = parse_price_table(TIERED, name="team.toml").entries[0]
    at = lambda prompt: compute_cost(price, prompt_tokens=prompt, completion_tokens=1000)  # noqa: E731
    assert at(131_072).tier_above is None and at(131_072).amount == D("0.1068576")  # the bound is the first tier
    assert at(131_073).tier_above == 131_072 and at(131_073).output_amount == D("0.02")
    assert at(262_145).tier_above == 262_144 and at(262_145).amount == D("1.306296")  # 262145 x 4.8 + 1000 x 48
    # A tier without a rate of its own falls back within the tier: thinking -> the tier's output,
    # cached -> the tier's input.
    top = compute_cost(price, prompt_tokens=300_000, completion_tokens=10, cached_tokens=100_000, thinking=True)
    assert top.output_amount == D("0.00048") and top.cached_amount == D("0.48")
    mid = compute_cost(price, prompt_tokens=200_000, completion_tokens=10, thinking=True)
    assert mid.output_amount == D("0.00024") and mid.thinking  # the tier's own thinking rate


def test_cache_writes_are_part_of_the_prompt_and_clamped():
    price = parse_price_table(TIERED, name="team.toml").entries[0]
    c = compute_cost(price, prompt_tokens=1000, completion_tokens=0, cached_tokens=600, cache_write_tokens=900,
                     explicit_cache=True)
    assert (c.cached_tokens, c.cache_write_tokens, c.uncached_input_tokens) == (600, 400, 0)
    assert c.amount == D("0.000048") + D("0.0004") and c.price_detail == "cache-write,explicit-cache"
    both = sum_costs([c, compute_cost(price, prompt_tokens=200_000, completion_tokens=1)])
    assert both.cache_write_tokens == 400 and both.cache_write_amount == D("0.0004") and both.tier_above == 131_072
    assert both.amount == both.input_amount + both.cached_amount + both.cache_write_amount + both.output_amount


def test_batch_prices_scale_every_tier():
    price = parse_price_table(TIERED, name="team.toml").entries[0]
    batch = batch_price(price, kind="bailian", model="qwen-plus")
    assert batch.tiers[0].input_per_million == price.tiers[0].input_per_million * (batch.input_per_million
                                                                                    / price.input_per_million)
    assert batch.thinking_output_per_million < price.thinking_output_per_million


@pytest.mark.parametrize("text, where, message", [
    (TIERED.replace("output_per_million = 20", 'output_per_million = "x"'), "team.toml:21", "output_per_million must be a number"),
    (TIERED.replace("above = 262144", "above = 100"), "team.toml:25", "tiers must ascend"),
    (TIERED.replace("above = 131072\n", ""), "team.toml:18", "a tier needs `above`"),
    (TIERED.replace("thinking_output_per_million = 24", "thinking_rate = 24"), "team.toml:18", "unknown keys ['thinking_rate']"),
    (TIERED.replace('currency = "CNY"', 'currency = "EUR"'), "team.toml:14", "currency must be one of"),
    (TIERED.replace('source = "our contract"\n', ""), "team.toml:4", "every entry needs a `source`"),
    (TIERED + "\n[[price]]\nkind = \"bailian\"\nregion = \"cn\"\nmodel = \"qwen-plus\"\ninput_per_million = 1\n"
              "output_per_million = 1\ncurrency = \"CNY\"\nsource = \"x\"\n", "team.toml:29", "duplicate entry"),
    ("prices = 1", "team.toml", "unknown top-level keys ['prices']"),
])
def test_catalogue_errors_name_the_file_and_line(text, where, message):
    with pytest.raises(ConfigError) as e:
        parse_price_table(text, name="team.toml")
    assert str(e.value).startswith(where) and message in str(e.value), str(e.value)


def test_a_catalogue_layers_over_the_shipped_table(tmp_path):
    (tmp_path / "a.toml").write_text(TIERED, encoding="utf-8")
    (tmp_path / "b.toml").write_text(HEAD.replace("team-1", "team-2") + """[[price]]
kind = "together"
model = "acme/our-finetune"
input_per_million = 0.5
output_per_million = 0.5
currency = "USD"
source = "our invoice"
""", encoding="utf-8")
    shipped = load_price_table()
    table = load_catalogue(["a.toml", "b.toml"], base_dir=tmp_path)
    assert table.version == f"{shipped.version}+team-1+team-2"
    assert table.get("bailian", "cn", "qwen-plus").version == "team-1"  # region aliases still apply
    assert table.get("bailian", "cn", "qwen-flash").version == shipped.version  # the rest is shipped
    assert table.get("together", None, "acme/our-finetune").origin_file == str(tmp_path / "b.toml")
    changes = {(c.change, c.model): c for c in diff_tables(shipped, table)}
    assert set(changes) == {("changed", "qwen-plus"), ("added", "acme/our-finetune")}
    fields = changes[("changed", "qwen-plus")].fields
    assert "tiers" in fields and "cached_input_per_million" not in fields  # only what differs is listed
    book = PriceBook(PricingConfig(catalogue="a.toml"), base_dir=str(tmp_path))
    assert book.lookup("ali", "bailian", "cn-beijing", "qwen-plus").version == "team-1"


def test_a_missing_catalogue_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError) as e:
        PriceBook(PricingConfig(catalogue=["nope.toml"]), base_dir=str(tmp_path))
    assert "nope.toml" in str(e.value) and "pricing.catalogue" in str(e.value)
    with pytest.raises(ValueError):
        PricingConfig(catalogue=[""])


def test_prices_check_and_diff_commands(tmp_path, capsys):
    good = tmp_path / "good.toml"
    good.write_text(TIERED, encoding="utf-8")
    bad = tmp_path / "bad.toml"
    bad.write_text(TIERED.replace("output_per_million = 48", "output_per_million = -48"), encoding="utf-8")
    assert prices_main(["check", str(good)]) == 0
    assert "ok, version team-1: 1 entries (1 replace shipped ones, 1 tiered, 0 unconfirmed)" in capsys.readouterr().out
    assert prices_main(["check", str(good), str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:27: price[0].tiers[1]: output_per_million must be >= 0" in err
    assert prices_main(["diff", str(good)]) == 0
    out = capsys.readouterr().out
    assert "changed  bailian/cn-beijing qwen-plus" in out
    assert "batch_input_per_million: 0.4 -> -" in out  # the team file has no batch rates
    assert "tiers: >131072: 2.4/20 thinking 24 cached 0.48" in out
    assert prices_main(["diff", str(good), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["version"] == "team-1" and rows[0]["where"] == f"{good}:4"


def test_a_config_override_takes_thinking_and_cache_rates_and_keeps_old_versions():
    plain = PricingConfig.model_validate({"p:m": {"input_per_million": 1, "output_per_million": 2}})
    rich = PricingConfig.model_validate({"p:m": {"input_per_million": 1, "output_per_million": 2,
                                                 "thinking_output_per_million": 6, "cache_write_per_million": 1.25}})
    old = PriceBook(plain).lookup("p", "vllm", None, "m")
    new = PriceBook(rich).lookup("p", "vllm", None, "m")
    assert old.version == "config:" + hashlib.sha256(b'["1","2","None","USD"]').hexdigest()[:8]
    assert new.version != old.version
    c = compute_cost(new, prompt_tokens=1000, completion_tokens=10, reasoning_tokens=4, cache_write_tokens=800)
    assert c.amount == D("0.0002") + D("0.001") + D("0.00006")  # 200 x 1 + 800 x 1.25 + 10 x 6


def test_prices_diff_of_a_configs_catalogue(tmp_path, capsys):
    (tmp_path / "team.toml").write_text(TIERED, encoding="utf-8")
    (tmp_path / "llmroute.toml").write_text(
        '[providers.ali]\nkind = "bailian"\nregion = "cn-beijing"\napi_key = "sk-test"\n\n'
        '[tiers.small]\ndeployments = ["ali:qwen-plus"]\n\n[pricing]\ncatalogue = "team.toml"\n', encoding="utf-8")
    assert prices_main(["diff", "--config", str(tmp_path / "llmroute.toml")]) == 0
    out = capsys.readouterr().out
    assert "1 entry added or changed" in out and f"({tmp_path / 'team.toml'}:4, version team-1)" in out
    # What the config's deployment is charged comes from the team file.
    assert prices_main(["--config", str(tmp_path / "llmroute.toml"), "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert (row["deployment"], row["input"], row["thinking"]) == ("ali:qwen-plus", "0.8", "8")


def test_prices_check_warns_about_likely_typos_and_the_shipped_table_has_none(tmp_path, capsys):
    assert lint_table(load_price_table()) == []
    odd = tmp_path / "odd.toml"
    odd.write_text(TIERED.replace("cached_input_per_million = 0.16", "cached_input_per_million = 1.6")
                   .replace("input_per_million = 4.8", "input_per_million = 0.48"), encoding="utf-8")
    assert prices_main(["check", str(odd)]) == 0
    out = capsys.readouterr().out
    assert f"warning: {odd}:4: bailian/cn-beijing qwen-plus: first tier: cached input 1.6 costs more than input 0.8" in out
    assert f"warning: {odd}:4: bailian/cn-beijing qwen-plus: tier >262144 is cheaper than the tier below it" in out
