"""Handlers for the end-to-end tests. Each execution is recorded in a file the
payload names (never in the database), so tests count runs independently of the
store they are checking."""

from __future__ import annotations

import logging
import os
import threading
import time
import warnings
from typing import Any

import chit

queue = chit.Queue()


def append_line(path: str, line: str) -> None:
    """One write(2) on an O_APPEND descriptor: lines from many processes never interleave."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


@queue.task("sleep", max_attempts=3)
def sleep(job: chit.JobContext, body: dict[str, Any]) -> dict[str, Any]:
    """Logs 'start' and 'end' lines around a sleep of body['seconds']."""
    append_line(body["log"], f"start {job.id} {job.attempt} {os.getpid()}")
    time.sleep(body["seconds"])
    append_line(body["log"], f"end {job.id} {job.attempt} {os.getpid()}")
    return {"pid": os.getpid(), "attempt": job.attempt}


@queue.task("record")
def record(job: chit.JobContext, body: dict[str, Any]) -> None:
    """Appends the job id to this process's file in body['dir'] (PID.log); first,
    with body['log_start'], appends it to PID.started too, with body['checkpoint'],
    stores a checkpoint (a write from the handler's thread), and with
    body['seconds'], sleeps that long."""
    if body.get("log_start"):
        append_line(os.path.join(body["dir"], f"{os.getpid()}.started"), job.id)
    if body.get("checkpoint"):
        job.checkpoint({"attempt": job.attempt})
    if body.get("seconds"):
        time.sleep(body["seconds"])
    append_line(os.path.join(body["dir"], f"{os.getpid()}.log"), job.id)


@queue.task("clock", max_attempts=3)
def clock(job: chit.JobContext, body: dict[str, Any]) -> dict[str, Any]:
    """Returns this process's wall clock; with body['fail_first'] the first attempt
    fails (and is retried after a backoff); with body['seconds'] it sleeps first."""
    if body.get("fail_first") and job.attempt == 1:
        raise RuntimeError("the first attempt fails on purpose")
    # Not time.sleep: under libfaketime with a real monotonic clock (the clock-skew
    # test) it fails with EINVAL; an Event's wait keeps working there.
    threading.Event().wait(body.get("seconds", 0))
    return {"time": time.time(), "pid": os.getpid(), "attempt": job.attempt}


@queue.task("noop")
def noop(job: chit.JobContext, body: dict[str, Any]) -> None:
    return None


@queue.task("poison", max_attempts=2)
def poison(job: chit.JobContext, body: dict[str, Any]) -> None:
    """Kills its own worker process every time it runs."""
    append_line(body["log"], f"claimed {job.id} {job.attempt} {os.getpid()}")
    os._exit(1)


@queue.task("stall_first", max_attempts=3)
def stall_first(job: chit.JobContext, body: dict[str, Any]) -> dict[str, Any]:
    """The first attempt waits body['seconds'] (long enough to be killed in);
    any later one returns at once."""
    if job.attempt == 1:
        threading.Event().wait(body["seconds"])
    return {"pid": os.getpid(), "attempt": job.attempt}


@queue.task("two_steps", max_attempts=3)
def two_steps(job: chit.JobContext, body: dict[str, Any]) -> dict[str, Any]:
    """Two durable steps, each logging a line to body['log'] when its function
    runs; between them the first attempt logs 'between' and waits
    body['seconds'] (long enough to be killed in)."""

    def run(name: str) -> dict[str, Any]:
        append_line(body["log"], f"{name} {job.id} {job.attempt} {os.getpid()}")
        return {"step": name, "attempt": job.attempt}

    first = job.step("first", run, "first")
    if job.attempt == 1:
        append_line(body["log"], f"between {job.id} {job.attempt} {os.getpid()}")
        threading.Event().wait(body["seconds"])
    second = job.step("second", run, "second")
    return {"first": first, "second": second, "attempt": job.attempt}


@queue.task("link")
def link(job: chit.JobContext, body: dict[str, Any]) -> dict[str, Any]:
    """A link of a chain: one more than the sum of its dependencies' `n`, and
    the order it ran in (appended to body['log'])."""
    append_line(body["log"], f"{job.id}")
    return {"n": 1 + sum(d.result["n"] for d in job.dependencies)}


@queue.task("refuse")
def refuse(job: chit.JobContext, body: dict[str, Any]) -> None:
    """Fails for good on its first attempt."""
    raise chit.PermanentError("refused on purpose")


handler_log = logging.getLogger("e2e_app")


@queue.task("chatty")
def chatty(job: chit.JobContext, body: dict[str, Any]) -> None:
    """A handler's own output: an info line, a warning line and a warning."""
    handler_log.info("chatty info %s", job.id)
    handler_log.warning("chatty warning %s", job.id)
    warnings.warn(f"chatty warns {job.id}", UserWarning, stacklevel=1)


@queue.task("overrun", timeout=0.5, max_attempts=1)
def overrun(job: chit.JobContext, body: dict[str, Any]) -> None:
    """Sleeps body['seconds'], past its half-second timeout."""
    time.sleep(body["seconds"])


@queue.task("approve", max_attempts=1)
def approve(job: chit.JobContext, body: dict[str, Any]) -> dict[str, Any]:
    """Logs each run's start, then waits for the signal "approval" (holding no
    slot) and returns its data."""
    append_line(body["log"], f"start {job.id} {job.attempt}")
    decision = job.wait_for("approval", timeout=body.get("timeout"))
    return {"decision": decision}


@queue.task("approve_async", max_attempts=1)
async def approve_async(job: chit.JobContext, body: dict[str, Any]) -> dict[str, Any]:
    """`approve` for an async handler."""
    append_line(body["log"], f"start {job.id} {job.attempt}")
    decision = await job.await_signal("approval", timeout=body.get("timeout"))
    return {"decision": decision}


@queue.task("double", max_attempts=1)
def double(job: chit.JobContext, body: dict[str, Any]) -> int:
    if body.get("fail"):
        raise chit.PermanentError(f"refused {body['n']}")
    return int(body["n"]) * 2


@queue.task("fan_out", max_attempts=1)
def fan_out(job: chit.JobContext, body: dict[str, Any]) -> list[Any]:
    """Enqueues a `double` child per number in a step (a rerun does not enqueue
    them again), waits for them all without a slot, and returns each one's
    state, result and error."""
    append_line(body["log"], f"start {job.id} {job.attempt}")
    ids = job.step(
        "children",
        lambda: [
            queue.enqueue("double", {"n": n, "fail": n in body.get("fail", [])}).id
            for n in body["numbers"]
        ],
    )
    return [[c.state.value, c.result, c.error] for c in job.wait_for_jobs(ids)]


def demo(q: chit.Queue) -> list[str]:
    """`chit up --demo`'s jobs: one that does nothing."""
    return [q.enqueue("noop", {}).id]


@queue.task("streamer", max_attempts=3)
def streamer(job: chit.JobContext, body: dict[str, Any]) -> dict[str, Any]:
    """Emits body['count'] values {"i", "attempt"}, body['every'] seconds
    apart; the first attempt then logs 'emitted' to body['log'] and waits
    body['seconds'] (long enough to be killed in)."""
    for i in range(body["count"]):
        job.emit({"i": i, "attempt": job.attempt})
        time.sleep(body["every"])
    if job.attempt == 1:
        append_line(body["log"], f"emitted {job.id} {os.getpid()}")
        threading.Event().wait(body["seconds"])
    return {"emitted": body["count"], "attempt": job.attempt}
