"""Name -> server class for every loopback platform server (used by run.py and the fixtures).

It must stay a plain table: no server is started here.
"""

from __future__ import annotations

from tests.servers.bailian import BailianServer
from tests.servers.fault import FaultServer
from tests.servers.fireworks import FireworksServer
from tests.servers.ollama import OllamaServer
from tests.servers.openai import OpenAIServer
from tests.servers.openai_compat import OpenAICompatServer
from tests.servers.sglang import SGLangServer
from tests.servers.siliconflow import SiliconFlowServer
from tests.servers.tgi import TGIServer
from tests.servers.together import TogetherServer
from tests.servers.vllm import VLLMServer

SERVERS: dict[str, type[OpenAICompatServer]] = {
    "openai": OpenAIServer,
    "together": TogetherServer,
    "fireworks": FireworksServer,
    "siliconflow": SiliconFlowServer,
    "bailian": BailianServer,
    "vllm": VLLMServer,
    "sglang": SGLangServer,
    "tgi": TGIServer,
    "ollama": OllamaServer,
    "fault": FaultServer,
}
