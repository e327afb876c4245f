"""Workflows with real `chit worker` processes, on both backends: a diamond runs
in dependency order and its last job reads both results (a large one included);
a failure cancels its dependents while a run_on="finished" callback still runs,
and replaying the fixed job lets the rest finish."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import chit
from chit.jobs import Job, State
from support.jobs import app_queue, get, wait_terminal
from support.processes import Procs
from support.waiting import wait_until

pytestmark = pytest.mark.slow

APP = "support.workflow_app:queue"


@pytest.fixture
def wf_queue(db_url: str) -> Iterator[chit.Queue]:
    from support import workflow_app

    with app_queue(db_url, workflow_app.queue) as q:
        yield q


def after(job: Job, *deps: Job) -> bool:
    """The job started after each dependency finished (one clock: the database's;
    PostgreSQL stamps a claim's started_at as the claim runs, not at its
    transaction's start, which may precede the commit of a finish it sees)."""
    assert job.started_at is not None
    return all(d.finished_at is not None and d.finished_at <= job.started_at for d in deps)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("pool", ["thread", "process"])
def test_a_diamond_runs_in_dependency_order_and_the_last_job_sees_both_results(
    procs: Procs, wf_queue: chit.Queue, pool: str
) -> None:
    R = chit.JobRequest
    wf = wf_queue.enqueue_workflow(
        [
            R("step", {"name": "a"}, ref="a"),
            R("step", {"name": "b"}, ref="b", depends_on=["a"]),
            R("big", {"size": 100_000}, ref="c", depends_on=["a"]),
            R("step", {"name": "d"}, ref="d", depends_on=["b", "c"]),
        ]
    )
    for _ in range(2):
        procs.worker("--pool", pool, app=APP).wait_started()
    wait_terminal(wf_queue, wf.jobs["d"], 60)
    d = wf_queue.get(wf.jobs["d"])  # its result holds c's, too large for the row
    a, b, c = (get(wf_queue, wf.jobs[r]) for r in "abc")
    assert [j.state for j in (a, b, c, d)] == [State.SUCCEEDED] * 4
    assert after(b, a) and after(c, a) and after(d, b, c)
    assert d.result == {
        "name": "d",
        "deps": [
            {"id": b.id, "kind": "step", "state": "succeeded", "result": b.result},
            {"id": c.id, "kind": "big", "state": "succeeded", "result": "x" * 100_000},
        ],
    }
    assert b.result["deps"][0]["id"] == a.id
    view = wf_queue.workflow(wf.id)
    assert {j.id: j.state for j in view.jobs} == {j: State.SUCCEEDED for j in wf.ids}


@pytest.mark.timeout(90)
def test_a_failure_cancels_dependents_a_callback_runs_and_replay_finishes_the_rest(
    procs: Procs, wf_queue: chit.Queue, tmp_path: Path
) -> None:
    fix = tmp_path / "fixed"
    R = chit.JobRequest
    wf = wf_queue.enqueue_workflow(
        [
            R("step", {"name": "fetch"}, ref="fetch"),
            R("fragile", {"fix": str(fix), "name": "parse"}, ref="parse", depends_on=["fetch"]),
            R("step", {"name": "merge"}, ref="merge", depends_on=["parse", "fetch"]),
            R("step", {"name": "store"}, ref="store", depends_on=["merge"]),
            R("step", {"name": "notify"}, ref="notify", depends_on=["store"], run_on="finished"),
        ]
    )
    procs.worker(app=APP).wait_started()
    notify = wait_terminal(wf_queue, wf.jobs["notify"], 60)
    parse, merge, store = (get(wf_queue, wf.jobs[r]) for r in ("parse", "merge", "store"))
    assert parse.state is State.FAILED and parse.error is not None
    assert merge.state is State.CANCELLED and merge.error == f"dependency {parse.id} failed"
    assert store.state is State.CANCELLED and store.error == f"dependency {merge.id} cancelled"
    assert notify.state is State.SUCCEEDED
    assert notify.result["deps"] == [
        {"id": store.id, "kind": "step", "state": "cancelled", "result": None}
    ]
    assert merge.started_at is None and store.started_at is None  # never ran

    fix.touch()
    assert wf_queue.store.retry(parse.id)
    wait_until(
        lambda: get(wf_queue, wf.jobs["store"]).state.terminal, 60, what="the rest to finish"
    )
    parse, merge, store = (get(wf_queue, wf.jobs[r]) for r in ("parse", "merge", "store"))
    assert [j.state for j in (parse, merge, store)] == [State.SUCCEEDED] * 3
    assert after(merge, parse) and after(store, merge)
    # The callback ran once, for the first outcome; it is not run again.
    assert len(wf_queue.store.attempts(wf.jobs["notify"])) == 1
