"""The OpenAI Chat Completions wire format (docs/platforms.md §0), with the hooks platforms differ in.

Every OpenAI-shaped loopback server (Together, Fireworks, SiliconFlow, Bailian compat,
vLLM, SGLang, TGI, Ollama, OpenAI itself, the fault server) is this class with a few
class attributes and overridden hooks: where usage goes in a stream, the reasoning
field, the error envelope and catalog, which max-tokens field is honoured, how the
context window is enforced, auth. It turns a scripted `Reply` into bytes on the wire.

Deterministic accounting, so tests can check the numbers llmroute reports:
prompt_tokens = whitespace-separated words over all message texts (at least 1);
completion_tokens = reasoning pieces + content pieces actually produced.
It must never call out to anything: replies come from the script or the defaults.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from tests.servers.base import PROBE_HEADER, RESET, Flush, PlatformServer, Reset, Response, now_unix, wait_until
from tests.servers.embeddings import EmbeddingsMixin
from tests.servers.script import RecordedRequest, Reply

SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
MALFORMED_SSE = b'data: {"id": "chatcmpl-broken", "choices": [{"delta": {"content": \n\n'


class ErrorSpec(NamedTuple):
    """One entry of a platform's error catalog."""

    status: int
    type: str | None
    code: Any
    message: str
    headers: tuple[tuple[str, str], ...] = ()


class StreamUsage(NamedTuple):
    per_chunk: bool  # cumulative usage on every chunk
    on_finish: bool  # final usage on the finish_reason chunk
    empty_chunk: bool  # final usage on an extra choices:[] chunk before [DONE]
    null_others: bool  # "usage": null on chunks that carry no usage


@dataclass
class Usage:
    """Neutral token counts; each platform renders them in its own usage object."""

    prompt: int
    completion: int
    cached: int = 0
    reasoning: int = 0
    total: int | None = None
    cache_created: int = 0  # prompt tokens written to an explicit context cache (Bailian)
    explicit: bool = False  # the cache is an explicit one (Bailian cache_type "ephemeral")

    @property
    def total_tokens(self) -> int:
        return self.total if self.total is not None else self.prompt + self.completion


@dataclass
class Plan:
    """A completion about to be sent: what a Reply means for one concrete request."""

    id: str
    created: int
    model: str
    items: list[tuple[str, str]]  # ("reasoning" | "content", text), in send order
    finish_reason: str
    usage: Usage | None
    request: dict[str, Any]

    def usage_after(self, produced: int) -> Usage | None:
        """Cumulative usage after `produced` pieces (for platforms that report it per chunk)."""
        if self.usage is None:
            return None
        reasoning = sum(1 for kind, _ in self.items[:produced] if kind == "reasoning")
        return replace(self.usage, completion=produced, reasoning=reasoning, total=None)


def count_prompt_tokens(messages: list[Any]) -> int:
    words = 0
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            words += len(content.split())
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    words += len(part["text"].split())
    return max(1, words)


def sse(payload: Any) -> bytes:
    return b"data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"
UNSET = object()  # "use the platform default" for constructor arguments where None means "off"


