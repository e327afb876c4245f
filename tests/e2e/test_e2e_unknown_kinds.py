"""A worker claims only the kinds its app has code for: a job of a kind it
does not know (a rolling deploy's new kind, another app's job in the same
queue) stays queued, attempts untouched, while its own kinds run past it; a
worker that knows the kind then runs it. `chit status` says why it waits."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

import chit
from chit.cli.main import main
from chit.jobs import State
from support.jobs import get, wait_terminal
from support.processes import Procs
from support.waiting import wait_until

pytestmark = pytest.mark.slow

NEW_APP = "support.e2e_app_next:queue"


def test_an_unknown_kind_waits_for_a_worker_that_runs_it(
    procs: Procs, queue: chit.Queue, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    queue.task("shipped_tomorrow")(lambda job, body: {"ran": True})  # not in the workers' app
    new = queue.enqueue("shipped_tomorrow", {}).id
    known = [queue.enqueue("noop", {}).id for _ in range(3)]
    old = procs.worker(name="old")
    old.wait_started()
    for job_id in known:
        assert wait_terminal(queue, job_id, 30).state is State.SUCCEEDED
    # The old worker has claimed everything it can: the new kind's job is untouched.
    job = get(queue, new)
    assert (job.state, job.attempts, queue.store.attempts(new)) == (State.QUEUED, 0, [])
    wait_until(lambda: queue.store.live_workers(), 30, what="the old worker's beat")
    assert main(["status", new, "--database-url", queue.settings.database_url]) == 0
    assert "no worker running now has code for kind shipped_tomorrow" in capsys.readouterr().out

    # A worker of the next release, which has the kind, runs it.
    fresh = procs.worker(name="new", app=NEW_APP)
    assert wait_terminal(queue, new, 30).result == {"ran": "tomorrow"}
    for w in (old, fresh):
        w.signal(signal.SIGTERM)
        assert w.wait(30) == 0
