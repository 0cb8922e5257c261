"""A worker process for the many-process tests: one llmroute Client, driven by JSON lines on stdin.

    python -m tests.state.worker

Each command line gets one JSON answer line on stdout. Commands:
  {"op": "config", "config": {...}}            (re)create the client from a config dict
  {"op": "load", "model": m, "threads": k, "start_at": wall_s, "duration_s": s, "max_tokens": n,
   "feature": f, "pace_s": p}                   calls in k threads until start_at + duration_s
  {"op": "calls", "model": m, "n": n}           n calls in a row
  {"op": "spawn", "model": m, "n": n}           n calls started in threads, not waited for
  {"op": "health"}                              client.health(): states and the shared-state status
  {"op": "exit"}
A call's result: its request id, ok or the error type, and each attempt (deployment, number, status,
started_at, note). Talks only to the loopback servers named in the config.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

import llmroute as L
from llmroute.accounting.tokens import count_message_tokens

MESSAGES = [{"role": "user", "content": "hello from a worker"}]


def _attempts(route: Any) -> list[list[Any]]:
    return [[a.deployment, a.number, a.status, a.started_at, a.note] for a in (route.attempts if route else [])]


def one_call(client: L.Client, model: str, **kw: Any) -> dict[str, Any]:
    t0 = time.time()
    try:
        out = client.chat.completions.create(model=model, messages=MESSAGES, **kw)
        route = out.route
        return {"ok": True, "t0": t0, "t1": time.time(), "request_id": route.request_id, "attempts": _attempts(route),
                "cost": None if out.cost is None else str(out.cost.amount)}
    except L.LLMRouteError as exc:
        attempts = getattr(exc, "attempts", None) or []
        return {"ok": False, "t0": t0, "t1": time.time(), "error": type(exc).__name__, "message": str(exc)[:300],
                "attempts": [[a.deployment, a.number, a.status, a.started_at, a.note] for a in attempts]}


def main() -> None:
    client: L.Client | None = None
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        answer: Any = None
        if op == "config":
            if client is not None:
                client.close()
            client = L.Client(config=cmd["config"])
            count_message_tokens(MESSAGES)  # load the tokenizer now, not in the first timed call
            answer = "ok"
        elif op == "load":
            assert client is not None
            results: list[dict[str, Any]] = []
            lock = threading.Lock()
            kw = {k: cmd[k] for k in ("max_tokens", "feature", "metadata") if k in cmd}
            end = cmd["start_at"] + cmd["duration_s"]

            def loop() -> None:
                while time.time() < cmd["start_at"]:
                    time.sleep(0.005)
                while time.time() < end:
                    r = one_call(client, cmd["model"], **kw)
                    with lock:
                        results.append(r)
                    if cmd.get("pace_s"):
                        time.sleep(cmd["pace_s"])

            threads = [threading.Thread(target=loop) for _ in range(cmd.get("threads", 1))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            answer = results
        elif op == "calls":
            assert client is not None
            answer = [one_call(client, cmd["model"], **cmd.get("kw", {})) for _ in range(cmd["n"])]
        elif op == "spawn":
            assert client is not None
            for _ in range(cmd["n"]):
                threading.Thread(target=one_call, args=(client, cmd["model"]), daemon=True).start()
            answer = "started"
        elif op == "health":
            assert client is not None
            view = client.health()
            answer = {"states": {d: s.state for d, s in view.items()},
                      "shared_state": getattr(view, "shared_state", None)}
        elif op == "flush":
            assert client is not None
            client._engine.ledger.flush()
            answer = "ok"
        elif op == "exit":
            if client is not None:
                client.close()
            print(json.dumps("bye"), flush=True)
            return
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
