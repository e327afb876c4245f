"""One module per system under test, each with a `Bench` class and the no-op task.

A module is imported twice: by the driver (to enqueue, count and seed) and by
the system's own worker processes (to find the task), so the app objects are
built at import from the environment the driver passes down:
BENCH_SQLITE_PATH, BENCH_PG_DSN, BENCH_REDIS_URL (and CHIT_DATABASE_URL for chit).

Every task has the same body: take `time.time()` first, then `record(i, t,
started)`, where `t` is the `time.time()` the driver took just before
enqueueing job number `i`.
"""

from __future__ import annotations

import os
import random
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

BIN = Path(sys.executable).parent

# Slots per worker process wherever the system has a setting for it (threads,
# coroutines): the same number chit's own benchmark uses.
CONCURRENCY = 8


def kind_limits() -> str:
    """The no-op kind's limits in the flow-control steps, for `settings()`."""
    concurrency = os.environ.get("BENCH_KIND_CONCURRENCY")
    rate = os.environ.get("BENCH_KIND_RATE")
    return (f"; task `concurrency={concurrency}`" if concurrency else "") + (
        f'; task `rate="{rate}"`' if rate else ""
    )


def env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise RuntimeError(f"{name} is not set: run the benchmark through bench/run.py")
    return value


def arrival_gaps(first: int, spacing: float) -> Iterator[float]:
    """The gaps between a latency run's enqueues: each from half to one and a
    half times `spacing`, the same draws every run. A fixed gap can lock in
    step with a worker that polls (SQLite's every 0.5 ms): two builds whose
    enqueues differ by microseconds measured 1.63 and 1.36 ms (the medians of
    six runs each, taking turns), and 1.44 and 1.47 ms with drawn gaps, which
    meet every phase of a poll alike."""
    draws = random.Random(first)
    while True:
        yield spacing * (0.5 + draws.random())


class System:
    """What the driver needs from a system. Override what the system has."""

    has_bulk = False

    def settings(self) -> str:
        """How its workers run, for the report."""
        raise NotImplementedError

    def setup(self) -> None:
        """Create the schema in the fresh database, if the system has one."""

    def enqueue_one(self, i: int) -> None:
        raise NotImplementedError

    def leave_features_behind(self) -> dict[str, int]:
        """What the other features leave in the database (features.py)."""
        raise NotImplementedError

    def enqueue_each(self, first: int, n: int, spacing: float = 0.0) -> None:
        """Enqueue jobs first..first+n-1 one call at a time, `spacing` seconds
        apart on average (`arrival_gaps`)."""
        gaps = arrival_gaps(first, spacing)
        next_at = time.perf_counter()
        for i in range(first, first + n):
            if spacing:
                delay = next_at - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                next_at += next(gaps)
            self.enqueue_one(i)

    def enqueue_many(self, first: int, n: int) -> None:
        raise NotImplementedError

    def worker_commands(self, workers: int) -> list[list[str]]:
        """One argv per OS process the driver starts for `workers` worker processes."""
        raise NotImplementedError

    def completed(self) -> int | None:
        """Jobs the store records as done, or None when it keeps no such record."""
        return None

    def waiting(self) -> int:
        """Jobs enqueued and not yet finished (queued, or delivered and not acknowledged)."""
        raise NotImplementedError

    def attempt_starts(self) -> list[float] | None:
        """When each attempt started by the store's own record (seconds since
        1970, in order), or None when the system keeps no such record."""
        return None

    def seed(self, finished: int, queued: int, analyze: bool = False) -> None:
        """Bulk-insert `finished` done jobs and `queued` no-op jobs, numbered from 0;
        then gather planner statistics if `analyze`."""
        raise NotImplementedError

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class Info:
    """What the orchestrator knows of a system without importing it (it runs in
    the peers' virtual environment, where chit is not installed, and the other
    way round)."""

    module: str
    title: str
    backend: str  # SQLite, PostgreSQL or Redis
    venv: str  # "chit" (the project's .venv) or "peers" (bench/.venv-peers)
    packages: tuple[str, ...]  # distributions whose versions the report gives
    seeds: bool = False  # has a bulk-SQL seed for the growth workload
    env: tuple[tuple[str, str], ...] = ()  # set for its driver and workers


# In the order systems take turns.
INFO = {
    "chit-sqlite": Info("chit_sqlite", "chit", "SQLite", "chit", ("chit",), seeds=True),
    "chit-sqlite-full": Info(
        "chit_sqlite",
        "chit, synchronous=FULL",
        "SQLite",
        "chit",
        ("chit",),
        env=(("CHIT_SQLITE_SYNCHRONOUS", "FULL"),),
    ),
    "huey-sqlite": Info("huey_sqlite", "Huey (SqliteHuey)", "SQLite", "peers", ("huey",)),
    "chit-postgres": Info(
        "chit_postgres", "chit", "PostgreSQL", "chit", ("chit", "psycopg"), seeds=True
    ),
    "pgqueuer": Info("pgqueuer_pg", "PgQueuer", "PostgreSQL", "peers", ("pgqueuer", "asyncpg")),
    "procrastinate": Info(
        "procrastinate_pg", "Procrastinate", "PostgreSQL", "peers", ("procrastinate", "psycopg")
    ),
    "chit-redis": Info("chit_redis", "chit", "Redis", "chit", ("chit", "redis")),
    "huey-redis": Info("huey_redis", "Huey (RedisHuey)", "Redis", "peers", ("huey", "redis")),
    "rq": Info("rq_redis", "RQ", "Redis", "peers", ("rq", "redis")),
    "celery": Info("celery_redis", "Celery", "Redis", "peers", ("celery", "kombu", "redis")),
    "dramatiq": Info("dramatiq_redis", "Dramatiq", "Redis", "peers", ("dramatiq", "redis")),
}


def load(name: str) -> System:
    import importlib

    module = importlib.import_module(f"systems.{INFO[name].module}")
    bench: System = module.Bench()
    return bench
