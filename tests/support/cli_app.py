"""Tasks for the CLI tests: one with a payload model, one without, one that
always fails (with the message it is given) and one that fails once."""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, Field

import chit

queue = chit.Queue()


class Report(BaseModel):
    region: str = Field(min_length=1, max_length=20)
    seconds: float = Field(default=0, ge=0, le=30)


@queue.task("report", payload=Report, max_attempts=3)
def report(job: chit.JobContext, body: Report) -> dict[str, Any]:
    time.sleep(body.seconds)
    return {"region": body.region, "attempt": job.attempt}


@queue.task("echo")
def echo(job: chit.JobContext, body: dict[str, Any]) -> dict[str, Any]:
    return body


@queue.task("boom", max_attempts=1)
def boom(job: chit.JobContext, body: dict[str, Any]) -> None:
    raise RuntimeError(body.get("message", "boom"))


@queue.task("stepped", max_attempts=3)
def stepped(job: chit.JobContext, body: dict[str, Any]) -> dict[str, Any]:
    """A durable step, then a failure on the first attempt: the second attempt
    gets the step's result back (stored by attempt 1)."""
    fetched = job.step("fetch", lambda: {"rows": 3, "by": job.attempt})
    if job.attempt == 1:
        raise ConnectionError("after the step")
    return {"fetched": fetched, "attempt": job.attempt}


@queue.task("flaky", max_attempts=3)
def flaky(job: chit.JobContext, body: dict[str, Any]) -> dict[str, int]:
    if job.attempt == 1:
        raise ConnectionError("first attempt always fails\nsecond line of detail")
    return {"attempt": job.attempt}
