"""Every cut answer finished with the default settings (issue 24): the matrix.

A tier of `openai-compatible` deployments (what a self-hosted fleet looks like from the client), no
`continue_prefill` anywhere, the shipped resilience defaults (only the primary's stall limit is short,
so a stall test takes half a second). Every server answers like a model (`OpenAICompatServer.answer`):
a greedy request gets ANSWER word for word, a sampled one a variant whose second word differs per
request; each continues a prefill the way its real server does (vLLM and SGLang with
`continue_final_message`, llama.cpp a trailing assistant message, an unknown server not at all, a
refusing one with a 400). The primary ("a", an unidentifiable server) is cut or stalls after 40 of
60 words. Each case must end with the whole answer, nothing repeated, nothing missing; the one case
that cannot (a sampled request whose only backup neither continues nor repeats it) ends in
`StreamInterruptedError` carrying the text the caller saw.
"""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from llmroute import errors as E
from tests.resilience.client_helpers import MESSAGES, TIER, Caller, TimedFaultServer, dep, sent, tier_config
from tests.servers.fault import reset_during
from tests.servers.llamacpp_wire import LlamaCppWireServer
from tests.servers.script import Reply
from tests.servers.sglang import SGLangServer
from tests.servers.tgi import TGIServer
from tests.servers.vllm import VLLMServer

WORDS = ("The quick brown fox jumps over the lazy dog while the farmer counts his sheep near the old stone "
         "bridge and the river runs slowly past the mill where children play with paper boats under a pale "
         "autumn sky full of birds that sing their evening songs before the night comes down over the quiet "
         "little village").split(" ")[:60]
ANSWER = " ".join(WORDS)
CUT_AT = 40
SEEN = " ".join(WORDS[:CUT_AT])  # what the caller saw when the primary broke
GREEDY = {"temperature": 0}
SAMPLED = {"temperature": 0.8}
STREAMS = ["sync-stream", "async-stream"]
A = dep("a")
# The primary's limits only: a stall is noticed within 2 s (the read timeout is the first-token limit,
# docs/failover.md rule 3), its first word may take 2 s.
PRIMARY_LIMITS = {"ttft_timeout_s": 2.0, "stall_timeout_s": 0.5}

BACKUPS = {
    "vllm": lambda: VLLMServer(models={"m": 32_768}),
    "sglang": lambda: SGLangServer(models={"m": 32_768}),
    "llamacpp": lambda: LlamaCppWireServer(),
    "llamacpp_thinking": lambda: LlamaCppWireServer(refuse_prefill=True),
    "tgi": lambda: TGIServer(),
    "unknown": lambda: TimedFaultServer(),  # says nothing about itself; reads a prefill as history
}


@pytest.fixture(scope="module")
def fleet() -> Iterator[dict[str, Any]]:
    servers: dict[str, Any] = {"a": TimedFaultServer(), **{name: make() for name, make in BACKUPS.items()}}
    for server in servers.values():
        server.answer = ANSWER
        server.start()
    yield servers
    for server in servers.values():
        server.stop()


