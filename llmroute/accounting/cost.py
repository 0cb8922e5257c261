"""Cost of a call: token usage in, an exact Decimal amount out, each token billed once.

Billing rules (docs/platforms.md §12.5, §12.6):
  * `prompt_tokens` includes cached tokens (OpenAI's `prompt_tokens`). The uncached part,
    `prompt - cached`, is billed at the input rate; the cached part once, at the cached rate (the
    input rate when the price has none).
  * `completion_tokens` already includes reasoning tokens on every OpenAI-shaped platform
    (`completion_tokens_details.reasoning_tokens` is a breakdown, not an addition), so reasoning is
    billed once, as output. A platform that reports reasoning *outside* the completion count is
    handled with `reasoning_in_completion=False`; none of the platforms in docs/platforms.md does.
  * No price means `amount=None` and `priced=False`, never 0. Estimated usage gives
    `estimated=True`.
  * Input-length tiers (docs/pricing.md): the request's prompt tokens pick the tier
    (`Price.for_prompt`), and that tier's rates price every part of the request, output included.
  * Thinking: when the usage reports reasoning tokens or the request enabled thinking, every output
    token is billed at the thinking-output rate (the output rate when the price has none).
  * Context cache: tokens written to an explicit cache (`cache_write_tokens`, part of the prompt) are
    billed at the cache-write rate; cached tokens at the explicit-hit rate when the usage says the
    cache was explicit, else at the (implicit) cached rate.

`read_usage` reads every platform's usage shape (docs/platforms.md §10, §11.3): OpenAI
`prompt_tokens_details.cached_tokens`, Together's flat `usage.cached_tokens`, Fireworks
`perf_metrics["cached-prompt-tokens"]`, DashScope native `input_tokens`/`output_tokens`,
llama.cpp `timings.cache_n`, SGLang's top-level `reasoning_tokens`.

Pure functions and frozen values: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any, Callable, Iterable, Mapping

from llmroute.accounting.tokens import cache_write_tokens, explicit_cache, normalize_usage, thinking_requested
from llmroute.accounting.cost_value import Cost
from llmroute.accounting.frozen import Fill
from llmroute.accounting.prices import MILLION, ExchangeRates, Price

__all__ = ["TokenUsage", "Cost", "read_usage", "compute_cost", "cost_from_usage", "sum_costs", "MIXED",
           "thinking_requested"]

# The currency of a sum over attempts billed in different currencies with no rate to join them.
MIXED = "mixed"
_ZERO = Decimal(0)
_FILL_COST = Fill(Cost)


@dataclass(frozen=True)
class TokenUsage:
    """Token counts in OpenAI's convention: prompt includes cached, completion includes reasoning."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    reasoning_in_completion: bool = True
    cache_write_tokens: int = 0
    explicit_cache: bool = False


def _as_mapping(obj: Any) -> Mapping[str, Any]:
    if obj is None:
        return {}
    if isinstance(obj, Mapping):
        return obj
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        dumped: Mapping[str, Any] = dump()
        return dumped
    fields: Mapping[str, Any] = vars(obj)
    return fields


def read_usage(
    usage: Any,
    *,
    timings: Mapping[str, Any] | None = None,
    perf_metrics: Mapping[str, Any] | None = None,
) -> TokenUsage:
    """Normalize any platform's usage object (dict or pydantic model) into a `TokenUsage`.

    `timings` is llama.cpp's top-level `timings` object, `perf_metrics` Fireworks' (both sit beside
    `usage` in the response, not inside it). The reading itself is `llmroute.accounting.tokens.normalize_usage`
    (one place knows where each platform puts its counts).
    """
    extra = {k: v for k, v in (("timings", timings), ("perf_metrics", perf_metrics)) if v is not None}
    u = normalize_usage(_as_mapping(usage), extra=extra or None)
    return TokenUsage(
        prompt_tokens=u.prompt_tokens,
        completion_tokens=u.completion_tokens,
        cached_tokens=u.cached_tokens,
        reasoning_tokens=u.reasoning_tokens,
        cache_write_tokens=cache_write_tokens(u),
        explicit_cache=explicit_cache(u),
    )


