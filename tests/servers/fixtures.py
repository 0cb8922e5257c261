"""pytest fixtures for the loopback platform servers (re-exported by tests/conftest.py).

One server per platform is started once per test session, on first use, and
stopped at session end; the function-scoped fixture `<platform>_server` resets it
(script, default reply, recorded requests, engine/health flags) before each test,
so tests never see each other's replies. A test that needs a differently
configured server uses `make_server("vllm", legacy_errors=True)`, which stops
that server when the test ends. Nothing here touches anything but 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.servers.openai_compat import OpenAICompatServer
from tests.servers.registry import SERVERS

__all__ = [
    "loopback_servers", "make_server", "openai_server", "together_server", "fireworks_server",
    "siliconflow_server", "bailian_server", "vllm_server", "sglang_server", "tgi_server",
    "ollama_server", "fault_server",
]


class _SessionServers:
    def __init__(self) -> None:
        self._started: dict[str, OpenAICompatServer] = {}

    def get(self, platform: str) -> OpenAICompatServer:
        server = self._started.get(platform)
        if server is None:
            server = SERVERS[platform]().start()  # type: ignore[assignment]
            self._started[platform] = server
        return server

    def stop_all(self) -> None:
        for server in self._started.values():
            server.stop()
        self._started.clear()


def _fresh(server: OpenAICompatServer) -> OpenAICompatServer:
    server.reset()
    for flag, value in (("engine_dead", False), ("healthy", True)):
        if hasattr(server, flag):
            setattr(server, flag, value)
    return server


@pytest.fixture(scope="session")
def loopback_servers() -> Iterator[_SessionServers]:
    servers = _SessionServers()
    yield servers
    servers.stop_all()


def _platform_fixture(platform: str) -> Callable[..., Any]:
    @pytest.fixture(name=f"{platform}_server")
    def fixture(loopback_servers: _SessionServers) -> Iterator[OpenAICompatServer]:
        server = _fresh(loopback_servers.get(platform))
        yield server
        _fresh(server)

    fixture.__doc__ = f"The session's loopback {platform} server, reset before and after the test."
    return fixture


openai_server = _platform_fixture("openai")
together_server = _platform_fixture("together")
fireworks_server = _platform_fixture("fireworks")
siliconflow_server = _platform_fixture("siliconflow")
bailian_server = _platform_fixture("bailian")
vllm_server = _platform_fixture("vllm")
sglang_server = _platform_fixture("sglang")
tgi_server = _platform_fixture("tgi")
ollama_server = _platform_fixture("ollama")
fault_server = _platform_fixture("fault")


@pytest.fixture
def make_server() -> Iterator[Callable[..., OpenAICompatServer]]:
    """Factory: `make_server("together", api_key="k", models={...})` -> a started server, stopped after the test."""
    started: list[OpenAICompatServer] = []

    def factory(platform: str, **kwargs: Any) -> OpenAICompatServer:
        server = SERVERS[platform](**kwargs).start()
        started.append(server)  # type: ignore[arg-type]
        return server  # type: ignore[return-value]

    yield factory
    for server in started:
        server.stop()
