from tests.batch.helpers import batch_servers, servers  # noqa: F401