def compute_cost(
    price: Price | None,
    *,
    prompt_tokens: int,
    completion_tokens: int,
    cached_tokens: int = 0,
    reasoning_tokens: int = 0,
    reasoning_in_completion: bool = True,
    estimated: bool = False,
    cache_write_tokens: int = 0,
    explicit_cache: bool = False,
    thinking: bool = False,
) -> Cost:
    """The cost of one attempt. See the module docstring for the billing rules.

    Counts are clamped to be consistent (cached + cache writes <= prompt, all >= 0) rather than
    raising: a platform's odd usage must not lose a response that already arrived.
    """
    prompt = prompt_tokens if type(prompt_tokens) is int and prompt_tokens >= 0 else max(0, int(prompt_tokens))
    cached = min(max(0, int(cached_tokens)), prompt) if cached_tokens else 0
    written = min(max(0, int(cache_write_tokens)), prompt - cached) if cache_write_tokens else 0
    reasoning = max(0, int(reasoning_tokens)) if reasoning_tokens else 0
    output = (completion_tokens if type(completion_tokens) is int and completion_tokens >= 0
              else max(0, int(completion_tokens))) + (0 if reasoning_in_completion else reasoning)
    thinking = bool(thinking or reasoning > 0)
    explicit = bool(explicit_cache and (cached or written))
    if price is None:
        return Cost(amount=None, currency=None, input_tokens=prompt, output_tokens=output, cached_tokens=cached,
                    reasoning_tokens=reasoning, estimated=estimated, priced=False, price_confirmed=False,
                    cache_write_tokens=written, explicit_cache=explicit, thinking=thinking)
    rates = price.for_prompt(prompt) if price.tiers else price
    cached_rate = rates.explicit_cached_rate if explicit_cache else rates.cached_rate
    own_thinking_rate = thinking and rates.thinking_output_per_million is not None
    output_rate = rates.thinking_output_rate if own_thinking_rate else rates.output_per_million
    input_amount = Decimal(prompt - cached - written) * rates.input_per_million / MILLION
    cached_amount = Decimal(cached) * cached_rate / MILLION
    write_amount = Decimal(written) * rates.cache_write_rate / MILLION if written else _ZERO
    output_amount = Decimal(output) * output_rate / MILLION
    amount = input_amount + cached_amount + write_amount + output_amount
    return _FILL_COST.make({  # one per attempt on the request path: made in one step (frozen.Fill)
        "amount": amount,
        "currency": price.currency,
        "input_tokens": prompt,
        "output_tokens": output,
        "cached_tokens": cached,
        "reasoning_tokens": reasoning,
        "input_amount": input_amount,
        "cached_amount": cached_amount,
        "output_amount": output_amount,
        "estimated": estimated,
        "priced": True,
        "price_version": price.version,
        "price_confirmed": price.confirmed,
        "by_currency": {price.currency: amount},
        "cache_write_tokens": written,
        "cache_write_amount": write_amount,
        "explicit_cache": explicit,
        # Only a thinking rate of its own makes "thinking" a pricing fact worth recording.
        "thinking": own_thinking_rate,
        "tier_above": rates.tier_above,
    })


def cost_from_usage(
    price: Price | None,
    usage: Any,
    *,
    estimated: bool = False,
    timings: Mapping[str, Any] | None = None,
    perf_metrics: Mapping[str, Any] | None = None,
    thinking: bool = False,
) -> Cost:
    """`compute_cost` over a raw usage object (any platform's shape, see `read_usage`). Reported
    reasoning tokens select the thinking-output rate by themselves; `thinking=True` selects it without
    them (the client passes it only for usage it estimated, see `Engine.price`)."""
    t = usage if isinstance(usage, TokenUsage) else read_usage(usage, timings=timings, perf_metrics=perf_metrics)
    return compute_cost(
        price,
        prompt_tokens=t.prompt_tokens,
        completion_tokens=t.completion_tokens,
        cached_tokens=t.cached_tokens,
        reasoning_tokens=t.reasoning_tokens,
        reasoning_in_completion=t.reasoning_in_completion,
        estimated=estimated,
        cache_write_tokens=t.cache_write_tokens,
        explicit_cache=t.explicit_cache,
        thinking=thinking,
    )


