"""Tasks for the dashboard's tests, in-process and in real `chit worker`
processes (`--app support.dashboard_app:queue`, with tests/ on PYTHONPATH)."""

from __future__ import annotations

import os
import time

from pydantic import BaseModel, Field

import chit
from support.handlers import in_steps

queue = chit.Queue()  # CHIT_DATABASE_URL and the rest from the environment


class Work(BaseModel):
    message: str = Field(min_length=1, max_length=1000)
    seconds: float = Field(default=0.0, ge=0, le=60)
    steps: int = Field(default=0, ge=0, le=1000)
    # While this file exists the job fails: an outage the test ends by deleting it.
    fail_while_exists: str | None = None
    permanent: bool = False
    # While this file exists the job keeps running (holding its slot of a limit).
    hold_while_exists: str | None = None


def register(q: chit.Queue) -> chit.Queue:
    @q.task("work", payload=Work, max_attempts=1)
    def work(job: chit.JobContext, body: Work) -> dict:
        if body.fail_while_exists and os.path.exists(body.fail_while_exists):
            if body.permanent:
                raise chit.PermanentError(f"upstream rejected {body.message!r}")
            raise ConnectionError("upstream is down")
        return in_steps(job, body.message, body.seconds, body.steps)

    # At most one at a time across every worker: the flow-control tests' kind.
    @q.task("partner", payload=Work, max_attempts=1, concurrency=1)
    def partner(job: chit.JobContext, body: Work) -> dict:
        while body.hold_while_exists and os.path.exists(body.hold_while_exists):
            if job.cancelled:
                return {"stopped": True}
            time.sleep(0.02)  # polling the file the test deletes, as wait_until polls
        return {"message": body.message}

    @q.task("report")
    def report(job: chit.JobContext, body: dict) -> dict:
        return {"rows": int(body.get("rows", 0))}

    # Emits body["count"] tokens, body["every"] seconds apart, saying so in its progress.
    @q.task("stream", max_attempts=1)
    def stream(job: chit.JobContext, body: dict) -> dict:
        count = int(body["count"])
        for i in range(count):
            job.emit({"token": f"t{i}"})
            job.progress(i + 1, count, message=f"token {i + 1} of {count}")
            time.sleep(float(body["every"]))
        return {"tokens": count}

    # Waits for a person: the job page's signal form sends "approval".
    @q.task("approval", max_attempts=1)
    def approval(job: chit.JobContext, body: dict) -> dict:
        return {"decision": job.wait_for("approval", timeout=3600)}

    return q


register(queue)
