"""The `Cost` value: what a call or one attempt cost, exact (Decimal), and JSON-ready via `to_dict()`.

Computed in `accounting/cost.py`; held by `ChatCompletion.cost`, `Attempt.cost` and embeddings
responses. Standard library only, so the response types can name it without importing the pricing.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from decimal import Decimal
from typing import Any, Mapping

__all__ = ["Cost"]


@dataclass(frozen=True)
class Cost:
    """What a call (or one attempt) cost, and how the amount splits over its tokens.

    `amount = input_amount + cached_amount + cache_write_amount + output_amount` when priced.
    `input_tokens` counts cached and cache-write tokens too (as OpenAI's `prompt_tokens`); `input_amount`
    is the share of the rest. `cache_write_tokens` were written to an explicit context cache
    (`cache_write_amount`, at the cache-write rate); `cached_tokens` were read from one (explicit hits at
    their own rate when `explicit_cache`). `thinking` says the output was billed at the thinking rate;
    `tier_above` is the input-length tier applied (the prompt exceeded that many tokens; None: the
    first tier). `by_currency` holds the exact amount per currency (one entry unless a failover
    crossed currencies; see `sum_costs`).
    """

    amount: Decimal | None
    currency: str | None
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    input_amount: Decimal | None = None
    cached_amount: Decimal | None = None
    output_amount: Decimal | None = None
    estimated: bool = False
    priced: bool = True
    price_version: str | None = None
    # False when the price came from an unconfirmed table entry (see prices.toml).
    price_confirmed: bool = True
    by_currency: Mapping[str, Decimal] = field(default_factory=dict)
    cache_write_tokens: int = 0
    cache_write_amount: Decimal | None = None
    explicit_cache: bool = False
    thinking: bool = False
    tier_above: int | None = None

    @property
    def price_detail(self) -> str | None:
        """What beyond the plain rates priced this cost, as the ledger records it: "tier>131072",
        "thinking", "cache-write", "explicit-cache", comma-joined; None when nothing did."""
        if self.tier_above is None and not self.thinking and self.cache_write_tokens <= 0 and not self.explicit_cache:
            return None  # the common case, asked once per attempt (the ledger record)
        parts = [p for p, on in ((f"tier>{self.tier_above}", self.tier_above is not None),
                                 ("thinking", self.thinking), ("cache-write", self.cache_write_tokens > 0),
                                 ("explicit-cache", self.explicit_cache)) if on]
        return ",".join(parts) or None

    @property
    def uncached_input_tokens(self) -> int:
        return self.input_tokens - self.cached_tokens - self.cache_write_tokens

    def to_dict(self) -> dict[str, Any]:
        """Every field, JSON-ready: Decimal amounts as strings (exact), `by_currency` as a plain dict of
        strings, the rest as they are (numbers, booleans, strings, None). `json.dumps` takes it."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = str(value) if isinstance(value, Decimal) else value
        out["by_currency"] = {currency: str(amount) for currency, amount in self.by_currency.items()}
        return out

    def __str__(self) -> str:
        if self.amount is None:
            text = "unpriced" if not self.priced else f"{self.currency} ?"
        else:
            text = f"{self.amount.normalize():f} {self.currency}"
        # An unpriced cost has no price to be unconfirmed: "unpriced" says it all.
        unconfirmed = self.priced and not self.price_confirmed
        flags = [f for f, on in (("estimated", self.estimated), ("unconfirmed price", unconfirmed)) if on]
        return f"{text} ({', '.join(flags)})" if flags else text