@pytest.fixture
def servers(fleet: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for server in fleet.values():
        server.reset()
    yield fleet
    for server in fleet.values():
        server.reset()


def config(servers: dict[str, Any], *backups: str, primary: dict[str, Any] | None = None) -> dict[str, Any]:
    """Tier t: the primary "a" then `backups`, all `openai-compatible`, the shipped resilience defaults."""
    chosen = {"a": servers["a"], **{b: servers[b] for b in backups}}
    deployments: list[Any] = [{"id": A, **PRIMARY_LIMITS, **(primary or {})}] + [dep(b) for b in backups]
    cfg = tier_config(chosen, deployments=deployments)
    cfg["resilience"] = {}  # the defaults, not the QUIET test layer
    return cfg


def cut(servers: dict[str, Any], how: str = "reset") -> None:
    """The primary's next answer breaks after CUT_AT words: a connection reset, or a 20 s stall."""
    if how == "reset":
        servers["a"].push(reset_during(CUT_AT, gap_s=0.002))
    else:
        gaps = [0.002] * (len(WORDS) - 1)
        gaps[CUT_AT - 1] = 20.0
        servers["a"].push(Reply(gap_s=gaps))


def chunks_of(caller: Caller, **kwargs: Any) -> tuple[list[Any], Any]:
    """Stream one call: (the chunks the caller got, the stream)."""
    kwargs = {"model": TIER, "messages": MESSAGES, **kwargs}
    if caller.is_async:
        async def collect() -> tuple[list[Any], Any]:
            stream = await caller.client.chat.completions.create(stream=True, **kwargs)
            return [c async for c in stream], stream
        return caller.loop.run_until_complete(collect())  # type: ignore[union-attr]
    stream = caller.client.chat.completions.create(stream=True, **kwargs)
    return list(stream), stream


def content(chunks: list[Any]) -> list[Any]:
    return [c for c in chunks if c.choices and c.choices[0].delta.content]


def text(chunks: list[Any]) -> str:
    return "".join(c.choices[0].delta.content for c in content(chunks))


def sampled_whole(seen: str) -> bool:
    """A sampled answer is whole: 60 words, the primary's variant of word 2, then ANSWER's words."""
    words = seen.split(" ")
    return len(words) == len(WORDS) and words[0] == WORDS[0] and words[2:] == WORDS[2:] \
        and words[1].startswith(WORDS[1] + "~")


def resumed_once_at(chunks: list[Any], offset: int) -> bool:
    """Exactly one chunk is marked resumed, and it starts at `offset` of the text the caller saw."""
    flagged = [i for i, c in enumerate(content(chunks)) if c.resumed]
    return len(flagged) == 1 and len(text(content(chunks)[:flagged[0]])) == offset


# ---------------------------------------------------------------------------------------------
# a backup that is really vLLM, SGLang or llama.cpp: identified, and the answer continued on it


@pytest.mark.parametrize("mode", STREAMS)
@pytest.mark.parametrize("backup", ["vllm", "sglang", "llamacpp"])
@pytest.mark.parametrize("how", ["reset", "stall"])
@pytest.mark.parametrize("sampling", ["greedy", "sampled"])
def test_an_unknown_openai_compatible_backup_that_can_continue_is_identified_and_continues(
        servers, mode, backup, how, sampling):
    cut(servers, how)
    with Caller(mode, config(servers, backup)) as caller:
        chunks, stream = chunks_of(caller, **(GREEDY if sampling == "greedy" else SAMPLED))
        identity = caller.client._engine.identities.known(backup)
    seen = text(chunks)
    assert seen == ANSWER if sampling == "greedy" else sampled_whole(seen), seen
    assert identity is not None and identity.server == backup  # asked once per process (the first such test)
    assert all(p.method == "GET" for p in servers[backup].probes)
    before_cut = " ".join(seen.split(" ")[:CUT_AT])  # SEEN, or its sampled variant
    route = stream.response.route
    assert sent(route) == [(A, "interrupted"), (dep(backup), "ok")]
    assert route.recovery == "continued" and route.resumed_at == [len(before_cut)]
    assert [a.recovery for a in route.attempts] == [None, "continued"]
    assert resumed_once_at(chunks, len(before_cut))
    last = servers[backup].requests[-1].json
    assert last["messages"][-1] == {"role": "assistant", "content": before_cut}
    if backup != "llamacpp":
        assert last["continue_final_message"] is True and last["add_generation_prompt"] is False
    assert stream.response.choices[0].message.content == seen


def test_the_real_llama_cpp_server_behind_openai_compatible_is_identified_and_continues(servers, llama_server):
    from llmroute.cli.local import MODEL_ALIAS

    cut(servers)
    cfg = config(servers)
    cfg["providers"]["local"] = {"kind": "openai-compatible", "base_url": llama_server.base_url}
    cfg["pricing"]["local:*"] = {"input_per_million": 0, "output_per_million": 0}
    cfg["tiers"][TIER]["deployments"].append(f"local:{MODEL_ALIAS}")
    with Caller("sync-stream", cfg) as caller:
        chunks, stream = chunks_of(caller, max_tokens=CUT_AT + 8, **GREEDY)  # about 8 left for llama.cpp
        identity = caller.client._engine.identities.known("local")
    assert identity is not None and identity.server == "llamacpp", (identity, stream.response.route)
    route = stream.response.route
    assert sent(route) == [(A, "interrupted"), (f"local:{MODEL_ALIAS}", "ok")]
    assert route.recovery == "continued" and text(chunks).startswith(SEEN) and len(text(chunks)) > len(SEEN)


# ---------------------------------------------------------------------------------------------
# no backup can continue: a greedy request is replayed, verified, and only the rest delivered


@pytest.mark.parametrize("mode", STREAMS)
@pytest.mark.parametrize("backup", ["unknown", "tgi", "llamacpp_thinking"])
@pytest.mark.parametrize("how", ["reset", "stall"])
def test_a_greedy_stream_is_replayed_where_no_backup_can_continue(servers, mode, backup, how):
    cut(servers, how)
    with Caller(mode, config(servers, backup)) as caller:
        chunks, stream = chunks_of(caller, **GREEDY)
        ledger = caller.client._engine.ledger.records
    assert text(chunks) == ANSWER  # the rest only: nothing the caller had is repeated
    assert resumed_once_at(chunks, len(SEEN))
    route = stream.response.route
    assert route.recovery == "replayed" and route.resumed_at == [len(SEEN)]
    attempts = [(a.deployment, a.status, a.recovery) for a in route.attempts if a.status != "skipped"]
    if backup == "llamacpp_thinking":  # identified as llama.cpp, refuses the prefill, then replays
        assert attempts == [(A, "interrupted", None), (dep(backup), "error", "continued"),
                            (dep(backup), "ok", "replayed")]
    else:
        assert attempts == [(A, "interrupted", None), (dep(backup), "ok", "replayed")]
    replay = route.attempts[-1]
    assert replay.usage.completion_tokens == len(WORDS)  # the replay produced (and is billed for) it all
    billed = [a for a in route.attempts if a.billed]
    assert billed[0].deployment == A and billed[0].usage.completion_tokens > 0
    assert stream.response.usage.completion_tokens == sum(a.usage.completion_tokens for a in billed)
    assert [r.recovery for r in ledger if r.status != "skipped"][-1] == "replayed"
    assert stream.response.choices[0].message.content == ANSWER


@pytest.mark.parametrize("mode", STREAMS)
def test_a_seeded_sampled_request_counts_as_repeatable(servers, mode):
    # A seed makes the loopback model (and vLLM, SGLang, llama.cpp) repeat the same answer.
    cut(servers)
    with Caller(mode, config(servers, "unknown")) as caller:
        chunks, stream = chunks_of(caller, temperature=0.7, seed=7)
    assert text(chunks) == ANSWER and stream.response.route.recovery == "replayed"


# ---------------------------------------------------------------------------------------------
# a sampled request whose only backup can neither continue nor repeat it: the one clean error


@pytest.mark.parametrize("mode", STREAMS)
@pytest.mark.parametrize("backup", ["unknown", "llamacpp_thinking"])
def test_a_sampled_stream_with_no_backup_able_to_finish_it_raises_with_the_text_so_far(servers, mode, backup):
    cut(servers)
    with Caller(mode, config(servers, backup)) as caller:
        seen: list[Any] = []
        with pytest.raises(E.StreamInterruptedError) as info:
            if caller.is_async:
                async def collect() -> None:
                    stream = await caller.client.chat.completions.create(
                        model=TIER, messages=MESSAGES, stream=True, **SAMPLED)
                    async for c in stream:
                        seen.append(c)
                caller.loop.run_until_complete(collect())  # type: ignore[union-attr]
            else:
                for c in caller.client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True,
                                                               **SAMPLED):
                    seen.append(c)
    error = info.value
    assert error.partial_text == text(seen) and len(error.partial_text.split(" ")) == CUT_AT
    assert not isinstance(error, E.ReplayDivergedError)
    # the unknown server is not even asked; the thinking llama.cpp is asked once to continue, and refuses
    assert len(servers[backup].chat_requests()) == (0 if backup == "unknown" else 1)
    notes = [a.note or "" for a in error.attempts if a.deployment == dep(backup)]
    assert notes and ("cannot continue" in notes[-1] or "prefill" in (error.attempts[-1].error_message or ""))


