"""Caps on what one answer may grow to across its chunks (or in one JSON body). Sans-I/O.

The byte caps (`_http/bounded.py`) bound one response on the wire; these bound the answer itself,
whatever its pieces: a server that streams without end, sends more choices than `n`, a tool call
of megabytes or far more tokens than `max_tokens` asked for is cut with `ResponseTooLargeError`
(`limit` names the cap). The attempt is then billed for what arrived (its usage is estimated and
flagged) and is not continued elsewhere: the caller gets the typed error. `AnswerMeter` counts; it
keeps sizes, never the text (the `StreamAssembler` holds that, joined as it grows).

Caps (from `ReadLimits`, README "Read caps"):

- `max_answer_chars`: characters of content, reasoning, refusal and tool-call arguments across all
  choices and chunks;
- choices: at most the call's `n` (1 when not given);
- `max_tool_calls` per choice, `max_tool_argument_chars` per tool call;
- with `max_tokens` (or `max_completion_tokens`) set, at most `max_tokens_margin` times that plus
  `TOKEN_SLACK` tokens of answer (reasoning left out: some platforms do not count it against
  `max_tokens`), checked on the platform's running usage when it sends one, and on characters
  otherwise (`CHARS_PER_TOKEN_BOUND` characters a token, more than any tokenizer makes of text).

Never raises anything but `ResponseTooLargeError`; never reads a clock or a socket.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Mapping, Tuple

from llmroute import errors as E

if TYPE_CHECKING:
    from llmroute._http.bounded import ReadLimits
    from llmroute.types import ChatCompletion, ChatCompletionChunk, Usage

__all__ = ["AnswerMeter", "asked_max_tokens", "CHARS_PER_TOKEN_BOUND", "TOKEN_SLACK"]

CHARS_PER_TOKEN_BOUND = 16
TOKEN_SLACK = 64
# A JSON body naming far more messages than `n` choices can hold is refused before it is parsed
# (200,000 choices parsed were 510 MB): `"message"` or `"finish_reason"` keys (one of each in a
# choice) beyond this many per asked choice.
_MESSAGE_KEYS_PER_CHOICE = 4


def asked_max_tokens(params: Mapping[str, Any]) -> int:
    """The output cap the call asked for (`max_completion_tokens` or `max_tokens`), 0 when none."""
    asked = params.get("max_completion_tokens") or params.get("max_tokens")
    return asked if isinstance(asked, int) and not isinstance(asked, bool) and asked > 0 else 0


class AnswerMeter:
    """The sizes of one attempt's answer so far, checked against its caps as chunks arrive."""

    __slots__ = ("limits", "max_choices", "token_cap", "char_cap", "chars", "answer_chars", "tools", "where")

    def __init__(self, limits: "ReadLimits", params: Mapping[str, Any], *, provider: str | None = None,
                 deployment: str | None = None) -> None:
        self.limits = limits
        n = params.get("n")
        self.max_choices = n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 1
        asked = asked_max_tokens(params)
        self.token_cap = int(asked * limits.max_tokens_margin) + TOKEN_SLACK if asked else None
        self.char_cap = limits.max_answer_chars
        self.chars = 0  # every character of the answer
        self.answer_chars = 0  # without reasoning: what `max_tokens` bounds
        self.tools: Dict[Tuple[int, int], int] = {}  # (choice, tool call) -> argument characters
        self.where = {"provider": provider, "deployment": deployment}

    def _cut(self, limit: str, maximum: int, what: str) -> E.ResponseTooLargeError:
        return E.ResponseTooLargeError(f"{what} passed {maximum} ({limit} cap): attempt ended", limit=limit,
                                       max_bytes=maximum, retryable=False, **self.where)

    def _choice(self, index: int) -> None:
        if not 0 <= index < self.max_choices:
            raise self._cut("choices", self.max_choices, f"the answer's choices (index {index})")

    def _tool(self, choice: int, tool: int, arguments: int) -> int:
        key = (choice, tool)
        size = self.tools.get(key, 0) + arguments
        if key not in self.tools and sum(1 for c, _ in self.tools if c == choice) >= self.limits.max_tool_calls:
            raise self._cut("tool_calls", self.limits.max_tool_calls, "the tool calls of one choice")
        if size > self.limits.max_tool_argument_chars:
            raise self._cut("tool_argument_chars", self.limits.max_tool_argument_chars,
                            "one tool call's arguments (characters)")
        self.tools[key] = size
        return arguments

    def _add(self, reasoning: int, other: int) -> None:
        self.chars += reasoning + other
        self.answer_chars += other
        if self.chars > self.char_cap:
            raise self._cut("answer_chars", self.char_cap, "the answer (characters)")
        if self.token_cap is not None and self.answer_chars > self.token_cap * CHARS_PER_TOKEN_BOUND:
            raise self._cut("answer_tokens", self.token_cap,
                            f"the answer (about {self.answer_chars // CHARS_PER_TOKEN_BOUND}+ tokens, max_tokens "
                            f"asked for fewer)")

    def chunk(self, chunk: "ChatCompletionChunk") -> None:
        """Count one streamed chunk; raises the moment a cap is passed."""
        for choice in chunk.choices:
            if not 0 <= choice.index < self.max_choices:
                self._choice(choice.index)  # raises
            d = choice.delta
            other = len(d.content or "") + len(d.refusal or "")
            for call in d.tool_calls or ():
                arguments = call.function.arguments if call.function is not None else None
                other += self._tool(choice.index, call.index, len(arguments or ""))
            if d.reasoning_content or other:
                self._add(len(d.reasoning_content or ""), other)

    def text(self, chars: int) -> None:
        """`chunk` for the common chunk (`StreamDecoder.decode`): `chars` characters of content in
        choice 0, nothing else (the index is in range: there is always room for one choice)."""
        self.chars += chars
        self.answer_chars += chars
        if self.chars > self.char_cap or (
                self.token_cap is not None and self.answer_chars > self.token_cap * CHARS_PER_TOKEN_BOUND):
            self._add(0, 0)  # raises the cap's error

    def usage(self, usage: "Usage" | None) -> None:
        """The platform's own count (a running count on each chunk, or the final one)."""
        if usage is None or self.token_cap is None:
            return
        reasoning = usage.completion_tokens_details.reasoning_tokens
        if not reasoning and self.chars > self.answer_chars:
            return  # reasoning arrived but the count does not split it out: the characters bound it
        answer = usage.completion_tokens - reasoning
        if answer > self.token_cap:
            raise self._cut("answer_tokens", self.token_cap, f"the answer ({answer} tokens by the platform's count)")

    def body(self, content: bytes) -> None:
        """A plain JSON body, before it is parsed: far more messages than choices asked for is refused."""
        allowed = _MESSAGE_KEYS_PER_CHOICE * self.max_choices + 16
        if max(content.count(b'"message"'), content.count(b'"finish_reason"')) > allowed:
            raise self._cut("choices", self.max_choices, "the answer's choices (in the JSON body)")

    def completion(self, completion: "ChatCompletion", usage_reported: bool) -> None:
        """A whole answer read as one JSON body: the same caps, once."""
        if len(completion.choices) > self.max_choices:
            raise self._cut("choices", self.max_choices, f"the answer's choices ({len(completion.choices)})")
        for choice in completion.choices:
            self._choice(choice.index)
            m = choice.message
            other = len(m.content or "") + len(m.refusal or "")
            for number, call in enumerate(m.tool_calls or ()):
                other += self._tool(choice.index, number, len(call.function.arguments or ""))
            self._add(len(m.reasoning_content or ""), other)
        if usage_reported:
            self.usage(completion.usage)
