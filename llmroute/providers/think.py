"""Inline `<think>...</think>` reasoning -> separate reasoning text, whole or streamed. Sans-I/O.

Some platforms leave a reasoning model's thoughts inline in `content` (Fireworks for some models,
self-hosted servers without a reasoning parser: docs/platforms.md §11.4). Only a response that *opens*
with `<think>` (after whitespace) is split; a `<think>` later in an answer is the answer's text.
Tags may be cut anywhere across stream chunks, so the streaming splitter holds back any tail that
could be the start of a tag.
"""

from __future__ import annotations

from typing import Tuple

__all__ = ["split_think", "ThinkSplitter"]

OPEN = "<think>"
CLOSE = "</think>"


def split_think(text: str) -> Tuple[str | None, str]:
    """(reasoning, answer) for a whole message; (None, text) when it does not open with <think>."""
    stripped = text.lstrip()
    if not stripped.startswith(OPEN):
        return None, text
    body = stripped[len(OPEN) :]
    end = body.find(CLOSE)
    if end == -1:
        return body, ""
    return body[:end], body[end + len(CLOSE) :].lstrip("\n")


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest tail of `text` that is a proper prefix of `tag`."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0


class ThinkSplitter:
    """Feed content pieces; get (reasoning, answer) pieces. `flush()` at the end of the stream."""

    __slots__ = ("_state", "_held", "answering")

    def __init__(self) -> None:
        self._state = "start"  # start -> thinking -> after_think -> answer, or start -> answer
        self._held = ""
        # Past any reasoning, nothing held: `feed(piece)` returns ("", piece) from now on (a caller
        # may skip the call, once per streamed chunk).
        self.answering = False

    def feed(self, piece: str) -> Tuple[str, str]:
        text = self._held + piece
        self._held = ""
        if self._state == "answer":
            return "", text
        if self._state == "after_think":  # drop the newlines between </think> and the answer
            text = text.lstrip("\n")
            if text:
                self._state = "answer"
                self.answering = True
            return "", text
        if self._state == "start":
            stripped = text.lstrip()
            if not stripped:
                self._held = text
                return "", ""
            if stripped.startswith(OPEN):
                self._state = "thinking"
                text = stripped[len(OPEN) :]
            elif OPEN.startswith(stripped):
                self._held = text  # "<thi" so far: wait for more
                return "", ""
            else:
                self._state = "answer"
                self.answering = True
                return "", text
        # thinking
        end = text.find(CLOSE)
        if end != -1:
            thought, rest = text[:end], text[end + len(CLOSE) :].lstrip("\n")
            self._state = "answer" if rest else "after_think"
            self.answering = bool(rest)
            return thought, rest
        keep = _partial_suffix(text, CLOSE)
        if keep:
            self._held = text[-keep:]
            text = text[:-keep]
        return text, ""

    def flush(self) -> Tuple[str, str]:
        held, self._held = self._held, ""
        if self._state == "thinking":
            return held, ""
        return "", held
