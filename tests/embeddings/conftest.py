"""`platform`: each platform of tests/embeddings/helpers.PLATFORMS with its session loopback server, reset."""

from __future__ import annotations

import pytest

from tests.embeddings.helpers import PLATFORMS, SERVER_OF


@pytest.fixture(params=sorted(PLATFORMS))
def platform(request, loopback_servers):
    name = request.param
    server = loopback_servers.get(SERVER_OF.get(name, name))
    server.reset()
    yield name, server
    server.reset()
