"""Huey's SQLite storage (SqliteHuey, its defaults: WAL, SQLite's default
synchronous), run by `huey_consumer` with worker threads."""

from __future__ import annotations

import time

from huey import SqliteHuey

from recorder import record
from systems import BIN, CONCURRENCY, System, env

huey = SqliteHuey("bench", filename=env("BENCH_SQLITE_PATH"))


@huey.task()
def noop(i: int, t: float) -> None:
    started = time.time()
    record(i, t, started)


class Bench(System):
    def settings(self) -> str:
        # Huey leaves synchronous at SQLite's default: FULL in WAL on this build.
        conn = huey.storage.conn
        level = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[
            conn.execute("PRAGMA synchronous").fetchone()[0]
        ]
        return f"`huey_consumer -k thread -w {CONCURRENCY}` per process; synchronous={level}"

    def enqueue_one(self, i: int) -> None:
        noop(i, time.time())

    def worker_commands(self, workers: int) -> list[list[str]]:
        cmd = [str(BIN / "huey_consumer"), f"{__name__}.huey", "-k", "thread",
               "-w", str(CONCURRENCY), "-q"]  # fmt: skip
        return [cmd] * workers

    def waiting(self) -> int:
        return huey.pending_count()
