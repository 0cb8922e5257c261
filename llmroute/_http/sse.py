"""Incremental Server-Sent Events decoding: bytes in, `SSEEvent`s out. Shared by every adapter.

Follows the WHATWG rules that matter here: lines end in LF, CRLF or CR; a blank line ends an event;
`data:` lines are joined with LF; lines starting with ':' are comments (DashScope sends
`:HTTP_STATUS/200`); a single space after the colon is dropped. Bytes may be split anywhere,
including inside a UTF-8 character. This module does no I/O.

Bounded: a line (or one event's data) longer than `max_line` characters raises
`ResponseTooLargeError`; a line arriving in many pieces is joined once, when it ends, so decoding
costs time linear in the bytes whatever the line length.
"""

from __future__ import annotations

import codecs
from typing import List, NamedTuple

from llmroute import errors as E

__all__ = ["SSEEvent", "SSEDecoder", "MAX_LINE_CHARS"]

MAX_LINE_CHARS = 4 << 20  # bounded.ReadLimits.max_sse_line_bytes's default


class SSEEvent(NamedTuple):
    """One event. Immutable; a named tuple because one is made per event (a third of the cost of a
    frozen dataclass)."""

    data: str
    event: str | None = None
    id: str | None = None
    comments: tuple[str, ...] = ()


_new_event = tuple.__new__  # an SSEEvent from its four fields, without the named tuple's keyword wrapper


