"""The semantic cache with a real multilingual embedding model behind a loopback /v1/embeddings server:
a paraphrase is served the cached answer, a near-miss is not, scopes hold, a failing embedder is a miss."""

from __future__ import annotations

import asyncio


from llmroute import AsyncClient, Client
from tests.cache.conftest import cache_config


def semantic_config(vllm_server, embedding_server, **semantic):
    # 0.8, below the default (0.95, see docs/cache.md), so that these paraphrases are served.
    semantic = {"enabled": True, "base_url": embedding_server.base_url, "model": "use-m3", "threshold": 0.8,
                **semantic}
    return cache_config(vllm_server, cache={"semantic": semantic})


def ask(client, text, **kw):
    return client.chat.completions.create(model="t", messages=[{"role": "system", "content": "FAQ bot."},
                                                               {"role": "user", "content": text}],
                                          temperature=0, **kw)


def test_a_paraphrase_hits_and_a_near_miss_does_not(vllm_server, embedding_server):
    embedding_server.fail_with = None
    with Client(config=semantic_config(vllm_server, embedding_server)) as client:
        first = ask(client, "How do I reset my password?", feature="faq")
        para = ask(client, "What are the steps to reset my account password?", feature="faq")
        zh_first = ask(client, "怎么取消我的订阅？", feature="faq")
        zh_para = ask(client, "如何取消订阅？", feature="faq")
        near = ask(client, "How do I reset my router?", feature="faq")
        other_tenant = ask(client, "What are the steps to reset my account password?", feature="faq",
                           metadata={"tenant": "b"})
        other_params = ask(client, "What are the steps to reset my account password?", feature="faq", max_tokens=3)
        records = client._engine.ledger.records
    assert first.route.cache == "miss" and zh_first.route.cache == "miss"
    assert para.route.cache == "semantic-hit" and para.route.cache_similarity >= 0.8
    assert para.choices[0].message.content == first.choices[0].message.content
    assert zh_para.route.cache == "semantic-hit"
    assert near.route.cache == "miss" and near.route.cache_similarity < para.route.cache_similarity
    assert other_tenant.route.cache == "miss" and other_params.route.cache == "miss"
    hits = [r for r in records if r.cache == "semantic-hit"]
    assert len(hits) == 2 and all(r.cost == 0 and r.cost_saved > 0 for r in hits)
    assert len(vllm_server.chat_requests()) == 5


def test_a_failing_embedder_leaves_exact_caching_working(vllm_server, embedding_server):
    embedding_server.fail_with = 503
    try:
        with Client(config=semantic_config(vllm_server, embedding_server)) as client:
            outcomes = [ask(client, q).route.cache for q in
                        ("How do I reset my password?", "How do I reset my password?", "I forgot my password, how can I reset it?")]
            failures = client.cache.embedder.failures
    finally:
        embedding_server.fail_with = None
    assert outcomes == ["miss", "hit", "miss"] and failures == 2


def test_async_semantic_lookup(vllm_server, embedding_server):
    embedding_server.fail_with = None

    async def main():
        async with AsyncClient(config=semantic_config(vllm_server, embedding_server), transport="httpx") as client:
            await ask(client, "Do you offer a student discount?")
            return await ask(client, "Is there a discount for students?")

    assert asyncio.run(main()).route.cache == "semantic-hit"


def test_the_numbers_guard_keeps_a_question_about_another_product_out(vllm_server, embedding_server):
    embedding_server.fail_with = None
    outcomes = {}
    for guard in (True, False):
        with Client(config=semantic_config(vllm_server, embedding_server, match_numbers=guard)) as client:
            ask(client, "Does the X200 phone support wireless charging?")
            other = ask(client, "Does the X300 phone support wireless charging?")
            outcomes[guard] = (other.route.cache, other.route.cache_similarity)
    assert outcomes[True][0] == "miss"
    assert outcomes[False][0] == "semantic-hit" and outcomes[False][1] >= 0.8  # what the guard prevents


def test_the_default_threshold_is_the_measured_one():
    from llmroute.cache.cache_policy import SemanticConfig

    assert SemanticConfig().threshold == 0.95 and SemanticConfig().enabled is False