@pytest.mark.parametrize("mode", STREAMS)
def test_stream_recovery_replay_opts_a_sampled_request_in_and_a_divergence_is_the_cut(servers, mode):
    """Opted in, a sampled request is replayed too; its replay differs at word 2, so nothing of it is
    delivered and the caller gets the cut, with both attempts priced in the ledger."""
    cut(servers)
    cfg = config(servers, "unknown")
    cfg["tiers"][TIER]["stream_recovery"] = "replay"
    with Caller(mode, cfg) as caller:
        seen: list[Any] = []
        with pytest.raises(E.StreamInterruptedError) as info:
            if caller.is_async:
                async def collect() -> None:
                    stream = await caller.client.chat.completions.create(
                        model=TIER, messages=MESSAGES, stream=True, **SAMPLED)
                    async for c in stream:
                        seen.append(c)
                caller.loop.run_until_complete(collect())  # type: ignore[union-attr]
            else:
                for c in caller.client.chat.completions.create(model=TIER, messages=MESSAGES, stream=True,
                                                               **SAMPLED):
                    seen.append(c)
        ledger = caller.client._engine.ledger.records
    error = info.value
    assert error.partial_text == text(seen) == " ".join(error.partial_text.split(" ")[:CUT_AT])
    replay = [a for a in error.attempts if a.deployment == dep("unknown")][-1]
    assert replay.recovery == "replayed" and replay.error_type == "ReplayDivergedError"
    # it differs in the sample number of word 2 ("quick~3" against "quick~4"), the first thing it may
    assert isinstance(replay.error, E.ReplayDivergedError)
    assert len("The quick~") <= replay.error.offset < len("The quick~") + 3
    assert replay.error.expected == error.partial_text[replay.error.offset:][:20]
    billed = [r for r in ledger if r.output_tokens > 0]
    assert [(r.deployment, r.status) for r in billed] == [(A, "interrupted"), (dep("unknown"), "error")]
    assert all(r.priced and r.cost is not None for r in billed)


