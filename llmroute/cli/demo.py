"""`llmroute demo`: the main job on the embedded default, with no API keys.

Two real llama.cpp servers on 127.0.0.1 stand in for the small and large tiers (both serve the
bundled Gemma 3 270M base model, so the answers are poor: the point is the machinery). A few calls,
streamed and not, sync and async, each printed with what was asked, the answer, the route and the
usage. Needs the `local` extra.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from typing import Any, Dict, List

from llmroute.client import AsyncClient, Client
from llmroute.errors import LLMRouteError
from llmroute.cli.local import LocalServer
from llmroute._runtime.cli_help import with_defaults

__all__ = ["main", "demo_config", "clean_answer"]

# The embedded server serves the model with Gemma's turn format, whose end marker stops generation
# (llmroute/cli/local.py), so no marker reaches the answer. These stops guard a server started with
# llama.cpp's ChatML fallback, where the base model writes the ChatML markers out as text.
STOP = ["<|im_end|>", "<|im_start|>"]

def clean_answer(text: str) -> str:
    """The answer as a reader should see it: without ChatML markers the model wrote out, and without
    the first characters of one that `max_tokens` cut (the stop strings cannot match half a marker)."""
    for marker in STOP:
        text = text.replace(marker, "")
    for marker in STOP:
        for n in range(len(marker) - 1, 0, -1):
            if text.endswith(marker[:n]):
                text = text[:-n]
                break
    return text.strip()


NOTE = (
    "Note: both tiers serve Gemma 3 270M, a tiny *base* model with no chat template, so its answers are poor.\n"
    "What you see working is the real machinery: routing, streaming, usage, errors, against real servers."
)


def demo_config(small_url: str, large_url: str, ledger_path: str | None = None) -> Dict[str, Any]:
    config: Dict[str, Any] = {
        "providers": {
            "local-small": {"kind": "llamacpp", "base_url": small_url},
            "local-large": {"kind": "llamacpp", "base_url": large_url},
        },
        "tiers": {
            "small": {"deployments": ["local-small:gemma-3-270m"]},
            "large": {"deployments": ["local-large:gemma-3-270m"], "fallback_tier": "small"},
        },
        "routing": {
            "default": "auto",
            "threshold": 0.55,
            "rules": [{"when": {"feature": "report-generation"}, "tier": "large"}],
        },
        # Self-hosted servers cost what your hardware costs: these are illustrative per-token rates
        # a team would set from its GPU bill, so that reports can compare features.
        "pricing": {
            "local-small:*": {"input_per_million": 0.05, "output_per_million": 0.10, "currency": "USD"},
            "local-large:*": {"input_per_million": 0.60, "output_per_million": 0.80, "currency": "USD"},
        },
        "ledger": {"sink": "sqlite", "path": ledger_path} if ledger_path else {"sink": "memory"},
    }
    return config


def _show(title: str, asked: str, answer: str, resp: Any) -> None:
    route = resp.route
    usage = resp.usage
    print(f"\n== {title}")
    print(f"asked : {asked}")
    print(f"answer: {clean_answer(answer)[:300]!r}")
    print(f"route : tier={route.tier} deployment={route.deployment} provider={route.provider} reason={route.reason!r}"
          + (f" score={route.score:.2f}" if route.score is not None else ""))
    print(f"usage : prompt={usage.prompt_tokens} completion={usage.completion_tokens} "
          f"cached={usage.prompt_tokens_details.cached_tokens} estimated={route.usage_estimated}")
    cost = getattr(resp, "cost", None)
    if cost is not None:
        print(f"cost  : {cost.amount} {cost.currency} (estimated={cost.estimated}, prices {cost.price_version})")
    attempts = ", ".join(f"{a.deployment}:{a.status}" + (f"({a.ttft_s * 1000:.0f} ms TTFT)" if a.ttft_s else "")
                         for a in route.attempts)
    print(f"tries : {attempts}")


async def _async_part(config: Dict[str, Any]) -> None:
    async with AsyncClient(config=config) as client:
        questions = ["Classify the sentiment: 'I love this phone'", "把这句话翻译成英文：今天天气很好"]
        started = time.perf_counter()
        results = await asyncio.gather(*[
            client.chat.completions.create(model="auto", messages=[{"role": "user", "content": q}], max_tokens=24,
                                           stop=STOP, feature="async-demo")
            for q in questions
        ])
        print(f"\n== async: {len(questions)} concurrent calls in {time.perf_counter() - started:.2f}s")
        for q, r in zip(questions, results):
            _show("async call", q, r.choices[0].message.content or "", r)


def run(small_url: str, large_url: str, ledger_path: str | None) -> int:
    config = demo_config(small_url, large_url, ledger_path)
    print(NOTE)
    with Client(config=config) as client:
        asked = "提取这句话的关键词：今天上海下雨了"
        resp = client.chat.completions.create(
            model="small", messages=[{"role": "user", "content": asked}], max_tokens=32, temperature=0.2, stop=STOP,
            feature="keyword-extraction",
        )
        _show("non-streamed call, model='small'", asked, resp.choices[0].message.content or "", resp)

        asked = "Write a Python function that checks whether a string is a palindrome, and explain it."
        print("\n== streamed call, model='large' (tokens as they arrive):")
        with client.chat.completions.create(
            model="large", messages=[{"role": "user", "content": asked}], max_tokens=48, stream=True, stop=STOP,
            feature="coding-help",
        ) as stream:
            parts: List[str] = []
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    parts.append(chunk.choices[0].delta.content)
                    print(chunk.choices[0].delta.content, end="", flush=True)
        print()
        _show("streamed call, assembled", asked, "".join(parts), stream.response)

        for asked in ["Hi! What are your opening hours?",
                      "请写一篇2000字的报告，分析新能源汽车行业的竞争格局，并给出三条投资建议。"]:
            resp = client.chat.completions.create(
                model="auto", messages=[{"role": "user", "content": asked}], max_tokens=24, stop=STOP, feature="auto-demo"
            )
            _show("model='auto' (the router picks the tier)", asked, resp.choices[0].message.content or "", resp)

        print("\n== a typed error: a prompt longer than the server's context window")
        try:
            client.chat.completions.create(model="small", messages=[{"role": "user", "content": "word " * 5000}],
                                           max_tokens=8, feature="too-long-demo")
        except LLMRouteError as exc:
            print(f"{type(exc).__name__}: {exc}")
    asyncio.run(_async_part(config))
    if ledger_path:
        from llmroute.accounting.report import report  # loaded when the command runs, not at import

        rows = report(ledger_path, by=("feature",))
        print(f"\n== cost per feature, from the ledger at {ledger_path}")
        for row in rows:
            print(f"{str(row.get('feature')):<20} requests={row['requests']:<3} input={row['input_tokens']:<5} "
                  f"output={row['output_tokens']:<5} cost={row['cost']} {row['currency']}")
        print(f"(llmroute report --ledger {ledger_path} --by feature,tier --format html --out report.html)")
    print("\n" + NOTE)
    return 0


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="llmroute demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--small-url", help="use a running server for the small tier instead of starting one")
    parser.add_argument("--large-url", help="use a running server for the large tier instead of starting one")
    parser.add_argument("--ledger", help="ledger file (default: a temporary file)")
    args = with_defaults(parser).parse_args(argv)
    ledger = args.ledger or os.path.join(tempfile.mkdtemp(prefix="llmroute-demo-"), "ledger.db")
    servers = []
    try:
        urls = []
        for given, name in ((args.small_url, "small"), (args.large_url, "large")):
            if given:
                urls.append(given)
                continue
            print(f"starting the local llama.cpp server for the {name} tier ...", flush=True)
            server = LocalServer().start()
            servers.append(server)
            urls.append(server.base_url)
        return run(urls[0], urls[1], ledger)
    except LLMRouteError as exc:
        print(f"llmroute demo: {exc}", file=sys.stderr)
        return 1
    finally:
        for server in servers:
            server.stop()


if __name__ == "__main__":
    sys.exit(main())
