"""What each platform kind is: its default base URL per region, its key variable, its protocol quirks.

A `KindSpec` is data, read by the config loader (defaults, validation) and by the adapters
(request shape). Facts and their sources are in `docs/platforms.md`; the section is named
next to each entry. This module does no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

__all__ = ["KindSpec", "KINDS", "SELF_HOSTED_KINDS", "CLOUD_KINDS"]


@dataclass(frozen=True)
class KindSpec:
    kind: str
    # region -> base URL; the key None holds the default when the kind has no regions.
    base_urls: Mapping[str | None, str]
    default_region: str | None = None
    key_env: str | None = None
    key_required: bool = True
    # Send stream_options.include_usage by default (docs/platforms.md §11.1).
    include_usage: bool = True
    # The name the platform documents for the output cap (docs/platforms.md §11.14).
    max_tokens_field: str = "max_tokens"
    protocols: tuple[str, ...] = ("compatible",)
    # Native DashScope roots, per region (docs/platforms.md §4b).
    native_base_urls: Mapping[str | None, str] = field(default_factory=dict)
    self_hosted: bool = False
    # Streamed chunks carry log probabilities as complete as a plain answer's, so a plain call asking
    # for them can be read as a stream (docs/platforms.md §11.15).
    streams_logprobs: bool = False


KINDS: dict[str, KindSpec] = {
    # docs/platforms.md §1: one global endpoint; usage on the finish_reason chunk for most models.
    "together": KindSpec("together", {None: "https://api.together.xyz/v1"}, key_env="TOGETHER_API_KEY"),
    # §2: no stream_options in its spec; usage always comes on the last chunk.
    "fireworks": KindSpec(
        "fireworks", {None: "https://api.fireworks.ai/inference/v1"}, key_env="FIREWORKS_API_KEY", include_usage=False,
        streams_logprobs=True,
    ),
    # §3: .cn and .com are separate platforms with separate keys.
    "siliconflow": KindSpec(
        "siliconflow",
        {"cn": "https://api.siliconflow.cn/v1", "intl": "https://api.siliconflow.com/v1"},
        default_region="cn",
        key_env="SILICONFLOW_API_KEY",
    ),
    # §4a/§4b: keys are bound to a region; compatible mode wants max_completion_tokens from 2026-05-30.
    "bailian": KindSpec(
        "bailian",
        {
            "cn-beijing": "https://dashscope.aliyuncs.com/compatible-mode/v1",
            "singapore": "https://dashscope-intl.aliyuncs.com/compatible-mode/v1",
            "us": "https://dashscope-us.aliyuncs.com/compatible-mode/v1",
        },
        default_region="cn-beijing",
        key_env="DASHSCOPE_API_KEY",
        max_tokens_field="max_completion_tokens",
        protocols=("compatible", "native"),
        native_base_urls={
            "cn-beijing": "https://dashscope.aliyuncs.com/api/v1",
            "singapore": "https://dashscope-intl.aliyuncs.com/api/v1",
            "us": "https://dashscope-us.aliyuncs.com/api/v1",
        },
    ),
    # §5-§9: self-hosted servers; the key is optional (--api-key), the base URL is the user's.
    "vllm": KindSpec("vllm", {None: "http://127.0.0.1:8000/v1"}, key_required=False, self_hosted=True, streams_logprobs=True),
    "sglang": KindSpec("sglang", {None: "http://127.0.0.1:30000/v1"}, key_required=False, self_hosted=True, streams_logprobs=True),
    "tgi": KindSpec("tgi", {None: "http://127.0.0.1:8080/v1"}, key_required=False, self_hosted=True, streams_logprobs=True),
    "llamacpp": KindSpec("llamacpp", {None: "http://127.0.0.1:8080/v1"}, key_required=False, self_hosted=True, streams_logprobs=True),
    "ollama": KindSpec("ollama", {None: "http://127.0.0.1:11434/v1"}, key_required=False, self_hosted=True),
    "openai-compatible": KindSpec("openai-compatible", {}, key_required=False, self_hosted=True),
}

SELF_HOSTED_KINDS = frozenset(k for k, s in KINDS.items() if s.self_hosted)
CLOUD_KINDS = frozenset(k for k, s in KINDS.items() if not s.self_hosted)
