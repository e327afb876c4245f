"""Budgets with a real worker process (DESIGN.md, "Long AI tasks"; issue 25):
a handler's `report_cost`, made from a process-pool child through its worker,
corrects the window the next claims see. cost_rate's hold over time with many
workers is measured by bench/cost_rate_bench.py (`make bench` step cost-rate).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

import chit
from chit.jobs import State
from support import flow_app
from support.flow import most_in_window
from support.flow_app import BUDGETED, METERED, PLAIN
from support.jobs import app_queue, get, wait_terminal
from support.processes import Procs
from support.waiting import wait_until

pytestmark = pytest.mark.slow

FLOW_APP = "support.flow_app:queue"


@pytest.fixture
def flow(db_url: str) -> Iterator[chit.Queue]:
    with app_queue(db_url, flow_app.queue) as q:
        yield q


@pytest.mark.timeout(90)
def test_report_cost_frees_the_rest_of_the_estimate_for_the_next_job(
    procs: Procs, flow: chit.Queue, tmp_path: Path
) -> None:
    log, gate = tmp_path / "runs.log", tmp_path / "gate"
    procs.workers(1, "--pool", "process", "--concurrency", "4", app=FLOW_APP)
    # cost_rate 100/m: the first job's estimate (90) leaves no room for the second's (80).
    first = flow.enqueue(
        BUDGETED, {"log": str(log), "gate": str(gate), "spent": 10}, cost=90, priority=0
    ).id
    wait_until(lambda: get(flow, first).state is State.RUNNING, 30, what="the first to start")
    second = flow.enqueue(BUDGETED, {"log": str(log)}, cost=80).id
    # A plain job enqueued after it runs: the worker is claiming, the budget holds the second.
    plain = flow.enqueue(PLAIN, {"log": str(log)}).id
    assert wait_terminal(flow, plain, 30).state is State.SUCCEEDED
    assert get(flow, second).state is State.QUEUED
    gate.touch()  # the first reports what it spent (10): 10 + 80 fits in the minute
    assert wait_terminal(flow, first, 30).state is State.SUCCEEDED
    assert wait_terminal(flow, second, 30).state is State.SUCCEEDED


@pytest.mark.timeout(90)
def test_a_cost_rate_holds_across_two_workers_and_is_used(
    procs: Procs, flow: chit.Queue, tmp_path: Path
) -> None:
    log = tmp_path / "runs.log"
    rng = random.Random(25)
    costs = [rng.randint(1, 60) for _ in range(80)]
    ids = [
        e.id
        for e in flow.enqueue_many(
            [chit.JobRequest(METERED, {"log": str(log)}, cost=c) for c in costs]
        )
    ]
    procs.workers(2, "--concurrency", "8", app=FLOW_APP)
    wait_until(
        lambda: sum(get(flow, i).state is State.SUCCEEDED for i in ids) >= 40,
        60,
        what="40 metered jobs to finish",
    )
    # By the database's clock: each job's start (none is retried) with its cost.
    starts = sorted(
        (job.started_at.timestamp(), cost)
        for i, cost in zip(ids, costs, strict=True)
        if (job := get(flow, i)).started_at is not None
    )
    worst = max(sum(c for t, c in starts if start <= t < start + 1.0) for start, _ in starts)
    assert worst <= 300, starts
    # Used, not starved: some window took most of the budget.
    assert worst >= 200, starts
    assert most_in_window([t for t, _ in starts], 1.0) < len(starts)
