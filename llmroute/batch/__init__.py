"""Batch jobs on the platforms' batch APIs (Together, SiliconFlow, Bailian, Fireworks): docs/batch.md.

`client.batches` / `async_client.batches` are the entry points; nothing here is imported by
`import llmroute` until a client's `batches` is first used.
"""

from .client import AsyncBatches, Batches, open_job_store
from .job import BatchResult, JobView, OnlineCall
from .settings import BatchSettings
from .store import JobStore
from .store_postgres import PostgresJobStore

__all__ = ["Batches", "AsyncBatches", "BatchResult", "JobView", "OnlineCall", "BatchSettings", "JobStore",
           "PostgresJobStore", "open_job_store"]
