"""`chit.Client` and `chit.AsyncClient`: the HTTP API from Python, on httpx.

    client = chit.Client("http://127.0.0.1:8718", api_key="chit_...")
    job = client.submit("sales_report", {"region": "emea"}, idempotency_key="emea-q3")
    status = client.wait(job.job_id, timeout=600)   # polls, honouring Retry-After
    print(status.state, status.result)
    client.set_limits("call_partner", concurrency=3, rate="20/s")   # an admin key of every tenant
    client.pause(queue="emails")
    client.put_schedule("nightly", "digest", {"list": "all"}, cron="0 8 * * *", tz="Europe/Paris")

Errors the server answers raise `APIError` subclasses that are also the
matching local exceptions, so `except chit.JobNotFound` works either way:

APIError (ChitError)          status, code, message, details
 ├── APINotFound (JobNotFound)                404
 │    └── APIWorkflowNotFound (WorkflowNotFound)  404 for a workflow
 ├── APIInvalidRequest (InvalidRequest)       400, 413, 415, 422
 ├── APIIdempotencyConflict (IdempotencyConflict)
 ├── APIConflict (InvalidTransition)          409
 └── APIUnavailable (StoreError)              503, or the server cannot be reached

Building requests, reading answers and the polling of `wait` are written once,
without I/O, in `calls` (as in httpx, only the sending is twinned: `sync`
holds `Client`, `aio` `AsyncClient`); `errors` the exceptions, `sse` the
event stream's parsing.
"""

from __future__ import annotations

from chit.extras import needs

# An extra (chit[client]): without it, importing this package says which to install.
with needs("client", "the HTTP client (chit.Client, --url) needs httpx"):
    import httpx  # noqa: F401

from chit.client.aio import AsyncClient
from chit.client.calls import DEFAULT_TIMEOUT, poll_delay
from chit.client.errors import (
    APIConflict,
    APIError,
    APIIdempotencyConflict,
    APIInvalidRequest,
    APINotFound,
    APIUnavailable,
    APIWorkflowNotFound,
)
from chit.client.sse import Event, SSEParser, Streamed
from chit.client.sync import Client

__all__ = [
    "DEFAULT_TIMEOUT",
    "APIConflict",
    "APIError",
    "APIIdempotencyConflict",
    "APIInvalidRequest",
    "APINotFound",
    "APIUnavailable",
    "APIWorkflowNotFound",
    "AsyncClient",
    "Client",
    "Event",
    "SSEParser",
    "Streamed",
    "poll_delay",
]
