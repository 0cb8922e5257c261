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
