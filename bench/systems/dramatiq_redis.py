"""Dramatiq with the Redis broker: `dramatiq --processes W --threads 8`."""

from __future__ import annotations

import time

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from redis import Redis

from recorder import record
from systems import BIN, CONCURRENCY, System, env

URL = env("BENCH_REDIS_URL")
dramatiq.set_broker(RedisBroker(url=URL))


@dramatiq.actor(queue_name="bench", max_retries=0)
def noop(i: int, t: float) -> None:
    started = time.time()
    record(i, t, started)


class Bench(System):
    def __init__(self) -> None:
        self.redis = Redis.from_url(URL)

    def settings(self) -> str:
        return f"`dramatiq --processes W --threads {CONCURRENCY}`"

    def enqueue_one(self, i: int) -> None:
        noop.send(i, time.time())

    def worker_commands(self, workers: int) -> list[list[str]]:
        return [[str(BIN / "dramatiq"), __name__, "--processes", str(workers),
                 "--threads", str(CONCURRENCY), "--queues", "bench"]]  # fmt: skip

    def waiting(self) -> int:
        # Every message not yet acknowledged, queued or delivered.
        return int(self.redis.hlen("dramatiq:bench.msgs"))
