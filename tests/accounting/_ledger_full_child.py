"""Child process for test_ledger_durability: a ledger sink whose disk fills up (RLIMIT_FSIZE, with
SIGXFSZ ignored so a write past the limit fails with EFBIG instead of killing the process).

argv: sink kind (sqlite | jsonl), ledger path, mode ("recover": the limit is lifted and the spool
written; "close": the sink is closed while the disk is still full). Prints one JSON line of what it saw.
"""

from __future__ import annotations

import json
import logging
import resource
import signal
import sys
import time
from decimal import Decimal

from llmroute.accounting.ledger import JSONLSink, LedgerRecord, SQLiteSink


class Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def record(seq: int) -> LedgerRecord:
    return LedgerRecord(ts=time.time(), request_id=f"r{seq}", feature="f" * 200, provider="p", deployment="p:m",
                        model="m", input_tokens=100, output_tokens=10, cost=Decimal("0.0001"), currency="USD",
                        priced=True)


def main() -> None:
    kind, path, mode = sys.argv[1:4]
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    errors = Errors()
    logging.getLogger("llmroute.ledger").addHandler(errors)
    sink = (SQLiteSink if kind == "sqlite" else JSONLSink)(path, flush_interval_s=3600)
    sink.max_spool = 500
    out: dict = {}
    for seq in range(10):
        sink.write(record(seq))
    out["first_flush"] = sink.flush()
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    # The disk is now "full": no file may grow past 48 KiB (the WAL and the JSONL file alike).
    resource.setrlimit(resource.RLIMIT_FSIZE, (48 * 1024, hard))
    for seq in range(10, 310):
        sink.write(record(seq))
    out["full_flush"] = sink.flush()
    out["after_first_failure"] = sink.health().as_dict()
    for seq in range(310, 610):  # 600 waiting > the 500 the spool holds: the 100 oldest are lost
        sink.write(record(seq))
    sink.flush()
    out["after_overflow"] = sink.health().as_dict()
    if mode == "recover":
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        out["recovered_flush"] = sink.flush()
        out["after_recovery"] = sink.health().as_dict()
    sink.close()
    out["after_close"] = sink.health().as_dict()
    out["errors"] = errors.messages
    print(json.dumps(out))


if __name__ == "__main__":
    main()
