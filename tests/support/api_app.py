"""Tasks for the API tests, in-process and in real `chit worker` processes
(`--app support.api_app:queue`, with tests/ on PYTHONPATH)."""

from __future__ import annotations

import os
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

import chit
from support.handlers import in_steps

queue = chit.Queue()  # CHIT_DATABASE_URL and the rest from the environment


def _whole(value: object) -> object:
    # JSON Schema's integer is any number without a fraction: 3.0 is 3.
    return int(value) if type(value) is float and value.is_integer() else value


# Strict, as the JSON schema in /openapi.json reads (schemathesis checks both
# ways): `"permanent": 0` is not a boolean, nor "3" an integer; 3.0 is one.
Whole = Annotated[int, BeforeValidator(_whole)]


class Echo(BaseModel):
    model_config = ConfigDict(strict=True)

    message: str = Field(min_length=1, max_length=1000)
    seconds: float = Field(default=0.0, ge=0, le=60)
    steps: Whole = Field(default=0, ge=0, le=1000)
    fail_times: Whole = Field(default=0, ge=0, le=100)
    permanent: bool = False
    # Fail (retryably) while this file exists: an outage the test can end.
    fail_while_exists: str | None = None


def register(q: chit.Queue) -> chit.Queue:
    @q.task("echo", payload=Echo, max_attempts=3)
    def echo(job: chit.JobContext, body: Echo) -> dict:
        if body.permanent:
            raise chit.PermanentError(f"cannot echo {body.message!r}: refused for good")
        if body.fail_while_exists and os.path.exists(body.fail_while_exists):
            raise ConnectionError("upstream is down")
        if job.attempt <= body.fail_times:
            raise ConnectionError(f"flaky upstream on attempt {job.attempt}")
        return in_steps(job, body.message, body.seconds, body.steps)

    @q.task("big")
    def big(job: chit.JobContext, body: dict) -> dict:
        return {"blob": "x" * int(body.get("size", 100_000))}

    return q


register(queue)
