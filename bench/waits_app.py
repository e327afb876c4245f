"""The waits bench's handlers (bench/waits_bench.py): a job that waits for the
signal "go" and returns when its wait returned, and a no-op."""

import time

import chit

queue = chit.Queue()


@queue.task("approve", max_attempts=1)
def approve(job: chit.JobContext, body: dict) -> dict:
    data = job.wait_for("go")
    return {"resumed_at": time.time(), "data": data}


@queue.task("noop")
def noop(job: chit.JobContext, body: dict) -> None:
    return None
