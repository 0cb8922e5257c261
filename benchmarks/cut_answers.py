"""Time to a complete answer when a stream is cut after content (issue 24), one row per case.

Every case is the default settings' behaviour on loopback servers (tests/resilience/test_cut_answers.py
has the same servers and checks): a tier of `openai-compatible` deployments, no `continue_prefill`
unless the case says so, the shipped resilience defaults except the primary's first-token limit (2 s,
which is also how long a stall takes to notice: docs/failover.md rule 3). Every server answers like a
model (`OpenAICompatServer.answer`, 60 words, 2 ms apart); the primary is cut (connection reset) or
stalls after 40. Each case runs `--runs` times with a fresh sync client; the row gives the median and
the worst time from `create()` to the stream's end (or to the error), how the answer was finished,
and whether the caller saw the whole answer exactly once. "no fault" is the baseline for the ratio.

    python benchmarks/cut_answers.py [--runs 5] [--json benchmarks/out/cut_answers.json]

Only 127.0.0.1 is contacted; at most `runs` x 11 calls.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import llmroute as L  # noqa: E402
from llmroute import errors as E  # noqa: E402
from tests.servers.fault import FaultServer, reset_during  # noqa: E402
from tests.servers.llamacpp_wire import LlamaCppWireServer  # noqa: E402
from tests.servers.script import Reply  # noqa: E402
from tests.servers.sglang import SGLangServer  # noqa: E402
from tests.servers.vllm import VLLMServer  # noqa: E402

WORDS = ("The quick brown fox jumps over the lazy dog while the farmer counts his sheep near the old stone "
         "bridge and the river runs slowly past the mill where children play with paper boats under a pale "
         "autumn sky full of birds that sing their evening songs before the night comes down over the quiet "
         "little village").split(" ")[:60]
ANSWER = " ".join(WORDS)
CUT_AT = 40
GAP_S = 0.002
MESSAGES = [{"role": "user", "content": "tell me a story"}]


def servers() -> Dict[str, Any]:
    out: Dict[str, Any] = {
        "primary": FaultServer(), "vllm": VLLMServer(models={"m": 32_768}),
        "sglang": SGLangServer(models={"m": 32_768}), "llamacpp": LlamaCppWireServer(),
        "thinking": LlamaCppWireServer(refuse_prefill=True), "unknown": FaultServer(),
    }
    for server in out.values():
        server.answer = ANSWER
        server.start()
    return out


def config(srv: Dict[str, Any], first: str, *backups: str, declared: str | None = None) -> Dict[str, Any]:
    names = [first, *backups]
    deployments: List[Any] = [{"id": f"{first}:m", "ttft_timeout_s": 2.0}]
    deployments += [{"id": f"{b}:m", "continue_prefill": True} if b == declared else f"{b}:m" for b in backups]
    return {
        "providers": {n: {"kind": "openai-compatible", "base_url": srv[n].base_url} for n in names},
        "tiers": {"t": {"deployments": deployments}},
        "pricing": {f"{n}:*": {"input_per_million": 0, "output_per_million": 0} for n in names},
        "ledger": {"sink": "memory"},
    }


def cut(server: Any, how: str) -> None:
    if how == "reset":
        server.push(reset_during(CUT_AT, gap_s=GAP_S))
    elif how == "stall":
        gaps = [GAP_S] * (len(WORDS) - 1)
        gaps[CUT_AT - 1] = 20.0
        server.push(Reply(gap_s=gaps))
    else:
        server.push(Reply(gap_s=GAP_S))


# name -> (first deployment, backups, fault, request parameters, declared continue_prefill, expected)
CASES: Dict[str, tuple[str, tuple[str, ...], str, Dict[str, Any], str | None, str]] = {
    "no fault (baseline)": ("primary", ("unknown",), "none", {"temperature": 0}, None, "complete"),
    "cut, backup really vLLM, greedy": ("primary", ("vllm",), "reset", {"temperature": 0}, None, "complete"),
    "cut, backup really vLLM, sampled": ("primary", ("vllm",), "reset", {"temperature": 0.8}, None, "complete"),
    "stall, backup really vLLM, greedy": ("primary", ("vllm",), "stall", {"temperature": 0}, None, "complete"),
    "cut, backup really llama.cpp, sampled": ("primary", ("llamacpp",), "reset", {"temperature": 0.8}, None,
                                              "complete"),
    "cut, backup declared continue_prefill (SGLang)": ("primary", ("sglang",), "reset", {"temperature": 0.8},
                                                       "sglang", "complete"),
    "cut, same deployment continues (primary really vLLM)": ("vllm", ("unknown",), "reset", {"temperature": 0.8},
                                                             None, "complete"),
    "cut, backup refuses prefills, greedy": ("primary", ("thinking",), "reset", {"temperature": 0}, None,
                                             "complete"),
    "stall, backup unknown, greedy": ("primary", ("unknown",), "stall", {"temperature": 0}, None, "complete"),
    "cut, backup unknown, seeded": ("primary", ("unknown",), "reset", {"temperature": 0.7, "seed": 3}, None,
                                    "complete"),
    "cut, backup unknown, sampled": ("primary", ("unknown",), "reset", {"temperature": 0.8}, None,
                                     "StreamInterruptedError"),
}


def whole(text: str, sampled: bool) -> bool:
    words = text.split(" ")
    if not sampled:
        return text == ANSWER
    return len(words) == len(WORDS) and words[0] == WORDS[0] and words[2:] == WORDS[2:]


def run_case(srv: Dict[str, Any], name: str, runs: int, clock: Callable[[], float]) -> Dict[str, Any]:
    first, backups, fault, params, declared, expected = CASES[name]
    sampled = params.get("temperature") != 0 and "seed" not in params
    times: List[float] = []
    outcomes: List[str] = []
    paths: List[str | None] = []
    for _ in range(runs):
        for server in srv.values():
            server.reset()
        with L.Client(config=config(srv, first, *backups, declared=declared)) as client:
            engine = client._engine
            engine.identify([engine.deployment(f"{n}:m") for n in (first, *backups)])
            engine.identities.wait([first, *backups], timeout_s=5.0)  # identified before the clock starts
            cut(srv[first], fault)
            started = clock()
            try:
                stream = client.chat.completions.create(model="t", messages=MESSAGES, stream=True, **params)
                text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
                outcomes.append("complete" if whole(text, sampled) else "WRONG TEXT")
                paths.append(stream.response.route.recovery)
            except E.StreamInterruptedError as error:
                outcomes.append("StreamInterruptedError" if len(error.partial_text.split(" ")) == CUT_AT
                                else "WRONG PARTIAL")
                paths.append(None)
            times.append(clock() - started)
    return {"case": name, "expected": expected, "outcomes": sorted(set(outcomes)),
            "ok": all(o == expected for o in outcomes), "paths": sorted({str(p) for p in paths}),
            "median_s": statistics.median(times), "max_s": max(times), "runs": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", default=str(ROOT / "benchmarks" / "out" / "cut_answers.json"))
    args = parser.parse_args()
    srv = servers()
    try:
        rows = [run_case(srv, name, args.runs, time.monotonic) for name in CASES]
    finally:
        for server in srv.values():
            server.stop()
    base = rows[0]["median_s"]
    print("| case | outcome (expected) | finished by | median s | max s | x no fault |")
    print("|---|---|---|---:|---:|---:|")
    for row in rows:
        mark = "" if row["ok"] else " **UNEXPECTED**"
        print(f"| {row['case']} | {', '.join(row['outcomes'])} ({row['expected']}){mark} | {', '.join(row['paths'])} "
              f"| {row['median_s']:.3f} | {row['max_s']:.3f} | {row['median_s'] / base:.1f} |")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
