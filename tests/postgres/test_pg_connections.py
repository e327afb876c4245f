"""No connection leaks: a PostgreSQL worker process through 10,000 jobs holds
no more connections than its pool (sized from concurrency) plus its one LISTEN
connection, and never opens new ones to replace lost or leaked ones.
PostgreSQL only: SQLite has no server to count connections on."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

import chit
from chit.jobs import State
from support.processes import E2E_APP, Procs
from support.waiting import wait_until

pytestmark = pytest.mark.slow

APPLICATION = "chit-leak-test-worker"
CONCURRENCY = 4
# open_store sizes the pool at concurrency + 3; an idle worker LISTENs on one more.
BOUND = CONCURRENCY + 3 + 1
BATCHES = 10
BATCH = 1000


@pytest.fixture
def db_url(pg_database_url: str) -> str:
    return pg_database_url


def with_application_name(url: str, name: str) -> str:
    parts = urlsplit(url)
    query = "&".join(filter(None, [parts.query, f"application_name={name}"]))
    return urlunsplit(parts._replace(query=query))


class Sampler:
    """Counts the worker's connections in pg_stat_activity every 10 ms, on a thread."""

    def __init__(self, url: str) -> None:
        self.conn = psycopg.connect(url, autocommit=True)
        self.counts: list[int] = []
        # Backends seen since `mark()`: the worker's store, once opened. Before
        # its pool, open_store makes one short probe connection (a one-line
        # error when nothing listens), which a busy machine's sampler may catch.
        self.backends: set[tuple[int, object]] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> int:
        rows = self.conn.execute(
            "SELECT pid, backend_start FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name = %s",
            (APPLICATION,),
        ).fetchall()
        with self._lock:
            self.backends |= {(pid, start) for pid, start in rows}
            self.counts.append(len(rows))
        return len(rows)

    def mark(self) -> None:
        """Forget the backends seen so far, but not those still open."""
        with self._lock:
            self.backends.clear()
        self.sample()

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            self.sample()

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self.conn.close()


@pytest.fixture
def sampler(db_url: str) -> Iterator[Sampler]:
    with Sampler(db_url) as s:
        yield s


@pytest.mark.timeout(180)
def test_worker_connections_stay_within_its_pool_across_10000_jobs(
    procs: Procs, queue: chit.Queue, tmp_path: Path, db_url: str, sampler: Sampler
) -> None:
    out = tmp_path / "runs"
    out.mkdir()
    worker = procs.start(
        ["-m", "chit", "worker", "--app", E2E_APP, "--concurrency", str(CONCURRENCY)],
        name="worker",
        extra_env={"CHIT_DATABASE_URL": with_application_name(db_url, APPLICATION)},
    )
    worker.wait_started()
    sampler.mark()
    after_batch = []
    for batch in range(BATCHES):
        # Mostly plain jobs; some write from the handler's own thread (a checkpoint),
        # some fail once and are retried.
        requests = [
            chit.JobRequest("clock", {"fail_first": True})
            if n % 50 == 0
            else chit.JobRequest("record", {"dir": str(out), "checkpoint": n % 10 == 0})
            for n in range(BATCH)
        ]
        queue.enqueue_many(requests)
        done = (batch + 1) * BATCH
        wait_until(
            lambda done=done: queue.store.stats().by_state[State.SUCCEEDED] == done,
            60,
            0.1,
            what=f"{done} jobs to succeed",
        )
        # Idle again: the worker is waiting on LISTEN for the next batch.
        after_batch.append(sampler.sample())

    stats = queue.store.stats()
    assert stats.by_state[State.SUCCEEDED] == BATCHES * BATCH
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.stderr()[-3000:]
    wait_until(lambda: sampler.sample() == 0, 10, what="the worker's connections to close")

    print(
        f"\n{BATCHES * BATCH} jobs: worker connections at most {max(sampler.counts)} "
        f"(bound {BOUND}), {len(sampler.backends)} opened in all, after each batch "
        f"{after_batch}, {len(sampler.counts)} samples"
    )
    assert len(sampler.counts) > 100
    assert max(sampler.counts) <= BOUND
    # None was replaced once the worker ran: a leaked or broken connection would
    # show as a new backend.
    assert len(sampler.backends) <= BOUND
    # Not growing: the pool keeps what its busiest moment needed (the finisher, the
    # claim loop, the heartbeat and handlers' checkpoints at once), which may come in
    # any batch; a leak would keep growing past that, one backend per leak.
    assert max(after_batch) <= BOUND
    assert after_batch[-1] <= max(after_batch[: BATCHES // 2]) + 1
    assert "Traceback" not in worker.stderr()
    assert "no connection to" not in worker.stderr()
