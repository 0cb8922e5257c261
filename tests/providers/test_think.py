"""Inline <think> tags: split the same way whole or streamed, however the pieces are cut."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from llmroute.providers.think import ThinkSplitter, split_think
from tests.splits import split_at

TEXT = "<think>Let me add 2 and 2.\nIt is 4.</think>\n\nThe answer is 4."


def stream_split(parts):
    splitter = ThinkSplitter()
    thought, answer = "", ""
    for part in parts:
        t, a = splitter.feed(part)
        thought += t
        answer += a
    t, a = splitter.flush()
    return thought + t, answer + a


def test_whole():
    assert split_think(TEXT) == ("Let me add 2 and 2.\nIt is 4.", "The answer is 4.")
    assert split_think("No thinking <think>here</think>") == (None, "No thinking <think>here</think>")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(TEXT)), max_size=10))
def test_stream_equals_whole(cuts):
    assert stream_split(split_at(TEXT, cuts)) == split_think(TEXT)


def test_answer_without_think_passes_through():
    assert stream_split(["Hel", "lo <", "think>"]) == ("", "Hello <think>")


def test_unclosed_think_is_all_reasoning():
    assert stream_split(["<think>still ", "thinking"]) == ("still thinking", "")


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([TEXT, "The answer.", "  <think>x</think>", "<thi", "\n\n<think>a</think>\n\nb"]),
       st.lists(st.integers(min_value=0, max_value=40), max_size=8))
def test_once_answering_every_piece_passes_through_unchanged(text, cuts):
    # `answering` lets the stream decoder skip `feed` per chunk: it must only be True when `feed`
    # would hand the piece back as it came.
    parts = split_at(text, [c for c in cuts if c <= len(text)])
    splitter = ThinkSplitter()
    for part in parts:
        if splitter.answering:
            assert splitter.feed(part) == ("", part)
        else:
            splitter.feed(part)
    if splitter.answering:
        assert splitter.feed(" more") == ("", " more") and splitter.flush() == ("", "")
