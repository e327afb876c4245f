"""The queue the aenqueue tests of tests/store enqueue through, on any backend."""

from __future__ import annotations

import pydantic

import chit
from chit.settings import Settings


class Report(pydantic.BaseModel):
    region: str
    year: int = 2026


def report_queue(database_url: str) -> chit.Queue:
    """Kinds "report" (a payload model and options of its own) and "free"; a
    2,000-byte payload limit."""
    q = chit.Queue(settings=Settings(database_url=database_url, max_payload_bytes=2000))
    q.task("report", payload=Report, max_attempts=3, queue="reports", priority=5)(
        lambda job, body: None
    )
    q.task("free")(lambda job, body: None)
    return q
