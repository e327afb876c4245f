"""The pools benchmark's Celery app (bench/pools.py): the same two tasks as
pools_chit.py, configured as systems/celery_redis.py (Redis broker, results
ignored, prefetch multiplier 64)."""

from __future__ import annotations

import os
import time

from celery import Celery

from pools import CPU_SECONDS, spin
from recorder import record

app = Celery("pools", broker=os.environ["BENCH_REDIS_URL"])
app.conf.update(
    task_ignore_result=True,
    worker_prefetch_multiplier=64,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


@app.task(name="noop")
def noop(i: int, t: float) -> None:
    started = time.time()
    record(i, t, started)


@app.task(name="cpu")
def cpu(i: int, t: float) -> None:
    started = time.time()
    spin(CPU_SECONDS)
    record(i, t, started)


if __name__ == "__main__":  # enqueue N jobs of WORKLOAD: python bench/pools_celery.py WORKLOAD N
    import sys

    task = {"noop": noop, "cpu": cpu}[sys.argv[1]]
    t = time.time()
    for i in range(int(sys.argv[2])):
        task.delay(i, t)
