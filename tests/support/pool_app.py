"""Handlers for the timeout and process-pool tests. A handler that must be found
by the test says where it runs (its pid) in a checkpoint or its result."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from pathlib import Path
from typing import Any

import chit

queue = chit.Queue()


@queue.task("nap", timeout=2, max_attempts=1)
async def nap(job: chit.JobContext, body: dict[str, Any]) -> None:
    """Sleeps body['seconds'] on the event loop: past its 2 s timeout."""
    await asyncio.sleep(body["seconds"])


@queue.task("spin", max_attempts=1)
def spin(job: chit.JobContext, body: dict[str, Any]) -> None:
    """Says its pid in a checkpoint, then loops on the CPU for ever."""
    job.checkpoint({"pid": os.getpid()})
    while True:
        pass


@queue.task("whoami")
def whoami(job: chit.JobContext, body: dict[str, Any]) -> dict[str, Any]:
    return {"pid": os.getpid(), "attempt": job.attempt}


LEAKED: list[bytes] = []


@queue.task("leak")
def leak(job: chit.JobContext, body: dict[str, Any]) -> dict[str, Any]:
    """Keeps body['mb'] MB alive in its process (written, so it is resident)."""
    LEAKED.append(b"x" * (body["mb"] << 20))
    return {"pid": os.getpid()}


@queue.task("die_first", max_attempts=3)
def die_first(job: chit.JobContext, body: dict[str, Any]) -> dict[str, Any]:
    """Its first attempt SIGKILLs its own process; the next one succeeds."""
    if job.attempt == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return {"pid": os.getpid(), "attempt": job.attempt}


@queue.task("steps")
def steps(job: chit.JobContext, body: dict[str, Any]) -> dict[str, Any]:
    """Reports progress 5/10, waits for the file body['go'], checkpoints, then
    waits until cancelled or the file body['finish'] appears."""
    job.progress(5, 10)
    waiting = threading.Event()
    while not Path(body["go"]).exists():
        waiting.wait(0.02)
    stored = job.checkpoint({"step": 5, "pid": os.getpid()})
    while not job.cancelled and not Path(body["finish"]).exists():
        waiting.wait(0.02)
    return {"stored": stored, "cancelled": job.cancelled, "pid": os.getpid()}
