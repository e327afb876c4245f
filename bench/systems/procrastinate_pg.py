"""Procrastinate: `procrastinate worker --concurrency 8` per process, async
task (the way its docs run concurrent jobs), LISTEN/NOTIFY on (the default)."""

from __future__ import annotations

import time

import procrastinate
import psycopg

from recorder import record
from systems import BIN, CONCURRENCY, System, env

DSN = env("BENCH_PG_DSN")
app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=DSN))


@app.task(name="noop", queue="bench")
async def noop(i: int, t: float) -> None:
    started = time.time()
    record(i, t, started)


class Bench(System):
    has_bulk = True

    def __init__(self) -> None:
        app.open()
        self.conn = psycopg.connect(DSN, autocommit=True)

    def settings(self) -> str:
        return f"`procrastinate worker --concurrency {CONCURRENCY}` per process; async task"

    def setup(self) -> None:
        app.schema_manager.apply_schema()

    def enqueue_one(self, i: int) -> None:
        noop.defer(i=i, t=time.time())

    def enqueue_many(self, first: int, n: int) -> None:
        t = time.time()
        noop.batch_defer(*({"i": i, "t": t} for i in range(first, first + n)))

    def worker_commands(self, workers: int) -> list[list[str]]:
        cmd = [str(BIN / "procrastinate"), "--app", f"{__name__}.app", "worker",
               "--queues", "bench", "--concurrency", str(CONCURRENCY)]  # fmt: skip
        return [cmd] * workers

    def _count(self, states: tuple[str, ...]) -> int:
        row = self.conn.execute(
            "SELECT count(*) FROM procrastinate_jobs"
            " WHERE status = ANY(%s::procrastinate_job_status[])",
            (list(states),),
        ).fetchone()
        assert row is not None
        return int(row[0])

    def completed(self) -> int:
        return self._count(("succeeded",))

    def waiting(self) -> int:
        return self._count(("todo", "doing"))

    def close(self) -> None:
        self.conn.close()
        app.close()
