"""SSE decoding: the same events whatever way the bytes are split, every line ending, comments."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmroute import errors as E
from llmroute._http.sse import SSEDecoder
from tests.splits import split_at

STREAM = (
    'data: {"a":1}\n\n'
    ": keep-alive comment\n"
    "id:7\r\nevent:result\r\n:HTTP_STATUS/200\r\ndata:{\"b\":\"中文\"}\r\n\r\n"
    "data: line1\ndata: line2\n\n"
    "data: [DONE]\n\n"
).encode()


def decode_all(parts):
    decoder = SSEDecoder()
    events = []
    for part in parts:
        events.extend(decoder.feed(part))
    events.extend(decoder.close())
    return events


def test_whole_stream():
    events = decode_all([STREAM])
    assert [e.data for e in events] == ['{"a":1}', '{"b":"中文"}', "line1\nline2", "[DONE]"]
    assert events[1].event == "result" and events[1].id == "7"
    assert "HTTP_STATUS/200" in events[1].comments


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_any_split_gives_same_events(cuts):
    assert decode_all(split_at(STREAM, cuts)) == decode_all([STREAM])


def test_cr_only_line_endings_split_between_cr_and_lf():
    decoder = SSEDecoder()
    out = decoder.feed(b"data: x\r")
    out += decoder.feed(b"\n\r\n")
    assert [e.data for e in out] == ["x"]


def test_unterminated_last_event_is_flushed_on_close():
    decoder = SSEDecoder()
    assert decoder.feed(b'event:result\ndata:{"done":true}') == []
    events = decoder.close()
    assert [e.data for e in events] == ['{"done":true}']


LF_STREAM = (
    'data: {"n":1}\n\ndata: {"n":2}\n\n'  # a run of one-line events: the fast split
    "id: 9\ndata: after-id\n\n"
    'data: {"n":3}\n\n'  # keeps the last event id
    ": ping\n\ndata:no-space\n\n\n\ndata: \n\n"
    "data: multi\ndata: line\n\n"
    'data: {"t":"中文"}\n\ndata: [DONE]\n\n'
).encode()
LF_EVENTS = [('{"n":1}', None), ('{"n":2}', None), ("after-id", "9"), ('{"n":3}', "9"), ("no-space", "9"),
             ("", "9"), ("multi\nline", "9"), ('{"t":"中文"}', "9"), ("[DONE]", "9")]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(LF_STREAM)), max_size=12))
def test_lf_only_streams_split_anywhere_give_the_events_the_spec_says(cuts):
    assert [(e.data, e.id) for e in decode_all(split_at(LF_STREAM, cuts))] == LF_EVENTS


def test_the_line_cap_holds_for_one_event_a_read_and_for_a_run_of_events() -> None:
    assert [e.data for e in SSEDecoder(max_line=1024).feed(b"data: " + b"x" * 1023 + b"\n\n")] == ["x" * 1023]
    for body in (b"data: " + b"x" * 1024 + b"\n\n", b"data: a\n\ndata: " + b"x" * 1024 + b"\n\n"):
        with pytest.raises(E.ResponseTooLargeError):
            SSEDecoder(max_line=1024).feed(body)
