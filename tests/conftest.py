"""Shared pytest configuration.

The loopback platform-server fixtures (`together_server`, ..., `fault_server`,
`make_server`) are defined in tests/servers/fixtures.py and re-exported here.
"""

from tests.servers.fixtures import *  # noqa: F401,F403
