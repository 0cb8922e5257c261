from tests.batch.helpers import batch_servers, servers  # noqa: F401

# The real PostgreSQL fixtures (tests/state), for the PostgreSQL job store tests.
from tests.state.conftest import pg_url, postgres_server  # noqa: E402, F401
