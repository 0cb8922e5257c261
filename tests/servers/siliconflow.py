"""Loopback SiliconFlow (硅基流动) server (docs/platforms.md §3): its chat wire format and documented quirks.

Reproduced: cumulative `usage` on every stream chunk whether or not include_usage is
sent (prompt constant, completion incrementing); `system_fingerprint: ""`;
`delta.reasoning_content` with max_tokens not counting the chain of thought; the
non-OpenAI error body `{"code": int, "message", "data": null}`; 403 for real-name
verification; 429 naming the limit (TPM, RPM...); `x-siliconcloud-trace-id`.
Never calls the real platform.
"""

from __future__ import annotations

from typing import Any

from tests.servers.openai_compat import ErrorSpec, OpenAICompatServer, Plan, Reply


class SiliconFlowServer(OpenAICompatServer):
    platform = "siliconflow"
    base_path = "/v1"
    # docs/embeddings.md: bge-m3 1024 fixed; Qwen3-Embedding takes `dimensions`.
    embedding_models = {"BAAI/bge-m3": 1024, "Qwen/Qwen3-Embedding-8B": 4096}
    dimensions_models = {"Qwen/Qwen3-Embedding-8B": (4096, 2560, 2048, 1024, 768, 512, 256, 128, 64)}
    default_models = {  # §3 Models: HF-style ids, Pro/ variants; 32K contexts are unconfirmed
        "Qwen/Qwen2.5-7B-Instruct": 32_768,
        "Qwen/Qwen2.5-72B-Instruct": 32_768,
        "Pro/Qwen/Qwen2.5-7B-Instruct": 32_768,
        "meta-llama/Meta-Llama-3.1-8B-Instruct": 32_768,
        "Pro/deepseek-ai/DeepSeek-R1": 98_304,
        "deepseek-ai/DeepSeek-V3.2": 163_840,  # intl: priced with a cached-input rate
    }
    default_api_key = "sk-siliconflow-test"
    reasoning_field = "reasoning_content"  # §3 Streaming SSE: delta.reasoning_content
    usage_placement = "every_chunk"  # §3 observed: cumulative usage on every chunk
    usage_null_on_chunks = False
    max_tokens_fields = ("max_tokens",)  # §3 Request fields
    chunk_extras = {"system_fingerprint": ""}  # §3 observed capture
    mid_stream_error_kind = "server"
    done_after_error = False

    errors = {
        # §3 Errors: {"code":20012,"message":"Model does not exist. Please check it carefully.","data":null}
        # is documented; the other numeric codes are unconfirmed placeholders in the same shape.
        "not_found": ErrorSpec(400, None, 20012, "Model does not exist. Please check it carefully."),
        "auth": ErrorSpec(401, None, 20003, "Invalid token"),
        "bad_request": ErrorSpec(400, None, 20015, "Invalid request parameters."),
        # §3: context-overflow shape unconfirmed; this follows the documented envelope.
        "context": ErrorSpec(400, None, 20015,
                             "length of prompt_tokens ({prompt}) + max_tokens ({max_tokens}) must be less than "
                             "max_seq_len ({context})."),
        # §3: 403 most commonly "the model requires real-name verification (实名认证)".
        "real_name": ErrorSpec(403, None, 30011,
                               "Sorry, the model requires real-name verification (实名认证) before use."),
        "forbidden": ErrorSpec(403, None, 30001, "Sorry, your account balance is insufficient."),
        # §3: "429 rate limit; the message says which of RPM/RPD/TPM/TPD/IPM/IPD was hit".
        "rate_limit": ErrorSpec(429, None, 50603, "Request was rejected due to rate limiting. Details: TPM limit reached."),
        "rate_limit_rpm": ErrorSpec(429, None, 50603,
                                    "Request was rejected due to rate limiting. Details: RPM limit reached."),
        "server": ErrorSpec(500, None, 50500, "Unknown error."),
        "overloaded": ErrorSpec(503, None, 50505, "Model service overloaded. Please try again later."),  # §3 503/504
    }

    def error_body(self, spec: ErrorSpec, message: str, param: str | None) -> Any:
        return {"code": spec.code, "message": message, "data": None}

    def wants_stream_usage(self, body: dict[str, Any]) -> bool:
        return True  # §3: usage on every chunk regardless of stream_options (observed)

    def make_plan(self, body: dict[str, Any], model: str, prompt: int, limit: int | None, reply: Reply) -> Plan:
        # §3: max_tokens "does not include the chain of thought": cut content only.
        plan = super().make_plan(body, model, prompt, None, reply)
        if limit is not None:
            reasoning = [i for i in plan.items if i[0] == "reasoning"]
            content = [i for i in plan.items if i[0] == "content"]
            if len(content) > limit:
                plan.items = reasoning + content[:limit]
                plan.finish_reason = reply.finish_reason or "length"
                if plan.usage is not None and not (reply.usage and "completion_tokens" in reply.usage):
                    plan.usage.completion = len(plan.items)
        return plan

    def response_headers(self, plan: Plan | None) -> dict[str, str]:
        return {"x-siliconcloud-trace-id": f"trace-{next(self._ids)}"}  # §3 response header