def _add(a: Decimal | None, b: Decimal | None) -> Decimal | None:
    return None if a is None or b is None else a + b


def _write_amount(c: Cost) -> Decimal | None:
    """A cost's cache-write share; a priced cost built before cache writes were priced made none."""
    if c.cache_write_amount is None and c.amount is not None:
        return Decimal(0)
    return c.cache_write_amount


def _total(values: Iterable[Decimal | None]) -> Decimal | None:
    total: Decimal | None = Decimal(0)
    for value in values:
        total = _add(total, value)
    return total


def _converted(costs: list[Cost], part: Callable[[Cost], Decimal | None], rates: ExchangeRates, target: str) -> Decimal:
    total = Decimal(0)
    for c in costs:
        amount = part(c)
        value = None if amount is None or c.currency is None else rates.convert(amount, c.currency, target)
        assert value is not None  # a priced attempt has its amounts and currency, and each of them converts
        total += value
    return total


def sum_costs(costs: Iterable[Cost], *, rates: ExchangeRates | None = None) -> Cost:
    """The cost of a call that took several billed attempts (failover, hedge): their sum.

    Tokens always add up. Amounts:
      * all attempts in one currency: the exact sum, in that currency;
      * several currencies and `rates` converting all of them: the sum in the reporting currency;
      * several currencies and no such rate: `amount=None`, `currency="mixed"`; the exact
        per-currency sums stay in `by_currency` (a converted figure is never invented).
    Any unpriced attempt makes the total unpriced (`amount=None`, `priced=False`); `by_currency`
    still holds what the priced attempts cost. Any estimated attempt makes the total estimated.
    An empty sequence costs nothing: amount None, priced False (there is no price to speak of).
    """
    costs = list(costs)
    if len(costs) == 1:
        return costs[0]
    if not costs:
        return Cost(amount=None, currency=None, priced=False, price_confirmed=False)
    by_currency: dict[str, Decimal] = {}
    for c in costs:
        for cur, amt in c.by_currency.items():
            by_currency[cur] = by_currency.get(cur, Decimal(0)) + amt
    priced = all(c.priced for c in costs)
    versions = sorted({c.price_version for c in costs if c.price_version})
    mixed = Cost(
        amount=None,
        currency=MIXED,
        input_tokens=sum(c.input_tokens for c in costs),
        output_tokens=sum(c.output_tokens for c in costs),
        cached_tokens=sum(c.cached_tokens for c in costs),
        reasoning_tokens=sum(c.reasoning_tokens for c in costs),
        cache_write_tokens=sum(c.cache_write_tokens for c in costs),
        explicit_cache=any(c.explicit_cache for c in costs),
        thinking=any(c.thinking for c in costs),
        tier_above=max((c.tier_above for c in costs if c.tier_above is not None), default=None),
        estimated=any(c.estimated for c in costs),
        priced=priced,
        price_version="+".join(versions) or None,
        price_confirmed=all(c.price_confirmed for c in costs),
        by_currency=by_currency,
    )
    currencies = {c.currency for c in costs if c.currency}
    if len(currencies) <= 1:
        currency = next(iter(currencies), None)
        if not priced:
            return replace(mixed, currency=currency)
        return replace(mixed, amount=sum(by_currency.values(), Decimal(0)), currency=currency,
                       input_amount=_total(c.input_amount for c in costs),
                       cached_amount=_total(c.cached_amount for c in costs),
                       cache_write_amount=_total(_write_amount(c) for c in costs),
                       output_amount=_total(c.output_amount for c in costs))
    if rates is not None and priced:
        target = rates.reporting_currency
        converted = [rates.convert(amt, cur, target) for cur, amt in by_currency.items()]
        amounts = [x for x in converted if x is not None]
        if len(amounts) == len(converted):
            return replace(mixed, amount=sum(amounts, Decimal(0)), currency=target,
                           input_amount=_converted(costs, lambda c: c.input_amount, rates, target),
                           cached_amount=_converted(costs, lambda c: c.cached_amount, rates, target),
                           cache_write_amount=_converted(costs, _write_amount, rates, target),
                           output_amount=_converted(costs, lambda c: c.output_amount, rates, target))
    return mixed
