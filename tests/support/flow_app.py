"""Handlers for the flow-control end-to-end tests (tests/e2e/test_e2e_flow_control.py).

Every kind runs the same handler: it appends `start` and `end` lines to the
file body['log'] names, with the handler's own wall clock (time.time()), the
job id, the attempt, the worker's pid and body['tag'] (a concurrency key or a
tenant, as the test wants it read back), and sleeps body['seconds'] between.
The tests count overlaps and rates from these lines, not from the database
they are checking. `support.flow` reads them back.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import chit
from support.e2e_app import append_line

queue = chit.Queue()

# Kinds and the limits their code declares.
LIMITED = "fc_limited"  # concurrency=3
RATED = "fc_rated"  # rate=10/s
KEYED = "fc_keyed"  # key_concurrency=1
OVERRIDDEN = "fc_override"  # concurrency=1, raised and cleared by the test
PLAIN = "fc_plain"  # no limit, queue "default"
HELD = "fc_held"  # no limit, queue "default": paused by kind
SIDE = "fc_side"  # no limit, queue "side": paused by queue
SIDE_QUEUE = "side"
BUDGETED = "fc_budget"  # cost_rate=100/m: what the handler spends is body['spent']
METERED = "fc_metered"  # cost_rate=300/s


def run(job: chit.JobContext, body: dict[str, Any]) -> dict[str, Any]:
    tag = body.get("tag", "-")
    append_line(body["log"], f"start {job.id} {job.attempt} {time.time():.6f} {os.getpid()} {tag}")
    # An Event's wait, not time.sleep, as in e2e_app's `clock` (the same handler
    # could run under a fake clock).
    threading.Event().wait(body.get("seconds", 0))
    append_line(body["log"], f"end {job.id} {job.attempt} {time.time():.6f} {os.getpid()} {tag}")
    return {"pid": os.getpid()}


def spend(job: chit.JobContext, body: dict[str, Any]) -> dict[str, Any]:
    """`run`, after waiting for the file body['gate'] (if given) to exist, and
    then reporting body['spent'] (if given) as what the attempt spent."""
    gate = body.get("gate")
    deadline = time.monotonic() + 60
    while gate and not os.path.exists(gate) and time.monotonic() < deadline:
        threading.Event().wait(0.02)
    if "spent" in body and not job.report_cost(body["spent"]):
        raise RuntimeError("report_cost was fenced out")
    return run(job, body)


queue.task(LIMITED, concurrency=3, max_attempts=5)(run)
queue.task(BUDGETED, cost_rate="100/m")(spend)
queue.task(METERED, cost_rate="300/s")(spend)
queue.task(RATED, rate="10/s")(run)
queue.task(KEYED, key_concurrency=1)(run)
queue.task(OVERRIDDEN, concurrency=1)(run)
queue.task(PLAIN)(run)
queue.task(HELD)(run)
queue.task(SIDE, queue=SIDE_QUEUE)(run)

# An app with no limit at all, so its workers' claims take the one-statement path
# until a second group of queued jobs (another tenant's) shows up.
unlimited = chit.Queue()
unlimited.task(PLAIN)(run)
