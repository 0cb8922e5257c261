"""A call's `request_id` (`_call.prepared.prepare_call`): 32 hex digits, never repeated within a
process, across a fork, or across runs of an application that seeds `random`."""

from __future__ import annotations

import os
import random
import re

import pytest

from llmroute._call.prepared import prepare_call
from llmroute.config import Config

CONFIG = Config.from_dict({"providers": {"p": {"kind": "vllm", "base_url": "http://127.0.0.1:9/v1"}},
                           "tiers": {"t": {"deployments": ["p:m"]}},
                           "pricing": {"p:m": {"input_per_million": 0, "output_per_million": 0}}})
ARGS = {"model": "t", "messages": [{"role": "user", "content": "hi"}]}


def _id() -> str:
    return prepare_call(CONFIG, dict(ARGS)).request_id


def test_ids_are_32_hex_digits_and_do_not_repeat() -> None:
    ids = {_id() for _ in range(10_000)}
    assert len(ids) == 10_000
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)


def test_seeding_random_does_not_repeat_ids() -> None:
    random.seed(7)
    first = _id()
    random.seed(7)
    assert _id() != first


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX fork")
def test_a_forked_child_draws_other_ids_than_its_parent() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next id, to the parent
        os.write(write, _id().encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child = os.read(read, 64).decode()
    os.close(read)
    assert re.fullmatch(r"[0-9a-f]{32}", child)
    assert child != _id()
