"""Many processes on one database (a SQLite file, a PostgreSQL database): every
job runs exactly once across eight workers, eight writers enqueueing at once all
get through (on SQLite: never 'database is locked'), and an acknowledged job
survives kill -9 of the process that submitted it."""

from __future__ import annotations

import itertools
import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest

import chit
from chit.jobs import State
from support.jobs import all_jobs, get, lines
from support.processes import Procs
from support.waiting import wait_until

pytestmark = pytest.mark.slow

WRITER = ["-m", "support.e2e_writer"]


def succeeded(q: chit.Queue) -> int:
    return q.store.stats().by_state[State.SUCCEEDED]


@pytest.mark.timeout(90)
def test_eight_workers_run_each_of_2000_jobs_exactly_once(
    procs: Procs, queue: chit.Queue, tmp_path: Path
) -> None:
    out = tmp_path / "runs"
    out.mkdir()
    workers = procs.workers(8, timeout=20)

    requests = [chit.JobRequest("record", {"dir": str(out)}) for _ in range(2000)]
    ids = [e.id for e in queue.enqueue_many(requests)]
    wait_until(lambda: succeeded(queue) == 2000, 60, 0.2, what="2000 jobs to succeed")

    for w in workers:
        w.signal(signal.SIGTERM)
    for w in workers:
        assert w.wait(15) == 0, w.stderr()[-2000:]

    # Executions counted from the handlers' own files, not from the database.
    files = list(out.glob("*.log"))
    runs = Counter(line for f in files for line in lines(f))
    assert set(runs) == set(ids)
    assert [i for i, n in runs.items() if n != 1] == []
    assert sum(runs.values()) == 2000
    assert {int(f.stem) for f in files} <= {w.pid for w in workers}
    assert len(files) >= 2, "one worker did all the work: nothing ran concurrently"

    jobs = all_jobs(queue)
    assert len(jobs) == 2000
    assert {(j.state, j.attempts) for j in jobs} == {(State.SUCCEEDED, 1)}
    assert "fenced out" not in "".join(w.stderr() for w in workers)


@pytest.mark.timeout(90)
def test_eight_processes_enqueueing_at_once_never_see_database_is_locked(
    procs: Procs, queue: chit.Queue, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    worker = procs.worker(name="worker")
    worker.wait_started()
    writers = [
        procs.start([*WRITER, "300", str(go)], name=f"writer{i}", stdout=subprocess.PIPE)
        for i in range(8)
    ]
    for w in writers:
        assert w.popen.stdout is not None
        assert w.popen.stdout.readline() == b"ready\n", w.stderr()
    go.touch()

    by_writer: dict[str, int] = {}
    for n, w in enumerate(writers):
        assert w.popen.stdout is not None
        out = w.popen.stdout.read().decode()
        assert w.wait(60) == 0, w.stderr()[-2000:]
        assert "database is locked" not in w.stderr()
        by_writer |= dict.fromkeys(out.split(), n)
    acked = list(by_writer)
    assert len(acked) == 8 * 300
    # The writes overlapped: in time order the writer changes many times, not
    # the 7 times it would if they had run one after another (typically 100-250
    # times here; the bound leaves room for a loaded machine).
    order = [by_writer[i] for i in sorted(acked)]
    assert sum(a != b for a, b in itertools.pairwise(order)) > 30

    wait_until(lambda: succeeded(queue) == 2400, 60, 0.2, what="the worker to run every job")
    stored = {j.id for j in all_jobs(queue)}
    assert stored == set(acked)
    worker.signal(signal.SIGTERM)
    assert worker.wait(15) == 0
    assert "locked" not in worker.stderr()
    assert "retrying" not in worker.stderr()


@pytest.mark.timeout(60)
def test_every_acknowledged_job_survives_kill_9_of_the_submitter(
    procs: Procs, queue: chit.Queue
) -> None:
    writer = procs.start([*WRITER, "1000000"], name="writer", stdout=subprocess.PIPE)
    assert writer.popen.stdout is not None
    acked: list[str] = []
    while len(acked) < 500:
        line = writer.popen.stdout.readline().decode()
        assert line.endswith("\n"), f"writer stopped early:\n{writer.stderr()}"
        acked.append(line.strip())

    writer.signal(signal.SIGKILL)
    assert writer.wait(5) == -signal.SIGKILL
    # Ids printed before the kill and still in the pipe were acknowledged too;
    # a cut-off last line was not.
    rest = writer.popen.stdout.read().decode()
    acked += rest.split("\n")[:-1]

    assert len(acked) < 1_000_000, "the writer finished before it was killed"
    for job_id in acked:
        assert get(queue, job_id).state is State.QUEUED
    assert len(all_jobs(queue)) in (len(acked), len(acked) + 1)
