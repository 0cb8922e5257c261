"""Child process for test_ledger: writes ledger records under load and prints a line per record served.

argv: ledger path, flush interval (s), mode ("load": run until killed, bounded; "exit": write N and
return without closing the sink, so only the atexit flush can save them).
"""

from __future__ import annotations

import sys
import time
from decimal import Decimal

from llmroute.accounting.ledger import LedgerRecord, SQLiteSink


def main() -> None:
    path, interval, mode = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    sink = SQLiteSink(path, flush_interval_s=interval)
    limit = 200_000 if mode == "load" else int(sys.argv[4])
    deadline = time.monotonic() + 60  # bounded even if nobody kills us
    for seq in range(limit):
        sink.write(
            LedgerRecord(
                ts=time.time(), request_id=str(seq), feature="load", provider="p", deployment="p:m", model="m",
                input_tokens=100, output_tokens=10, cost=Decimal("0.0001"), currency="USD", priced=True,
            )
        )  # fmt: skip
        # Served = accepted by the sink, as a call path would have returned to its caller.
        sys.stdout.write(f"{seq} {time.monotonic()}\n")
        sys.stdout.flush()
        if mode == "load":
            time.sleep(0.0005)
            if time.monotonic() > deadline:
                break


if __name__ == "__main__":
    main()
