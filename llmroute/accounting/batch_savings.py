"""What batch saved: batch-pool spend against the same usage at online prices, from ledger records.

Each batch result's ledger row carries `metadata.online_cost` (its usage at the deployment's
online price); requests the `online` failover ran are batch-pool rows without it (no saving).
Sans-I/O: it reads `LedgerRecord`s it is given.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Dict, Iterable

__all__ = ["batch_savings", "savings_text"]


def batch_savings(records: Iterable[Any]) -> Dict[str, Dict[str, Any]]:
    """Per currency: batch spend, the online price of the same usage, the saving, and other pools' spend."""
    out: Dict[str, Dict[str, Any]] = {}
    for rec in records:
        if rec.cost is None or rec.currency is None:
            continue
        row = out.setdefault(rec.currency, {"batch": Decimal(0), "batch_at_online": Decimal(0), "batch_requests": 0,
                                            "run_online_from_batch": Decimal(0), "other_pools": Decimal(0)})
        if rec.pool != "batch":
            row["other_pools"] += rec.cost
        elif "online_cost" in rec.metadata:
            row["batch"] += rec.cost
            row["batch_at_online"] += Decimal(str(rec.metadata["online_cost"]))
            row["batch_requests"] += 1 if rec.status == "ok" else 0
        else:
            row["run_online_from_batch"] += rec.cost
    for row in out.values():
        row["saved"] = row["batch_at_online"] - row["batch"]
    return {c: r for c, r in out.items() if r["batch_requests"] or r["run_online_from_batch"]}


def _fmt(amount: Decimal) -> str:
    return f"{amount.normalize():f}"  # exact: batch amounts are often below a millionth


def savings_text(records: Iterable[Any]) -> str:
    """A few lines for `llmroute report`, or "" when the ledger has no batch traffic."""
    lines = []
    for currency, r in sorted(batch_savings(records).items()):
        share = f" ({r['saved'] / r['batch_at_online'] * 100:.0f}%)" if r["batch_at_online"] else ""
        lines.append(f"batch {currency}: {_fmt(r['batch'])} for {r['batch_requests']} results through batch APIs "
                     f"(online price {_fmt(r['batch_at_online'])}, saved {_fmt(r['saved'])}{share}); "
                     f"batch work run online {_fmt(r['run_online_from_batch'])}; "
                     f"other pools {_fmt(r['other_pools'])}")
    return ("\n" + "\n".join(lines) + "\n") if lines else ""
