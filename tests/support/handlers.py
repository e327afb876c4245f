"""What the test apps' handlers share."""

from __future__ import annotations

import time

import chit


def in_steps(job: chit.JobContext, message: str, seconds: float, steps: int) -> dict:
    """Sleep `seconds` in `steps` (reporting progress after each, when `steps`
    is set), stopping early once the job is cancelled."""
    count = max(steps, 1)
    for step in range(count):
        if job.cancelled:
            return {"stopped_at": step}
        time.sleep(seconds / count)
        if steps:
            job.progress(step + 1, count)
    return {"message": message, "attempt": job.attempt}
