"""PgQueuer: `pgq run` per process, asyncpg, an async entrypoint, the default
batch size; producers use asyncpg too (as PgQueuer's own benchmark does).

With BENCH_KIND_CONCURRENCY (the flow-control step) the entrypoint gets
`concurrency_limit=N`, which PgQueuer enforces in its dequeue statement across
all workers (a count of the entrypoint's picked jobs), as chit's `concurrency=N`."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
from pgqueuer import PgQueuer
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job
from pgqueuer.queries import Queries

from recorder import record
from systems import BIN, System, arrival_gaps, env

DSN = env("BENCH_PG_DSN")
# 0 is PgQueuer's "unlimited".
CONCURRENCY_LIMIT = int(os.environ.get("BENCH_KIND_CONCURRENCY") or 0)


@asynccontextmanager
async def main() -> AsyncIterator[PgQueuer]:
    conn = await asyncpg.connect(DSN)
    pgq = PgQueuer(AsyncpgDriver(conn))

    @pgq.entrypoint("noop", concurrency_limit=CONCURRENCY_LIMIT)
    async def noop(job: Job) -> None:
        started = time.time()
        assert job.payload is not None
        i, t = job.payload.split()
        record(int(i), float(t), started)

    yield pgq
    await conn.close()


class Bench(System):
    has_bulk = True

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.conn = self.loop.run_until_complete(asyncpg.connect(DSN))
        self.queries = Queries(AsyncpgDriver(self.conn))

    def settings(self) -> str:
        limit = f"; `concurrency_limit={CONCURRENCY_LIMIT}`" if CONCURRENCY_LIMIT else ""
        return (
            "`pgq run` per process (through `pgqueuer.run`, batch size 10, the default); "
            f"async entrypoint{limit}"
        )

    def setup(self) -> None:
        import subprocess

        subprocess.run([str(BIN / "pgq"), "--pg-dsn", DSN, "install"], check=True,
                       capture_output=True)  # fmt: skip

    def enqueue_each(self, first: int, n: int, spacing: float = 0.0) -> None:
        async def go() -> None:
            gaps = arrival_gaps(first, spacing)
            next_at = time.perf_counter()
            for i in range(first, first + n):
                if spacing:
                    delay = next_at - time.perf_counter()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    next_at += next(gaps)
                await self.queries.enqueue("noop", f"{i} {time.time()!r}".encode())

        self.loop.run_until_complete(go())

    def enqueue_many(self, first: int, n: int) -> None:
        t = time.time()
        self.loop.run_until_complete(
            self.queries.enqueue(
                ["noop"] * n, [f"{i} {t!r}".encode() for i in range(first, first + n)], [0] * n
            )
        )

    def worker_commands(self, workers: int) -> list[list[str]]:
        # What `pgq run` does (`uvloop.run(pgqueuer.run(factory))`): its CLI
        # crashes at start-up with this release's typer dependency.
        cmd = [sys.executable, "-m", "systems.pgqueuer_pg"]
        return [cmd] * workers

    def _fetch(self, sql: str) -> int:
        return int(self.loop.run_until_complete(self.conn.fetchval(sql)))

    def completed(self) -> int:
        return self._fetch("SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'")

    def waiting(self) -> int:
        return self._fetch("SELECT count(*) FROM pgqueuer")

    def close(self) -> None:
        self.loop.run_until_complete(self.conn.close())
        self.loop.close()


if __name__ == "__main__":
    import pgqueuer
    import uvloop

    uvloop.run(pgqueuer.run(main))
