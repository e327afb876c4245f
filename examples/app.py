"""The classic cases, run by `make up`:

- `sales_report`: slow, and can be told to fail its first N attempts, to watch
  retries with backoff and then success (or failure once attempts run out).
- `classify`: works through many items, reporting progress and checkpointing,
  so a job reclaimed after its worker died resumes where it stopped.

Delivery is at least once: a job can run again after a crash, so side
effects are keyed on `job.id` (see `classify`, which skips finished items).
"""

from __future__ import annotations

import time

from pydantic import BaseModel, Field

import chit

queue = chit.Queue()


class ReportRequest(BaseModel):
    region: str = Field(min_length=1, max_length=64)
    quarter: str = Field(default="2026-Q3", pattern=r"^\d{4}-Q[1-4]$")
    seconds: float = Field(default=2.0, ge=0, le=600, description="how long the work takes")
    fail_times: int = Field(default=0, ge=0, le=100, description="fail the first N attempts")


@queue.task("sales_report", payload=ReportRequest, max_attempts=3)
def sales_report(job: chit.JobContext, body: ReportRequest) -> dict:
    if job.attempt <= body.fail_times:
        raise ConnectionError(f"warehouse unreachable (attempt {job.attempt})")
    steps = 10
    for step in range(steps):
        if job.cancelled:
            return {"cancelled_at_step": step}
        time.sleep(body.seconds / steps)
        job.progress(step + 1, steps)
    return {"region": body.region, "quarter": body.quarter, "total": 1000 * len(body.region)}


class ClassifyRequest(BaseModel):
    items: list[str] = Field(min_length=1, max_length=100_000)
    seconds_per_item: float = Field(default=0.05, ge=0, le=60)


def _label(text: str) -> str:
    return "long" if len(text) > 8 else "short"


# At most two at once across every worker: say the model fits in memory twice.
@queue.task("classify", payload=ClassifyRequest, max_attempts=5, concurrency=2)
def classify(job: chit.JobContext, body: ClassifyRequest) -> dict:
    state = job.last_checkpoint or {"next": 0, "labels": {}}
    labels: dict[str, int] = state["labels"]
    total = len(body.items)
    for index in range(state["next"], total):
        if job.cancelled:
            raise chit.PermanentError("cancelled by request")
        time.sleep(body.seconds_per_item)
        label = _label(body.items[index])
        labels[label] = labels.get(label, 0) + 1
        job.progress(index + 1, total)
        if (index + 1) % 10 == 0:
            job.checkpoint({"next": index + 1, "labels": labels})
    return {"items": total, "labels": labels, "resumed_from": state["next"]}


def demo(q: chit.Queue) -> list[str]:
    """A few jobs to watch flow through `make up`."""
    jobs = [
        chit.JobRequest("sales_report", {"region": "emea", "seconds": 3}),
        chit.JobRequest("sales_report", {"region": "apac", "seconds": 2, "fail_times": 2}),
        chit.JobRequest("sales_report", {"region": "amer", "seconds": 1, "fail_times": 5}),
        chit.JobRequest("classify", {"items": [f"item-{i:04d}" for i in range(200)]}),
    ]
    return [e.id for e in q.enqueue_many(jobs)]
