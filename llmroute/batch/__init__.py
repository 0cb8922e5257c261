"""Batch jobs on the platforms' batch APIs (Together, SiliconFlow, Bailian, Fireworks): docs/batch.md.

`client.batches` / `async_client.batches` are the entry points; nothing here is imported by
`import llmroute` until a client's `batches` is first used.
"""

from llmroute.batch.shells import AsyncBatches, Batches, open_job_store
from llmroute.batch.job import BatchResult, JobView, OnlineCall
from llmroute.batch.settings import BatchSettings
from llmroute.batch.store import JobStore
from llmroute.batch.store_postgres import PostgresJobStore

__all__ = ["Batches", "AsyncBatches", "BatchResult", "JobView", "OnlineCall", "BatchSettings", "JobStore",
           "PostgresJobStore", "open_job_store"]
