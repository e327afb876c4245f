"""Streaming output with real processes (issue 25): a real `chit serve` and
`chit worker`s on the test's database (SQLite, PostgreSQL, Redis). A client
streams a job's output as it is emitted; the worker is SIGKILLed while the job
streams: the dead attempt's output stays readable, marked attempt 1; the
retry's continues after it, attempt 2; within an attempt no value is lost or
repeated, and the stream (one connection, pushed) ends with the job. With the
thread pool and with `--pool process` (where each batch travels from the
child to the worker, which holds the lease)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import chit
from chit.client import Client, Streamed
from chit.jobs import State
from support.jobs import lines, wait_terminal
from support.processes import Procs, free_port, wait_ready
from support.stack import SERVER
from support.waiting import wait_until

pytestmark = pytest.mark.slow

COUNT = 5


@pytest.fixture
def client(procs: Procs, queue: chit.Queue) -> Iterator[Client]:
    """A client of a real server on the test's database (migrated by `queue`)."""
    port = free_port()
    server = procs.start(["-c", SERVER.format(module="support.e2e_app", port=port)], "server")
    with Client(f"http://127.0.0.1:{port}") as c:
        wait_ready(server, lambda: c._http.get("/readyz"), 60, what="the API server to answer")
        yield c


@pytest.mark.timeout(120)
@pytest.mark.parametrize("pool", ["thread", "process"])
def test_a_worker_killed_while_a_job_streams_loses_and_repeats_nothing(
    client: Client, procs: Procs, queue: chit.Queue, tmp_path: Path, pool: str
) -> None:
    log = tmp_path / "stream.log"
    body = {"count": COUNT, "every": 0.05, "log": str(log), "seconds": 120}
    job_id = queue.enqueue("streamer", body).id
    got: list[Streamed] = []
    reader = threading.Thread(target=lambda: [got.append(v) for v in client.stream(job_id)])
    reader.start()

    a = procs.worker("--lease", "2", "--pool", pool, name="a")
    wait_until(lambda: len(got) == COUNT, 60, what="the first attempt's values, streamed")
    wait_until(lambda: lines(log), 10, what="the first attempt to wait")
    a.signal(signal.SIGKILL)
    assert a.wait(5) == -signal.SIGKILL
    procs.worker("--lease", "2", "--pool", pool, name="b")
    job = wait_terminal(queue, job_id, 60)
    reader.join(30)
    assert not reader.is_alive(), "the stream did not end with the job"

    assert job.state is State.SUCCEEDED and job.attempts == 2, job.error
    expected = [(n + 1, 1, {"i": n, "attempt": 1}) for n in range(COUNT)]
    expected += [(COUNT + n + 1, 2, {"i": n, "attempt": 2}) for n in range(COUNT)]
    assert [(v.seq, v.attempt, v.data) for v in got] == expected
    stored = queue.output(job_id)
    assert [(o.seq, o.attempt, o.data) for o in stored] == expected


@pytest.mark.timeout(90)
def test_a_short_job_shows_running_then_succeeded_to_a_stream_opened_before_it_ran(
    client: Client, procs: Procs, queue: chit.Queue
) -> None:
    """Its whole run falls between two of the server's reads (on PostgreSQL and
    Redis a job without output is read every half second): the stream still
    says running, from the attempt record, before succeeded."""
    job_id = queue.enqueue("noop", {}).id
    events = client.events(job_id)
    first = next(events)
    assert first.job is not None and first.job.state.value == "queued"
    procs.worker()
    rest = [(e.event, e.job.state.value) for e in events if e.job is not None]
    assert rest[-1] == ("state", "succeeded")
    assert ("state", "running") in rest[:-1]