# ---------------------------------------------------------------------------------------------
# continuing on the same deployment, and the settings that still win


@pytest.mark.parametrize("mode", STREAMS)
@pytest.mark.parametrize("recovery", ["auto", "continue"])
def test_a_cut_is_continued_on_the_same_deployment_when_it_is_the_one_able_to(servers, mode, recovery):
    """The primary is really vLLM (identified) and the only deployment that can continue; its
    connection breaks once: the answer is continued there, as a retry within the budget."""
    servers["vllm"].push(reset_during(CUT_AT, gap_s=0.002))
    cfg = tier_config({"v": servers["vllm"], "unknown": servers["unknown"]},
                      deployments=[dep("v"), dep("unknown")], tier={"stream_recovery": recovery})
    cfg["resilience"] = {}
    with Caller(mode, cfg) as caller:
        caller.client._engine.identify([caller.client._engine.deployment(dep("v"))])
        caller.client._engine.identities.wait(["v"])  # identified before the call: the cut needs no wait
        chunks, stream = chunks_of(caller, **SAMPLED)
    route = stream.response.route
    assert sampled_whole(text(chunks))
    assert [(a.deployment, a.status, a.recovery) for a in route.attempts] == [
        (dep("v"), "interrupted", None), (dep("v"), "ok", "continued")]
    assert route.attempts[1].number == 2 and "retry" in (route.attempts[1].note or "")
    assert servers["unknown"].chat_requests() == []


@pytest.mark.parametrize("setting", [False, True])
def test_an_explicit_continue_prefill_wins_over_identification(servers, setting):
    cut(servers)
    cfg = config(servers, "vllm")
    cfg["tiers"][TIER]["deployments"][1] = {"id": dep("vllm"), "continue_prefill": setting}
    with Caller("sync-stream", cfg) as caller:
        chunks, stream = chunks_of(caller, **GREEDY)
    assert text(chunks) == ANSWER
    # false: vLLM is not asked to continue (and not even identified); the greedy answer is replayed
    assert stream.response.route.recovery == ("continued" if setting else "replayed")
    assert servers["vllm"].probes == []


def test_stream_recovery_continue_never_replays(servers):
    cut(servers)
    cfg = config(servers, "unknown")
    cfg["tiers"][TIER]["stream_recovery"] = "continue"
    with Caller("sync-stream", cfg) as caller, pytest.raises(E.StreamInterruptedError) as info:
        chunks_of(caller, **GREEDY)
    assert info.value.partial_text == SEEN and servers["unknown"].chat_requests() == []


def test_a_cut_answer_longer_than_replay_max_chars_is_not_replayed(servers):
    cut(servers)
    cfg = config(servers, "unknown")
    cfg["tiers"][TIER]["resilience"] = {"replay_max_chars": len(SEEN) - 1}
    with Caller("sync-stream", cfg) as caller, pytest.raises(E.StreamInterruptedError) as info:
        chunks_of(caller, **GREEDY)
    assert info.value.partial_text == SEEN and servers["unknown"].chat_requests() == []


def test_a_replay_is_only_tried_within_the_model_family_by_default(servers):
    cut(servers)
    cfg = config(servers, "unknown")
    cfg["tiers"][TIER]["deployments"][1] = "unknown:another-model"
    with Caller("sync-stream", cfg) as caller, pytest.raises(E.StreamInterruptedError) as info:
        chunks_of(caller, **GREEDY)
    assert servers["unknown"].chat_requests() == []
    assert "nor repeat it" in (info.value.attempts[-1].note or "")


@pytest.mark.parametrize("mode", STREAMS)
def test_a_continuation_that_fails_before_its_text_is_retried_as_a_continuation(servers, mode):
    """The backup (really vLLM) answers the continuation with a 503 once: the retry asks it to
    continue again; sent as a fresh request it would have delivered the answer from its start."""
    cut(servers)
    servers["vllm"].push(Reply(error="overloaded"))
    with Caller(mode, config(servers, "vllm")) as caller:
        chunks, stream = chunks_of(caller, **GREEDY)
    assert text(chunks) == ANSWER
    route = stream.response.route
    assert [(a.deployment, a.status, a.recovery) for a in route.attempts] == [
        (A, "interrupted", None), (dep("vllm"), "error", "continued"), (dep("vllm"), "ok", "continued")]
    assert all(r.json["messages"][-1] == {"role": "assistant", "content": SEEN} for r in servers["vllm"].chat_requests())
