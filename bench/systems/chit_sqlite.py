"""chit on SQLite: `chit worker` processes running noop_app."""

from __future__ import annotations

import sqlite3
import sys
import time

import chit
import features
import noop_app
from chit.jobs import State
from chit.settings import Settings
from systems import CONCURRENCY, System, env, kind_limits

# As the bench runs it: the default (a --chit-ref older than prefetch has none).
PREFETCH = getattr(Settings(), "prefetch", "?")


class Bench(System):
    has_bulk = True

    def __init__(self) -> None:
        self.url = env("CHIT_DATABASE_URL")
        self.queue = noop_app.queue
        self.store = self.queue.store  # opens and migrates
        self.parked = 0

    def settings(self) -> str:
        return (
            f"`chit worker --concurrency {CONCURRENCY}` per process (threads; "
            f"`--prefetch {PREFETCH}`, the default); "
            f"synchronous={self.queue.settings.sqlite_synchronous}{kind_limits()}"
        )

    def enqueue_one(self, i: int) -> None:
        self.queue.enqueue("noop", {"i": i, "t": time.time()})

    def leave_features_behind(self) -> dict[str, int]:
        left = features.leave_behind(self.queue)
        self.parked = self.waiting()  # queued in a queue no bench worker takes
        return left

    def enqueue_many(self, first: int, n: int) -> None:
        t = time.time()
        self.queue.enqueue_many(
            [chit.JobRequest("noop", {"i": i, "t": t}) for i in range(first, first + n)]
        )

    def worker_commands(self, workers: int) -> list[list[str]]:
        cmd = [
            sys.executable, "-m", "chit", "worker", "--app", "noop_app:queue",
            "--concurrency", str(CONCURRENCY), "--log-level", "WARNING",
        ]  # fmt: skip
        return [cmd] * workers

    def completed(self) -> int:
        return self.store.stats().by_state[State.SUCCEEDED.value]

    def waiting(self) -> int:
        by_state = self.store.stats().by_state
        return by_state[State.QUEUED.value] + by_state[State.RUNNING.value] - self.parked

    def seed(self, finished: int, queued: int, analyze: bool = False) -> None:
        # Ids of digits only: valid job ids that sort before every real one.
        # One attempt row per finished job, as the worker would have left.
        path = self.url.removeprefix("sqlite:///")
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(SEED_JOBS, {"n": finished, "first": 0})
        conn.execute(SEED_ATTEMPTS)
        conn.execute(SEED_QUEUED, {"n": queued, "first": finished})
        conn.execute("COMMIT")
        if analyze:  # chit never does; a user or `PRAGMA optimize` may
            conn.execute("ANALYZE")
        conn.close()

    def close(self) -> None:
        self.queue.close()


_SERIES = (
    "WITH RECURSIVE s(x) AS (SELECT :first WHERE :n > 0 "
    "UNION ALL SELECT x + 1 FROM s WHERE x < :first + :n - 1)"
)
_T = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 day')"

SEED_JOBS = f"""
{_SERIES}
INSERT INTO chit_jobs (id, kind, queue, priority, payload, state, attempts, max_attempts,
    run_at, created_at, updated_at, started_at, finished_at, result)
SELECT printf('%026d', x), 'noop', 'default', 0, json_object('i', -1 - x, 't', 0), 'succeeded',
    1, 5, {_T}, {_T}, {_T}, {_T}, {_T}, 'null'
FROM s
"""

SEED_ATTEMPTS = f"""
INSERT INTO chit_attempts (job_id, attempt, worker, started_at, finished_at, outcome)
SELECT id, 1, 'seed', {_T}, {_T}, 'succeeded' FROM chit_jobs WHERE state = 'succeeded'
"""

SEED_QUEUED = f"""
{_SERIES}
INSERT INTO chit_jobs (id, kind, queue, priority, payload, state, attempts, max_attempts,
    run_at, created_at, updated_at)
SELECT printf('%026d', x), 'noop', 'default', 0, json_object('i', x - :first, 't', 0),
    'queued', 0, 5, {_T}, {_T}, {_T}
FROM s
"""
