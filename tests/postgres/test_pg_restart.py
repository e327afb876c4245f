"""The PostgreSQL server restarted under load, on a private server (never the
shared one): workers log, back off and reconnect, every job reaches a terminal
state and none is lost; a worker cut off for longer than its lease is fenced out
when it comes back, and its late outcome changes nothing."""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

import chit
from chit.errors import StoreError
from chit.jobs import AttemptOutcome, State
from support.jobs import all_jobs, get, lines, wait_terminal
from support.pg_cluster import Cluster
from support.processes import E2E_APP, Procs
from support.waiting import wait_until

pytestmark = pytest.mark.slow

JOBS = 3000
# The crash keeps the server down this long: past a heartbeat (lease / 3) and
# several of the pool's reconnection attempts, well within the lease.
LEASE = 15
OUTAGE = 6.0


@pytest.fixture
def db_url(cluster_database_url: str) -> str:
    return cluster_database_url


def count(q: chit.Queue, state: State) -> int | None:
    """Jobs in `state`, or None while the server cannot answer."""
    try:
        return q.store.stats().by_state[state]
    except StoreError:
        return None


def warned_since(proc_stderr: str, mark: int) -> bool:
    return " WARNING " in proc_stderr[mark:]


@pytest.mark.timeout(180)
def test_workers_ride_out_a_fast_restart_and_a_crash_of_the_server_under_load(
    cluster: Cluster, procs: Procs, queue: chit.Queue, tmp_path: Path
) -> None:
    out = tmp_path / "runs"
    out.mkdir()
    # A lease far longer than each outage: no job is taken from a live worker.
    workers = procs.workers(3, "--lease", str(LEASE), timeout=20)
    requests = [chit.JobRequest("record", {"dir": str(out), "seconds": 0.02}) for _ in range(JOBS)]
    ids = [e.id for e in queue.enqueue_many(requests)]
    started = time.monotonic()

    def done() -> int:
        return count(queue, State.SUCCEEDED) or 0

    # 1. `pg_ctl restart -m fast`: every backend is terminated, the server comes back.
    wait_until(lambda: done() >= JOBS // 5, 60, what=f"{JOBS // 5} jobs to succeed")
    cluster.restart("fast")
    at_restart = done()
    wait_until(lambda: done() >= at_restart + JOBS // 5, 60, what="work to go on after restart")

    # 2. A crash (`pg_ctl stop -m immediate`), down until every worker has noticed
    # and OUTAGE has passed.
    marks = [len(w.stderr()) for w in workers]
    cluster.stop("immediate")
    down = time.monotonic()
    wait_until(
        lambda: (
            all(warned_since(w.stderr(), m) for w, m in zip(workers, marks, strict=True))
            and time.monotonic() - down >= OUTAGE
        ),
        30,
        what="every worker to log that the database is gone",
    )
    cluster.start()
    up = time.monotonic()
    outage = up - down
    at_crash = done()
    wait_until(lambda: done() > at_crash, 60, 0.02, what="work to go on after the crash")
    recovered = time.monotonic() - up
    wait_until(lambda: done() == JOBS, 120, 0.2, what="every job to succeed")
    elapsed = time.monotonic() - started

    for w in workers:
        assert w.alive(), f"{w.name} died:\n{w.stderr()[-3000:]}"
        w.signal(signal.SIGTERM)
    for w in workers:
        assert w.wait(30) == 0, w.stderr()[-3000:]

    assert at_restart < JOBS and at_crash < JOBS, "the work was over before the outage"
    jobs = all_jobs(queue)
    assert len(jobs) == JOBS
    assert {j.state for j in jobs} == {State.SUCCEEDED}
    runs = Counter(line for f in out.glob("*.log") for line in lines(f))
    assert set(runs) == set(ids), "a job succeeded without running"
    duplicates = sum(n - 1 for n in runs.values())
    stderr = "".join(w.stderr() for w in workers)
    print(
        f"\n{JOBS} jobs in {elapsed:.1f}s through a fast restart (at {at_restart} done) and "
        f"a crash (at {at_crash} done, down {outage:.1f}s, jobs succeeding again "
        f"{recovered:.1f}s after the start): {duplicates} ran twice, "
        f"{stderr.count(' WARNING ')} warnings logged"
    )
    # Every lease outlived the outages, so nothing ran twice.
    assert duplicates == 0
    # A claim whose answer the outage swallowed leaves its job held by nobody until
    # the lease runs out: rescued, it runs as attempt 2, yet its handler ran once.
    for job in jobs:
        if job.attempts != 1:
            outcomes = [a.outcome for a in queue.store.attempts(job.id)]
            assert outcomes == [AttemptOutcome.LEASE_EXPIRED, AttemptOutcome.SUCCEEDED], job
    # Errors were logged as warnings and retried: nothing escaped as a traceback.
    assert "Traceback" not in stderr


@pytest.fixture
def cut_off_role(cluster: Cluster) -> Iterator[str]:
    """A role that can log in now; the test takes its LOGIN away for a while."""
    name = "cut_off"
    with psycopg.connect(cluster.url(), autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN SUPERUSER").format(sql.Identifier(name)))
    try:
        yield name
    finally:
        if not cluster.running:
            cluster.start()
        with psycopg.connect(cluster.url(), autocommit=True) as admin:
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


def set_login(cluster: Cluster, role: str, allowed: bool) -> None:
    with psycopg.connect(cluster.url(), autocommit=True) as admin:
        admin.execute(
            sql.SQL("ALTER ROLE {} {}").format(
                sql.Identifier(role), sql.SQL("LOGIN" if allowed else "NOLOGIN")
            )
        )


@pytest.mark.timeout(120)
def test_worker_cut_off_past_its_lease_by_a_crash_is_fenced_out_when_it_reconnects(
    cluster: Cluster,
    procs: Procs,
    queue: chit.Queue,
    tmp_path: Path,
    db_url: str,
    cut_off_role: str,
) -> None:
    """Worker a runs a job; the server crashes, and when it is back a still cannot
    connect (its role may not log in: a partition on a's side that outlasts the
    crash). Its lease runs out, worker b rescues the job and finishes it. Then a
    gets through again: its late outcome is fenced out and changes nothing."""
    log = tmp_path / "runs.log"
    job_id = queue.enqueue("sleep", {"log": str(log), "seconds": 4}).id
    a_url = db_url.replace("postgresql://postgres@", f"postgresql://{cut_off_role}@", 1)
    a = procs.start(
        ["-m", "chit", "worker", "--app", E2E_APP, "--lease", "2"],
        name="a",
        extra_env={"CHIT_DATABASE_URL": a_url},
    )
    wait_until(lambda: lines(log), 15, what="the job to start on worker a")

    set_login(cluster, cut_off_role, False)  # a's open connections stay; new ones fail
    cluster.stop("immediate")
    cluster.start()
    b = procs.worker("--lease", "2", name="b")
    done = wait_terminal(queue, job_id, 30)
    assert done.state is State.SUCCEEDED
    assert done.result == {"pid": b.pid, "attempt": 2}
    history = queue.store.attempts(job_id)
    assert [h.outcome for h in history] == [AttemptOutcome.LEASE_EXPIRED, AttemptOutcome.SUCCEEDED]
    # a's handler finished long ago; a has been trying to get through since.
    assert f"end {job_id} 1 {a.pid}" in lines(log)
    assert f'role "{cut_off_role}" is not permitted to log in' in a.stderr()
    fenced_from = time.monotonic()

    set_login(cluster, cut_off_role, True)
    wait_until(
        lambda: f"{job_id}: succeeded outcome fenced out" in a.stderr(),
        30,
        0.1,
        what="worker a to reconnect and log that its outcome was fenced out",
    )
    print(f"\nworker a was fenced out {time.monotonic() - fenced_from:.1f}s after it could log in")
    assert get(queue, job_id) == done
    assert queue.store.attempts(job_id) == history
    for w in (a, b):
        assert w.alive(), w.stderr()[-3000:]
        w.signal(signal.SIGTERM)
        assert w.wait(30) == 0, w.stderr()[-3000:]
    assert "Traceback" not in a.stderr()
