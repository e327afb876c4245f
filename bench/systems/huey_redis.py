"""Huey's Redis storage (RedisHuey: blocking pops), run by `huey_consumer`
with worker threads."""

from __future__ import annotations

import time

from huey import RedisHuey

from recorder import record
from systems import BIN, CONCURRENCY, System, env

huey = RedisHuey("bench", url=env("BENCH_REDIS_URL"))


@huey.task()
def noop(i: int, t: float) -> None:
    started = time.time()
    record(i, t, started)


class Bench(System):
    def settings(self) -> str:
        return f"`huey_consumer -k thread -w {CONCURRENCY}` per process; blocking pops"

    def enqueue_one(self, i: int) -> None:
        noop(i, time.time())

    def worker_commands(self, workers: int) -> list[list[str]]:
        cmd = [str(BIN / "huey_consumer"), f"{__name__}.huey", "-k", "thread",
               "-w", str(CONCURRENCY), "-q"]  # fmt: skip
        return [cmd] * workers

    def waiting(self) -> int:
        return huey.pending_count()
