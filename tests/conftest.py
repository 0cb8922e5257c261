"""Shared pytest configuration.

The loopback platform-server fixtures (`together_server`, ..., `fault_server`,
`make_server`) are defined in tests/servers/fixtures.py and re-exported here.
"""

from tests.servers.fixtures import *  # noqa: F401,F403

import pytest  # noqa: E402

from tests.servers.llamacpp import start_llama_server  # noqa: E402


@pytest.fixture(scope="session")
def llama_server():
    """A real llama.cpp server (xllamacpp + Gemma 3 270M) for the whole session; stops itself."""
    server = start_llama_server()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def _fresh_server_identities():
    """Forget the process's server identifications (llmroute/_call/server_probe.py) around each test: each
    test's loopback servers are new, but the OS may give one the port an earlier test's server had, and the
    identification is kept per base URL (for an hour; "not identified" for a minute)."""
    from llmroute._call.server_probe import _REGISTRY

    def forget() -> None:
        with _REGISTRY.lock:
            _REGISTRY.known.clear()
            _REGISTRY.found_at.clear()

    forget()
    yield
    forget()
