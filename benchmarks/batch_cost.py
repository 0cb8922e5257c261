"""Cost of a 10,000-request job on each platform, at online vs batch prices from the shipped catalogue.

No network: it prices a fixed workload (10,000 requests x 1,000 prompt tokens + 300 completion
tokens, no cached tokens) with `compute_cost` over every catalogue entry of the four platforms with a
batch API, online and at the batch price (`llmroute/batch/discounts.toml`). Prints a Markdown table,
writes benchmarks/batch_cost.json.

    .venv/bin/python benchmarks/batch_cost.py
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

from llmroute.accounting.cost import compute_cost
from llmroute.accounting.prices import load_price_table
from llmroute.batch.platforms import BATCH_KINDS
from llmroute.batch.pricing import batch_price

REQUESTS, PROMPT, COMPLETION = 10_000, 1_000, 300


def main() -> None:
    rows = []
    for price in load_price_table().entries:
        if price.kind not in BATCH_KINDS:
            continue
        batch = batch_price(price, kind=price.kind, model=price.model)
        online = compute_cost(price, prompt_tokens=PROMPT * REQUESTS, completion_tokens=COMPLETION * REQUESTS)
        cheap = compute_cost(batch, prompt_tokens=PROMPT * REQUESTS, completion_tokens=COMPLETION * REQUESTS)
        saved = online.amount - cheap.amount
        rows.append({"kind": price.kind, "region": price.region, "model": price.model, "currency": price.currency,
                     "online": str(online.amount), "batch": str(cheap.amount), "saved": str(saved),
                     "saved_share": str((saved / online.amount * 100).quantize(Decimal("1"))) if online.amount else "-",
                     "price_confirmed": price.confirmed})
    print("| platform | region | model | online | batch | saved | share | price confirmed |")
    print("|---|---|---|---:|---:|---:|---:|---|")
    for r in rows:
        money = lambda v: f"{Decimal(v).quantize(Decimal('0.01'))} {r['currency']}"  # noqa: E731
        print(f"| {r['kind']} | {r['region'] or '-'} | `{r['model']}` | {money(r['online'])} | {money(r['batch'])} | "
              f"{money(r['saved'])} | {r['saved_share'] + '%' if r['saved_share'] != '-' else 'free'} | {'yes' if r['price_confirmed'] else 'no'} |")
    out = Path(__file__).with_name("batch_cost.json")
    out.write_text(json.dumps({"requests": REQUESTS, "prompt_tokens": PROMPT, "completion_tokens": COMPLETION,
                               "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
