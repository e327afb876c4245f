"""The cost_rate bench's handlers (bench/cost_rate_bench.py): kind `spend`
with a `cost_rate` (BENCH_COST_RATE, default 2500/s). Each run appends
"job_id attempt spent" to BENCH_COST_LOG (one short write: whole lines from
every process); with body["actual"] it first reports that as what it spent
(`job.report_cost`), else the estimate (the job's `cost`) stands."""

import os
import threading

import chit

queue = chit.Queue()
RATE = os.environ.get("BENCH_COST_RATE", "2500/s")


@queue.task("spend", cost_rate=RATE)
def spend(job: chit.JobContext, body: dict) -> None:
    spent = body["cost"]
    if body.get("actual") is not None:
        spent = body["actual"]
        job.report_cost(spent)
    threading.Event().wait(body.get("seconds", 0.005))  # a call to a provider
    line = f"{job.id} {job.attempt} {spent}\n".encode()
    fd = os.open(os.environ["BENCH_COST_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
