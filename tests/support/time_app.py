"""Handlers for the snooze, expiry and unique-job tests (DESIGN.md "Time")."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import chit

queue = chit.Queue()


def _snoozes(job: chit.JobContext, body: dict[str, Any]) -> dict[str, Any]:
    """Snoozes body['times'] times (counted in its checkpoint), then returns
    the attempt it succeeded on."""
    seen = (job.last_checkpoint or {}).get("snoozed", 0)
    if seen < body["times"]:
        job.checkpoint({"snoozed": seen + 1})
        raise chit.Snooze(body.get("seconds", 0.2))
    return {"attempt": job.attempt, "snoozed": seen}


@queue.task("poll", max_attempts=1)
def poll(job: chit.JobContext, body: dict[str, Any]) -> dict[str, Any]:
    return _snoozes(job, body)


@queue.task("apoll", max_attempts=1)
async def apoll(job: chit.JobContext, body: dict[str, Any]) -> dict[str, Any]:
    await asyncio.sleep(0)
    return _snoozes(job, body)


@queue.task("bad_snooze", max_attempts=1)
def bad_snooze(job: chit.JobContext, body: dict[str, Any]) -> None:
    """Snoozes for body['seconds'] ("nan": NaN, which JSON cannot carry)."""
    seconds = body["seconds"]
    raise chit.Snooze(float(seconds) if seconds == "nan" else seconds)


@queue.task("noop")
def noop(job: chit.JobContext, body: dict[str, Any]) -> dict[str, Any]:
    return {"attempt": job.attempt}


@queue.task("hold")
def hold(job: chit.JobContext, body: dict[str, Any]) -> dict[str, Any]:
    """Runs until the file body['go'] exists."""
    go = Path(body["go"])
    while not go.exists() and not job.cancelled:
        time.sleep(0.02)
    return {"attempt": job.attempt}
