"""Child process for test_client_ledger: real client calls to its own loopback Fireworks server, with a
SQLite ledger, until the parent kills it (SIGKILL: no atexit, no close).

argv: ledger path, flush interval (s), synced count N. After call N it waits three flush intervals and
prints "synced N" (those N records are then past the documented loss bound); every call prints
"served K" when it has returned to its caller. Bounded: stops by itself after 60 s or 5,000 calls.
"""

from __future__ import annotations

import sys
import time

from llmroute import Client
from tests.accounting._client import MESSAGES, config, provider
from tests.servers.registry import SERVERS

MODEL = "accounts/fireworks/models/llama-v3p1-8b-instruct"


def main() -> None:
    path, interval, synced = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    server = SERVERS["fireworks"]().start()
    cfg = config({"fw": provider("fireworks", server)}, {"t": [f"fw:{MODEL}"]},
                 ledger={"sink": "sqlite", "path": path, "flush_interval_s": interval})
    client = Client(config=cfg)
    deadline = time.monotonic() + 60
    for k in range(1, 5001):
        client.chat.completions.create(model="t", messages=MESSAGES, feature="load", metadata={"seq": str(k)})
        print(f"served {k}", flush=True)
        if k == synced:
            time.sleep(3 * interval)
            print(f"synced {k}", flush=True)
        if time.monotonic() > deadline:
            break
    time.sleep(60)  # never close: only a kill ends us


if __name__ == "__main__":
    main()
