"""chit: durable background jobs in a table you can query.

queue = chit.Queue()

@queue.task("sales_report", payload=ReportRequest, max_attempts=3)
def sales_report(job: chit.JobContext, body: ReportRequest) -> dict: ...
"""

from chit.client import AsyncClient, Client
from chit.context import JobContext
from chit.errors import (
    ChitError,
    ConfigError,
    IdempotencyConflict,
    InvalidPayload,
    InvalidRequest,
    InvalidTransition,
    JobNotFound,
    PayloadTooLarge,
    PermanentError,
    StoreError,
    UnknownKind,
)
from chit.jobs import Job, State
from chit.queue import JobRequest, Queue
from chit.settings import Settings
from chit.worker import Worker

__all__ = [
    "AsyncClient",
    "ChitError",
    "Client",
    "ConfigError",
    "IdempotencyConflict",
    "InvalidPayload",
    "InvalidRequest",
    "InvalidTransition",
    "Job",
    "JobContext",
    "JobNotFound",
    "JobRequest",
    "PayloadTooLarge",
    "PermanentError",
    "Queue",
    "Settings",
    "State",
    "StoreError",
    "UnknownKind",
    "Worker",
]