class OpenAICompatServer(EmbeddingsMixin, PlatformServer):
    """OpenAI Chat Completions semantics; subclasses override class attributes and hooks."""

    platform = "openai"
    base_path = "/v1"
    default_models: dict[str, int] = {"gpt-4o-mini": 128_000}
    default_api_key: str | None = "sk-test-openai"
    # "bearer": key required; "optional": required only if api_key is set; "none": never checked.
    auth_mode = "bearer"
    reasoning_field = "reasoning_content"
    # Where a stream's usage goes: "empty_chunk" (extra choices:[] chunk, when asked),
    # "finish_chunk" (on the finish_reason chunk), "every_chunk" (cumulative on each chunk).
    usage_placement = "empty_chunk"
    # Chunks other than the usage chunk carry "usage": null when usage was asked for (§0).
    usage_null_on_chunks = True
    role_chunk = True  # a first chunk with delta {"role": "assistant", "content": ""}
    max_tokens_fields: tuple[str, ...] = ("max_completion_tokens", "max_tokens")
    natural_finish = "stop"
    done_after_error = True
    status_uses_catalog = True  # Reply(status=N) renders the catalog's kind of status N, if any
    mid_stream_error_kind = "server"
    chunk_extras: dict[str, Any] = {"system_fingerprint": "fp_loopback"}
    choice_extras: dict[str, Any] = {"logprobs": None}
    # How log probabilities are sent when the request asks for them (`logprobs`): "openai"
    # (`{"content": [{token, logprob, bytes, top_logprobs}], "refusal": null}`), "legacy"
    # (`{tokens, token_logprobs, top_logprobs: [{token: logprob}]}`), "number" (a bare float per
    # streamed chunk) or None (not sent). OpenAI sends its shape in plain answers and on each chunk.
    plain_logprobs: str | None = "openai"
    stream_logprobs: str | None = "openai"
    logprob_bytes = True  # each token's UTF-8 bytes

    errors: dict[str, ErrorSpec] = {
        # §0 error codes and body {"error":{"message","type","param","code"}}.
        "auth": ErrorSpec(401, "invalid_request_error", "invalid_api_key", "Incorrect API key provided."),
        "not_found": ErrorSpec(404, "invalid_request_error", "model_not_found",
                               "The model `{model}` does not exist or you do not have access to it."),
        "bad_request": ErrorSpec(400, "invalid_request_error", None, "Invalid request."),
        "context": ErrorSpec(400, "invalid_request_error", "context_length_exceeded",
                             "This model's maximum context length is {context} tokens. However, you requested "
                             "{requested} tokens ({prompt} in the messages, {max_tokens} in the completion)."),
        "rate_limit": ErrorSpec(429, "requests", "rate_limit_exceeded",
                                "Rate limit reached for requests.",
                                (("x-ratelimit-limit-requests", "500"), ("x-ratelimit-remaining-requests", "0"),
                                 ("x-ratelimit-reset-requests", "120ms"))),
        "quota": ErrorSpec(429, "insufficient_quota", "insufficient_quota",
                           "You exceeded your current quota, please check your plan and billing details."),
        "server": ErrorSpec(500, "server_error", None, "The server had an error while processing your request."),
        "overloaded": ErrorSpec(503, "server_error", None, "The engine is currently overloaded, please try again later."),
    }

    def __init__(
        self,
        *,
        api_key: str | None | object = UNSET,
        models: dict[str, int] | None = None,
        default_reply: Reply | None = None,
        default_text: str | None = None,
        port: int = 0,
        record_limit: int = 100_000,
    ) -> None:
        super().__init__(port=port, record_limit=record_limit)
        self.api_key: str | None = self.default_api_key if api_key is UNSET else api_key  # type: ignore[assignment]
        self.models = dict(self.default_models if models is None else models)
        self.default_text = default_text if default_text is not None else f"Hello from {self.platform}"
        self._initial_default = default_reply
        self.script.default = default_reply
        self._ids = itertools.count(1)
        # Counters for /metrics on self-hosted servers and for benchmark sanity checks.
        self.running = 0
        self.requests_total = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0

    # -- routing -----------------------------------------------------------------------------------
    def routes(self):  # type: ignore[override]
        return {
            ("POST", self.base_path + "/chat/completions"): self.chat,
            ("GET", self.base_path + "/models"): self.list_models,
            ("POST", self.embedding_path()): self.embeddings,
        }

    def reset(self) -> None:
        super().reset()
        self.script.default = self._initial_default

    @property
    def error_kinds(self) -> list[str]:
        return sorted(self.errors)

    def default_pieces(self) -> list[str]:
        words = self.default_text.split(" ")
        return [words[0]] + [" " + w for w in words[1:]]

    # -- a model's answer, and continuing it (docs/failover.md, "Continuing a partial answer") -----
    # With `answer` set, the server answers every chat request with that text, the way a model would:
    # a greedy or seeded request (temperature 0, or a seed) gets exactly `answer`; a sampled one gets
    # a variant whose second word differs from request to request. A request ending with an assistant
    # message is read the way this server reads one (`prefill`): "continue_final_message" (vLLM,
    # SGLang: only with `continue_final_message: true`, else a new turn after it), "trailing_assistant"
    # (llama.cpp: always continued), "refuse" (a 400, as llama.cpp in thinking mode), or None (a new
    # turn after it: the whole answer again).
    prefill: str | None = None
    answer: str | None = None

    def _samples(self) -> int:
        self.sampled_answers = getattr(self, "sampled_answers", 0) + 1
        return self.sampled_answers

    def answer_text(self, body: dict[str, Any]) -> str:
        text = self.answer or ""
        greedy = body.get("temperature") == 0 or body.get("seed") is not None
        if not greedy:
            words = text.split(" ")
            if len(words) > 1:
                words[1] = f"{words[1]}~{self._samples()}"
            text = " ".join(words)
        return text

    def continues(self, body: dict[str, Any]) -> bool:
        """Does this request ask this server to continue its final assistant message?"""
        messages = body.get("messages") or []
        last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
        if last.get("role") != "assistant":
            return False
        if self.prefill == "trailing_assistant":
            return True
        return self.prefill == "continue_final_message" and body.get("continue_final_message") is True

    def prefill_refusal(self, body: dict[str, Any]) -> Response | None:
        messages = body.get("messages") or []
        last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
        if self.answer is not None and self.prefill == "refuse" and last.get("role") == "assistant":
            return self.error_response("bad_request", message="Assistant response prefill is incompatible with "
                                                              "enable_thinking")
        return None

    def answer_pieces(self, body: dict[str, Any]) -> list[str]:
        """The pieces of this request's answer (the server's default text when `answer` is not set)."""
        if self.answer is None:
            return self.default_pieces()
        text = self.answer_text(body)
        if self.continues(body):
            prefix = str(body["messages"][-1].get("content") or "")
            if text.startswith(prefix):
                text = text[len(prefix):]  # the model carries on from the prefill
            else:  # a sampled prefill: carry on after as many words as it holds
                text = "".join(" " + w for w in text.split(" ")[len(prefix.split(" ")):])
        words = text.split(" ")
        pieces = [words[0]] + [" " + w for w in words[1:]]
        return [p for p in pieces if p]

    def next_id(self) -> str:
        return f"chatcmpl-{self.platform}-{next(self._ids)}"

    # -- hooks: errors ---------------------------------------------------------------------------
    def error_body(self, spec: ErrorSpec, message: str, param: str | None) -> Any:
        return {"error": {"message": message, "type": spec.type, "param": param, "code": spec.code}}

    def error_response(
        self, kind: str, *, status: int | None = None, message: str | None = None,
        param: str | None = None, headers: dict[str, str] | None = None, **fmt: Any,
    ) -> Response:
        spec = self.errors.get(kind)
        if spec is None:
            raise KeyError(f"{self.platform} has no error kind {kind!r}; known: {self.error_kinds}")
        text = message if message is not None else spec.message.format_map(LenientFormat(fmt))
        hdrs = dict(spec.headers)
        hdrs.update(headers or {})
        code = status if status not in (None, 200) else spec.status
        return Response.json(self.error_body(spec, text, param), code, hdrs)

    def mid_stream_error(self, kind: str, message: str | None) -> bytes:
        spec = self.errors[kind]
        return sse(self.error_body(spec, message or spec.message.format_map(LenientFormat({})), None))

    def auth_response(self, request: RecordedRequest) -> Response | None:
        """None if the request is authorised, else the platform's 401."""
        if self.auth_mode == "none" or (self.auth_mode == "optional" and self.api_key is None):
            return None
        if request.bearer is not None and request.bearer == self.api_key:
            return None
        return self.error_response("auth")

    # -- hooks: request semantics ------------------------------------------------------------------
    def accepts_model(self, model: Any) -> bool:
        return isinstance(model, str) and model in self.models

    def max_tokens_of(self, body: dict[str, Any]) -> int | Response | None:
        for name in self.max_tokens_fields:
            value = body.get(name)
            if value is not None:
                if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                    return self.error_response("bad_request", message=f"{name} must be a positive integer", param=name)
                return value
        return None

    def check_context(self, body: dict[str, Any], model: str, prompt: int, limit: int | None) -> int | Response | None:
        """Enforce the context window; return the effective limit or an error response."""
        context = self.models.get(model, 0)
        if context and prompt + (limit or 0) > context:
            return self.error_response(
                "context", context=context, prompt=prompt, max_tokens=limit or 0,
                requested=prompt + (limit or 0), param="messages",
            )
        return limit

    def wants_stream_usage(self, body: dict[str, Any]) -> bool:
        options = body.get("stream_options")
        return isinstance(options, dict) and options.get("include_usage") is True

    def response_headers(self, plan: Plan | None) -> dict[str, str]:
        return {"x-request-id": f"req-{self.platform}-{next(self._ids)}"}

    # -- hooks: rendering --------------------------------------------------------------------------
    def usage_json(self, usage: Usage) -> dict[str, Any]:
        return {
            "prompt_tokens": usage.prompt,
            "completion_tokens": usage.completion,
            "total_tokens": usage.total_tokens,
            "prompt_tokens_details": {"cached_tokens": usage.cached},
            "completion_tokens_details": {"reasoning_tokens": usage.reasoning},
        }

    def chunk_base(self, plan: Plan) -> dict[str, Any]:
        base = {"id": plan.id, "object": "chat.completion.chunk", "created": plan.created, "model": plan.model}
        base.update(self.chunk_extras)
        return base

    def delta(self, kind: str, text: str) -> dict[str, Any]:
        return {self.reasoning_field: text} if kind == "reasoning" else {"content": text}

    def logprobs_style(self, body: dict[str, Any], stream: bool) -> str | None:
        """The shape of log probabilities for this request, or None when none are sent."""
        if not body.get("logprobs"):
            return None
        return self.stream_logprobs if stream else self.plain_logprobs

    def token_logprobs(self, body: dict[str, Any], texts: list[str], start: int) -> list[dict[str, Any]]:
        """Deterministic OpenAI-shaped entries for `texts`, the tokens at positions start, start+1, ...:
        logprob -0.1 * (position + 1); the alternatives are the token itself and `alt<k>` tokens."""
        top = body.get("top_logprobs")
        wanted = top if isinstance(top, int) and not isinstance(top, bool) else 0
        entries = []
        for offset, text in enumerate(texts):
            logprob = round(-0.1 * (start + offset + 1), 6)
            alternatives = [(text, logprob)] + [(f"alt{k}", round(logprob - k, 6)) for k in range(1, wanted)]
            entry: dict[str, Any] = {"token": text, "logprob": logprob}
            if self.logprob_bytes:
                entry["bytes"] = list(text.encode())
            entry["top_logprobs"] = [
                {"token": t, "logprob": p, **({"bytes": list(t.encode())} if self.logprob_bytes else {})}
                for t, p in alternatives[:wanted]
            ]
            entries.append(entry)
        return entries

    def logprobs_json(self, style: str, entries: list[dict[str, Any]]) -> Any:
        if style == "number":
            return entries[0]["logprob"] if entries else None
        if style == "legacy":
            return {
                "tokens": [e["token"] for e in entries],
                "token_logprobs": [e["logprob"] for e in entries],
                "top_logprobs": [{t["token"]: t["logprob"] for t in e["top_logprobs"]} for e in entries],
            }
        return {"content": entries, "refusal": None}

    def completion_body(self, plan: Plan) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(t for k, t in plan.items if k == "content")}
        reasoning = "".join(t for k, t in plan.items if k == "reasoning")
        if reasoning:
            message[self.reasoning_field] = reasoning
        body = {
            "id": plan.id, "object": "chat.completion", "created": plan.created, "model": plan.model,
            "choices": [{"index": 0, "message": message, "finish_reason": plan.finish_reason, **self.choice_extras}],
        }
        style = self.logprobs_style(plan.request, stream=False)
        if style is not None:
            texts = [t for k, t in plan.items if k == "content"]
            body["choices"][0]["logprobs"] = self.logprobs_json(style, self.token_logprobs(plan.request, texts, 0))
        body.update(self.chunk_extras)
        if plan.usage is not None:
            body["usage"] = self.usage_json(plan.usage)
        return body

    # -- the chat endpoint ------------------------------------------------------------------------
    async def chat(self, request: RecordedRequest) -> Response:
        denied = self.auth_response(request)
        if denied is not None:
            return denied
        body = request.json
        if not isinstance(body, dict):
            return self.error_response("bad_request", message="Request body must be a JSON object.")
        model = body.get("model")
        reply = self.script.pop(request.path, model if isinstance(model, str) else None) or Reply()
        early = await self.scripted_outcome(reply)
        if early is not None:
            return early
        if not self.accepts_model(model):
            return self.error_response("not_found", model=model, param="model")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return self.error_response("bad_request", message="messages must be a non-empty list", param="messages")
        refused = self.prefill_refusal(body)
        if refused is not None:
            return refused
        limit = self.max_tokens_of(body)
        if isinstance(limit, Response):
            return limit
        prompt = count_prompt_tokens(messages)
        limit = self.check_context(body, model, prompt, limit)
        if isinstance(limit, Response):
            return limit
        plan = self.make_plan(body, model, prompt, limit, reply)
        streaming = reply.stream if reply.stream is not None else body.get("stream") is True
        self.requests_total += 1
        self.prompt_tokens_total += prompt
        if streaming:
            return self.stream_response(plan, reply)
        return await self.plain_response(plan, reply)

    async def scripted_outcome(self, reply: Reply, error_response: Any = None) -> Response | None:
        """Outcomes that do not depend on the request: reset, raw body, whole-response error."""
        error_response = error_response or self.error_response
        if reply.delay_s > 0:
            await asyncio.sleep(reply.delay_s)
        if reply.reset_before:
            return Response(reset=True)
        if reply.close_before:
            return Response(close=True)
        if reply.body is not None:
            raw = reply.body
            if isinstance(raw, (dict, list)):
                return Response.json(raw, reply.status, reply.headers)
            data = raw.encode() if isinstance(raw, str) else bytes(raw)
            headers = {"Content-Type": "application/json", **reply.headers}
            return Response(reply.status, list(headers.items()), data)
        if reply.error is not None and reply.error_at is None:
            return error_response(reply.error, status=reply.status, message=reply.message, headers=reply.headers)
        if reply.status != 200:
            # A bare status becomes the platform's own error of that status when it has one.
            kind = next((k for k, spec in self.errors.items() if spec.status == reply.status), None)
            if kind is not None and self.status_uses_catalog:
                return error_response(kind, status=reply.status, message=reply.message, headers=reply.headers)
            return Response.json({"error": {"message": reply.message or "scripted status", "type": "scripted",
                                            "param": None, "code": None}}, reply.status, reply.headers)
        return None

    def make_plan(self, body: dict[str, Any], model: str, prompt: int, limit: int | None, reply: Reply) -> Plan:
        reasoning = [("reasoning", t) for t in reply.reasoning]
        content = [("content", t) for t in (self.answer_pieces(body) if reply.pieces is None else reply.pieces)]
        items = reasoning + content
        finish = reply.finish_reason or self.natural_finish
        if limit is not None and len(items) > limit:
            items = items[:limit]
            finish = reply.finish_reason or "length"
        usage = None
        if not reply.omit_usage:
            usage = Usage(prompt, len(items), reply.cached_tokens, sum(1 for k, _ in items if k == "reasoning"))
            over = reply.usage or {}
            usage.prompt = over.get("prompt_tokens", usage.prompt)
            usage.completion = over.get("completion_tokens", usage.completion)
            usage.cached = over.get("cached_tokens", usage.cached)
            usage.reasoning = over.get("reasoning_tokens", usage.reasoning)
            usage.total = over.get("total_tokens")
            usage.cache_created = over.get("cache_creation_tokens", 0)
            usage.explicit = bool(over.get("explicit_cache", 0))
        return Plan(self.next_id(), now_unix(), model, items, finish, usage, body)

    async def plain_response(self, plan: Plan, reply: Reply) -> Response:
        if reply.ttft_s > 0:
            await asyncio.sleep(reply.ttft_s)
        self.generation_tokens_total += len(plan.items)
        if reply.reset_after_chunks is not None:
            return Response(reset=True)
        if reply.error_at is not None:
            return self.error_response(reply.error or self.mid_stream_error_kind, message=reply.message)
        headers = {**self.response_headers(plan), **reply.headers}
        if reply.malformed_at is not None:
            return Response(200, [("Content-Type", "application/json"), *headers.items()], b'{"id": "chatcmpl-broken", "choices": [')
        return Response.json(self.completion_body(plan), 200, headers)

    def stream_response(self, plan: Plan, reply: Reply) -> Response:
        headers = {**SSE_HEADERS, **self.response_headers(plan), **reply.headers}
        return Response(200, list(headers.items()), stream=self.stream_frames(plan, reply))

    def stream_usage(self, plan: Plan) -> StreamUsage:
        """Where this request's stream carries usage (a hook: platforms differ most here)."""
        if plan.usage is None or not self.wants_stream_usage(plan.request):
            return StreamUsage(False, False, False, False)
        where = self.usage_placement
        return StreamUsage(
            per_chunk=where == "every_chunk",
            on_finish=where in ("finish_chunk", "every_chunk"),
            empty_chunk=where == "empty_chunk",
            null_others=self.usage_null_on_chunks,
        )

    def final_chunk_extras(self, plan: Plan) -> dict[str, Any]:
        """Extra top-level fields on the finish_reason chunk (e.g. Fireworks perf_metrics)."""
        return {}

    async def stream_frames(self, plan: Plan, reply: Reply) -> AsyncIterator[bytes | Reset | Flush]:
        self.running += 1
        try:
            async for frame in self._frames(plan, reply):
                yield frame
        finally:
            self.running -= 1

    async def _frames(self, plan: Plan, reply: Reply) -> AsyncIterator[bytes | Reset | Flush]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + reply.ttft_s
        async for flush in wait_until(loop, deadline):
            yield flush
        where = self.stream_usage(plan)
        base = self.chunk_base(plan)
        logprobs_style = self.logprobs_style(plan.request, stream=True)
        content_seen = 0

        def chunk(delta: dict[str, Any], finish: str | None, produced: int, final: bool) -> dict[str, Any]:
            out = dict(base)
            out["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish, **self.choice_extras}]
            if final and where.on_finish:
                out["usage"] = self.usage_json(plan.usage)  # type: ignore[arg-type]
            elif where.per_chunk:
                out["usage"] = self.usage_json(plan.usage_after(produced))  # type: ignore[arg-type]
            elif where.null_others:
                out["usage"] = None
            if final:
                out.update(self.final_chunk_extras(plan))
            return out

        if self.role_chunk:
            yield sse(chunk({"role": "assistant", "content": ""}, None, 0, False))
        n = len(plan.items)
        # Index i is "before piece i"; i == n is after the last piece, before the finish chunk.
        for i in range(n + 1):
            if 0 < i < n:
                deadline += reply.gap_after(i - 1)
                async for flush in wait_until(loop, deadline):
                    yield flush
            if reply.reset_after_chunks == i:
                yield RESET
                return
            if reply.error_at == i:
                yield self.mid_stream_error(reply.error or self.mid_stream_error_kind, reply.message)
                if self.done_after_error:
                    yield DONE
                return
            if reply.malformed_at == i:
                yield MALFORMED_SSE
            if i == n:
                break
            kind, text = plan.items[i]
            delta = self.delta(kind, text)
            if i == 0 and not self.role_chunk:
                delta = {"role": "assistant", **delta}
            out = chunk(delta, None, i + 1, False)
            if logprobs_style is not None and kind == "content":
                entries = self.token_logprobs(plan.request, [text], content_seen)
                out["choices"][0]["logprobs"] = self.logprobs_json(logprobs_style, entries)
                content_seen += 1
            yield sse(out)
            self.generation_tokens_total += 1
        yield sse(chunk({}, plan.finish_reason, n, True))
        if where.empty_chunk:
            final = dict(base)
            final["choices"] = []
            final["usage"] = self.usage_json(plan.usage)  # type: ignore[arg-type]
            yield sse(final)
        if not reply.omit_done:
            yield DONE

    # -- other endpoints --------------------------------------------------------------------------
    async def list_models(self, request: RecordedRequest) -> Response:
        denied = await self.models_preamble(request)
        if denied is not None:
            return denied
        data = [self.model_card(m, ctx) for m, ctx in self.models.items()]
        data += [self.model_card(m, 0) for m in self.embedding_models if m not in self.models]
        return Response.json({"object": "list", "data": data})

    async def models_preamble(self, request: RecordedRequest) -> Response | None:
        """Auth, then a scripted outcome (error, reset, delay) for GET /models, as for the other routes."""
        denied = self.auth_response(request)
        if denied is not None:
            return denied
        if PROBE_HEADER in request.headers:
            return None  # llmroute's identification GET: a test's scripted replies are for its own calls
        return await self.scripted_outcome(self.script.pop(request.path, None) or Reply())

    def model_card(self, model: str, context: int) -> dict[str, Any]:
        return {"id": model, "object": "model", "created": 0, "owned_by": self.platform}


class LenientFormat(dict):
    """format_map helper: unknown placeholders render as '?' instead of raising."""

    def __missing__(self, key: str) -> str:
        return "?"
