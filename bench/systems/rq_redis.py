"""RQ: `rq worker-pool` of SimpleWorkers (no fork per job: what RQ's own
performance notes recommend for jobs that last milliseconds)."""

from __future__ import annotations

import time

from redis import Redis
from rq import Queue

from recorder import record
from systems import BIN, System, env

URL = env("BENCH_REDIS_URL")
queue = Queue("bench", connection=Redis.from_url(URL))


def noop(i: int, t: float) -> None:
    started = time.time()
    record(i, t, started)


class Bench(System):
    has_bulk = True

    def settings(self) -> str:
        return "`rq worker-pool -n W -w rq.worker.SimpleWorker`: W processes, one job at a time"

    def enqueue_one(self, i: int) -> None:
        queue.enqueue(noop, i, time.time())

    def enqueue_many(self, first: int, n: int) -> None:
        t = time.time()
        queue.enqueue_many([Queue.prepare_data(noop, (i, t)) for i in range(first, first + n)])

    def worker_commands(self, workers: int) -> list[list[str]]:
        return [[str(BIN / "rq"), "worker-pool", "bench", "-n", str(workers),
                 "-w", "rq.worker.SimpleWorker", "-u", URL, "-q"]]  # fmt: skip

    def completed(self) -> int:
        return queue.finished_job_registry.count

    def waiting(self) -> int:
        return queue.count + queue.started_job_registry.count
