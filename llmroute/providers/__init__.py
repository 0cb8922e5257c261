"""Platform adapters: one class per platform family, chosen by a provider's `kind` and `protocol`.

An adapter is sans-I/O: it builds requests and parses responses, streams and errors. See `base.py`
for the OpenAI-compatible shape every platform starts from.
"""

from __future__ import annotations

from typing import Type

from llmroute.providers.base import OpenAICompatAdapter
from llmroute.providers.cloud import FireworksAdapter, SiliconFlowAdapter, TogetherAdapter
from llmroute.providers.dashscope import BailianCompatAdapter, BailianNativeAdapter
from llmroute.providers.registry import KINDS, KindSpec
from llmroute.providers.selfhosted import OllamaAdapter, SelfHostedAdapter

__all__ = ["adapter_class", "KINDS", "KindSpec", "OpenAICompatAdapter"]

_ADAPTERS: dict[tuple[str, str], Type[OpenAICompatAdapter]] = {
    ("together", "compatible"): TogetherAdapter,
    ("fireworks", "compatible"): FireworksAdapter,
    ("siliconflow", "compatible"): SiliconFlowAdapter,
    ("bailian", "compatible"): BailianCompatAdapter,
    ("bailian", "native"): BailianNativeAdapter,
    ("ollama", "compatible"): OllamaAdapter,
}
for _kind in ("vllm", "sglang", "tgi", "llamacpp", "openai-compatible"):
    _ADAPTERS[(_kind, "compatible")] = SelfHostedAdapter


def adapter_class(kind: str, protocol: str = "compatible") -> Type[OpenAICompatAdapter]:
    return _ADAPTERS[(kind, protocol)]
