"""Caps on what one response may make llmroute read, decode and hold. Sans-I/O.

A platform (or anything answering at its address) can send a body without end, a gzip bomb, or one
SSE line of gigabytes. `ReadLimits` sets the caps; `BodyReader` counts the bytes of one response as
they arrive, inflates gzip/deflate incrementally within the decoded cap, and raises
`ResponseTooLargeError` (naming the cap) the moment one is passed, so memory stays near the cap.
The SSE line cap is enforced by `sse.SSEDecoder`. The call's total timeout bounds the time: the
transport gives each socket read only what is left of it (`transport.py`).

Defaults (per response; `Client(..., read_limits=ReadLimits(...))` to change them):

- `max_response_bytes` = 32 MiB on the wire, error bodies included (a long answer streams a few MB);
- `max_decoded_bytes` = 32 MiB after gzip/deflate;
- `max_sse_line_bytes` = 4 MiB for one SSE line or one event's data (a chunk is usually < 1 KB).

And per answer, across its chunks (enforced by `_call/answer_bounds.AnswerMeter`):

- `max_answer_chars` = 16 Mi characters of content, reasoning, refusal and tool arguments (a
  1M-token answer is about 4 Mi characters);
- `max_tool_calls` = 1024 per choice, `max_tool_argument_chars` = 4 Mi characters per tool call;
- `max_tokens_margin` = 2.0: with `max_tokens` set, an answer of more than twice that (plus 64)
  tokens is cut; the choices are at most the call's `n`.

llmroute asks for `Accept-Encoding: gzip, deflate` and decodes both, streams included; a body in
any other encoding is refused as unreadable.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from llmroute import errors as E

__all__ = ["ReadLimits", "BodyReader", "ACCEPT_ENCODING", "DEFAULT_READ_LIMITS"]

ACCEPT_ENCODING = "gzip, deflate"
MiB = 1 << 20


@dataclass(frozen=True)
class ReadLimits:
    max_response_bytes: int = 32 * MiB
    max_decoded_bytes: int = 32 * MiB
    max_sse_line_bytes: int = 4 * MiB
    max_answer_chars: int = 16 * MiB
    max_tool_calls: int = 1024
    max_tool_argument_chars: int = 4 * MiB
    max_tokens_margin: float = 2.0

    def __post_init__(self) -> None:
        for name in ("max_response_bytes", "max_decoded_bytes", "max_sse_line_bytes", "max_answer_chars",
                     "max_tool_argument_chars"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1024:
                unit = "characters" if name.endswith("chars") else "bytes"
                raise E.ConfigError(f"must be an integer of at least 1024 {unit}, got {value!r}", key=name)
        calls = self.max_tool_calls
        if isinstance(calls, bool) or not isinstance(calls, int) or calls < 1:
            raise E.ConfigError(f"must be a positive integer, got {calls!r}", key="max_tool_calls")
        margin = self.max_tokens_margin
        if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not 1.0 <= margin <= 1000.0:
            raise E.ConfigError(f"must be a number from 1 to 1000, got {margin!r}", key="max_tokens_margin")


DEFAULT_READ_LIMITS = ReadLimits()


def _too_large(limit: str, max_bytes: int, what: str, provider: str | None,
               deployment: str | None) -> E.ResponseTooLargeError:
    return E.ResponseTooLargeError(
        f"{what} passed {max_bytes} bytes ({limit} cap): attempt ended", limit=limit, max_bytes=max_bytes,
        provider=provider, deployment=deployment, retryable=False,
    )


class BodyReader:
    """Raw body bytes of one response in, decoded bytes out, within the caps."""

    __slots__ = ("limits", "provider", "deployment", "raw_bytes", "decoded_bytes", "_inflate")

    def __init__(self, limits: ReadLimits, content_encoding: str | None, *, provider: str | None = None,
                 deployment: str | None = None) -> None:
        self.limits = limits
        self.provider = provider
        self.deployment = deployment
        self.raw_bytes = 0
        self.decoded_bytes = 0
        encoding = (content_encoding or "identity").strip().lower()
        if encoding in ("identity", ""):
            self._inflate = None
        elif encoding in ("gzip", "x-gzip"):
            self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif encoding == "deflate":
            self._inflate = zlib.decompressobj()
        else:
            raise E.ServerError(f"unreadable response: Content-Encoding {encoding!r:.40} was not asked for",
                                provider=provider, deployment=deployment)

    def feed(self, data: bytes) -> bytes:
        self.raw_bytes += len(data)
        if self.raw_bytes > self.limits.max_response_bytes:
            raise _too_large("response_bytes", self.limits.max_response_bytes, "the response body",
                             self.provider, self.deployment)
        if self._inflate is None:
            self.decoded_bytes = self.raw_bytes
            return data
        room = self.limits.max_decoded_bytes - self.decoded_bytes
        try:
            out = self._inflate.decompress(data, room + 1)
        except zlib.error as exc:
            raise E.ServerError(f"unreadable response: bad compressed body ({exc})", provider=self.provider,
                                deployment=self.deployment) from None
        self.decoded_bytes += len(out)
        if self.decoded_bytes > self.limits.max_decoded_bytes or self._inflate.unconsumed_tail:
            raise _too_large("decoded_bytes", self.limits.max_decoded_bytes, "the decompressed body",
                             self.provider, self.deployment)
        return out

    def close(self) -> bytes:
        if self._inflate is None:
            return b""
        out = self._inflate.flush()  # no input is left unconsumed (feed raised otherwise): little remains
        self.decoded_bytes += len(out)
        if self.decoded_bytes > self.limits.max_decoded_bytes:
            raise _too_large("decoded_bytes", self.limits.max_decoded_bytes, "the decompressed body",
                             self.provider, self.deployment)
        return out
