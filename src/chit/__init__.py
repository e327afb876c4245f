"""chit: durable background jobs in a table you can query.

queue = chit.Queue()

@queue.task("sales_report", payload=ReportRequest, max_attempts=3)
def sales_report(job: chit.JobContext, body: ReportRequest) -> dict: ...
"""

from importlib import metadata
from typing import TYPE_CHECKING, Any

from chit.context import JobContext
from chit.errors import (
    ChitError,
    ConfigError,
    IdempotencyConflict,
    InvalidOutput,
    InvalidPayload,
    InvalidRequest,
    InvalidStep,
    InvalidTransition,
    InvalidWait,
    JobFinished,
    JobNotFound,
    PayloadTooLarge,
    PermanentError,
    Snooze,
    StoreError,
    Suspend,
    UnknownKind,
    WorkflowNotFound,
)
from chit.jobs import Job, RunOn, State, Workflow
from chit.queue import Queue
from chit.requests import JobRequest
from chit.settings import Settings
from chit.worker import Worker

__all__ = [
    "AsyncClient",
    "ChitError",
    "Client",
    "ConfigError",
    "IdempotencyConflict",
    "InvalidOutput",
    "InvalidPayload",
    "InvalidRequest",
    "InvalidStep",
    "InvalidTransition",
    "InvalidWait",
    "Job",
    "JobContext",
    "JobFinished",
    "JobNotFound",
    "JobRequest",
    "PayloadTooLarge",
    "PermanentError",
    "Queue",
    "RunOn",
    "Settings",
    "Snooze",
    "State",
    "StoreError",
    "Suspend",
    "UnknownKind",
    "Worker",
    "Workflow",
    "WorkflowNotFound",
]

try:
    # The version is written once, in pyproject.toml.
    __version__ = metadata.version("chit")
except metadata.PackageNotFoundError:  # run from a source tree never installed
    __version__ = "0+unknown"

if TYPE_CHECKING:
    from chit.client import AsyncClient, Client


def __getattr__(name: str) -> Any:
    # The HTTP client (httpx) loads on first use: workers and the CLI rarely need it.
    if name in ("Client", "AsyncClient"):
        from chit import client

        return getattr(client, name)
    raise AttributeError(f"module 'chit' has no attribute {name!r}")
