"""Celery with the Redis broker: W worker instances with a pool of 8 threads
each (the same slots as chit), results ignored, the prefetch multiplier
Celery's optimizing guide suggests for many short tasks.

BENCH_CELERY_POOL=prefork|solo tries another pool (prefork: one instance,
W children)."""

from __future__ import annotations

import os
import time

from celery import Celery
from redis import Redis

from recorder import record
from systems import BIN, CONCURRENCY, System, env

URL = env("BENCH_REDIS_URL")
PREFETCH = 64
POOL = os.environ.get("BENCH_CELERY_POOL", "threads")
app = Celery("bench", broker=URL)
app.conf.update(
    task_ignore_result=True,
    worker_prefetch_multiplier=PREFETCH,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


@app.task(name="noop")
def noop(i: int, t: float) -> None:
    started = time.time()
    record(i, t, started)


class Bench(System):
    def __init__(self) -> None:
        self.redis = Redis.from_url(URL)

    def settings(self) -> str:
        if POOL == "prefork":
            how = "one `celery worker --pool prefork -c W`"
        else:
            how = f"`celery worker --pool {POOL} -c {self.slots}` per process"
        return (
            f"{how} --without-gossip --without-mingle --without-heartbeat; "
            f"prefetch multiplier {PREFETCH}; results ignored; acknowledged on receipt "
            "(Celery's default)"
        )

    @property
    def slots(self) -> int:
        return CONCURRENCY if POOL == "threads" else 1

    def enqueue_one(self, i: int) -> None:
        noop.delay(i, time.time())

    def worker_commands(self, workers: int) -> list[list[str]]:
        def cmd(n: int, concurrency: int) -> list[str]:
            return [str(BIN / "celery"), "-A", __name__, "worker", "--pool", POOL,
                    "-c", str(concurrency), "-n", f"bench{n}@%h", "--loglevel", "WARNING",
                    "--without-gossip", "--without-mingle", "--without-heartbeat"]  # fmt: skip

        if POOL == "prefork":
            return [cmd(0, workers)]
        return [cmd(n, self.slots) for n in range(workers)]

    def waiting(self) -> int:
        return int(self.redis.llen("celery")) + int(self.redis.hlen("unacked"))
