"""SSE decoding: the same events whatever way the bytes are split, every line ending, comments."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from llmroute._http.sse import SSEDecoder

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
    cuts = sorted(set(cuts))
    parts, last = [], 0
    for cut in cuts:
        parts.append(STREAM[last:cut])
        last = cut
    parts.append(STREAM[last:])
    assert decode_all(parts) == decode_all([STREAM])


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