class SSEDecoder:
    """Feed bytes with `feed()`, get completed events; `close()` returns a last event left unterminated."""

    __slots__ = ("_text", "_buffer", "_data", "_event", "_id", "_comments", "_has_field", "_pending_cr", "_parts",
                 "_pending", "_data_chars", "max_line")

    def __init__(self, max_line: int = MAX_LINE_CHARS) -> None:
        self._text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buffer = ""
        self._parts: List[str] = []  # pieces of an unfinished line, joined when it ends
        self._pending = 0  # characters in _buffer and _parts
        self._data_chars = 0  # characters in the event's data lines so far
        self.max_line = max_line
        self._data: List[str] = []
        self._event: str | None = None
        self._id: str | None = None
        self._comments: List[str] = []
        self._has_field = False
        self._pending_cr = False

    def feed(self, chunk: bytes) -> List[SSEEvent]:
        if (chunk.startswith(b"data: ") and chunk.find(b"\n") == len(chunk) - 2 and chunk[-1] == 10  # 10: LF
                and not (self._buffer or self._parts or self._has_field or self._pending_cr or self._comments)
                and b"\r" not in chunk and not self._text.getstate()[0]):
            # The common read: exactly one `data: ...` event and its blank line, nothing pending. The
            # same event the general path makes, without its split and line loop (a third of the cost).
            try:
                data = chunk[6:-2].decode()
            except UnicodeDecodeError:
                pass  # invalid UTF-8: the general path replaces it
            else:
                if len(data) >= self.max_line:
                    self._check(len(data) + 1, "one SSE event's data")  # raises
                return [_new_event(SSEEvent, (data, None, self._id, ()))]
        text = self._text.decode(chunk)
        if not text:
            return []
        if self._pending_cr:
            # A CR ended the last feed: a LF that opens this one belongs to the same line break.
            if text.startswith("\n"):
                text = text[1:]
            self._pending_cr = False
        if "\n" not in text and "\r" not in text:
            # No line ends here: keep the piece; joining it now would copy the whole line again.
            self._parts.append(text)
            self._pending += len(text)
            self._check(self._pending, "one SSE line")
            return []
        buffer = self._buffer + "".join(self._parts) + text
        self._parts = []
        if "\r" not in buffer:
            return self._feed_lf(buffer)
        events: List[SSEEvent] = []
        start = 0
        n = len(buffer)
        while start < n:
            lf = buffer.find("\n", start)
            cr = buffer.find("\r", start)
            if lf == -1 and cr == -1:
                break
            if cr != -1 and (lf == -1 or cr < lf):
                end = cr
                if cr + 1 < n:
                    nxt = cr + 2 if buffer[cr + 1] == "\n" else cr + 1
                else:
                    nxt = cr + 1
                    self._pending_cr = True
            else:
                end = lf
                nxt = lf + 1
            event = self._line(buffer[start:end])
            if event is not None:
                events.append(event)
            start = nxt
        self._buffer = buffer[start:]
        self._pending = len(self._buffer)
        self._check(self._pending, "one SSE line")
        return events

    def _check(self, chars: int, what: str) -> None:
        if chars > self.max_line:
            raise E.ResponseTooLargeError(f"{what} passed {self.max_line} characters (sse_line_bytes cap)",
                                          limit="sse_line_bytes", max_bytes=self.max_line, retryable=False)

    def _feed_lf(self, buffer: str) -> List[SSEEvent]:
        """`feed` for text whose lines all end in LF (what every platform sends): one split, and the
        common `data: ...` and blank lines handled here rather than one `_line` call each. Between
        events, a run of one-line `data: ...` events (a fast server's read) is split by blank lines."""
        if self._has_field or self._comments:
            return self._feed_lines(buffer)
        blocks = buffer.split("\n\n")
        tail = blocks.pop()  # what follows the last blank line: the next event, unfinished ("" if none)
        events: List[SSEEvent] = []
        last_id, longest = self._id, self.max_line - 1
        for i, block in enumerate(blocks):
            if not block.startswith("data: ") or "\n" in block:  # anything else: line by line from here
                return events + self._feed_lines("\n\n".join([*blocks[i:], tail]))
            if len(block) - 6 > longest:
                self._check(len(block) - 5, "one SSE event's data")  # raises
            events.append(_new_event(SSEEvent, (block[6:], None, last_id, ())))
        if tail:
            return events + self._feed_lines(tail)
        self._buffer = ""
        self._pending = 0
        return events

    def _feed_lines(self, buffer: str) -> List[SSEEvent]:
        lines = buffer.split("\n")
        self._buffer = lines.pop()  # the unfinished last line ("" when the text ended with LF)
        self._pending = len(self._buffer)
        self._check(self._pending, "one SSE line")
        events: List[SSEEvent] = []
        for line in lines:
            if line.startswith("data:"):
                value = line[6:] if line.startswith("data: ") else line[5:]
                self._data_chars += len(value) + 1
                self._check(self._data_chars, "one SSE event's data")
                self._data.append(value)
                self._has_field = True
            elif not line:
                if self._has_field:
                    events.append(self._emit())
            else:
                self._line(line)  # a comment or another field: it never ends an event
        return events

    def close(self) -> List[SSEEvent]:
        """End of stream: flush a final event whose blank line never came (DashScope ends so)."""
        tail = self._text.decode(b"", final=True)
        rest = self._buffer + "".join(self._parts) + tail
        self._buffer = ""
        self._parts = []
        self._pending = 0
        events: List[SSEEvent] = []
        if rest:
            event = self._line(rest)
            if event is not None:
                events.append(event)
        event = self._line("")
        if event is not None:
            events.append(event)
        return events

    def _emit(self) -> SSEEvent:
        """The event the fields so far make (a blank line ended it); the fields start again."""
        data = self._data
        event = SSEEvent(data[0] if len(data) == 1 else "\n".join(data), self._event, self._id,
                         tuple(self._comments) if self._comments else ())
        self._data = []
        self._data_chars = 0
        self._event = None
        if self._comments:
            self._comments = []
        self._has_field = False
        return event

    def _line(self, line: str) -> SSEEvent | None:
        if not line:
            return self._emit() if self._has_field else None
        if line[0] == ":":
            if len(self._comments) < 64:  # a stream of comments is a keep-alive, not something to hold
                self._comments.append(line[1:])
            return None
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data_chars += len(value) + 1
            self._check(self._data_chars, "one SSE event's data")
            self._data.append(value)
            self._has_field = True
        elif name == "event":
            self._event = value
            self._has_field = True
        elif name == "id":
            self._id = value
            self._has_field = True
        # "retry" and unknown fields are ignored, as the spec says.
        return None
