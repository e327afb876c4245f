"""Handlers for the workflow tests: each returns what it saw of its dependencies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import chit

queue = chit.Queue()


def _seen(job: chit.JobContext) -> list[dict[str, Any]]:
    return [
        {"id": d.id, "kind": d.kind, "state": d.state.value, "result": d.result}
        for d in job.dependencies
    ]


@queue.task("step")
def step(job: chit.JobContext, body: dict[str, Any]) -> dict[str, Any]:
    return {"name": body.get("name"), "deps": _seen(job)}


@queue.task("fragile", max_attempts=1)
def fragile(job: chit.JobContext, body: dict[str, Any]) -> dict[str, Any]:
    """Fails until the file body['fix'] exists."""
    if not Path(body["fix"]).exists():
        raise chit.PermanentError("not fixed yet")
    return {"name": body.get("name"), "deps": _seen(job)}


@queue.task("big")
def big(job: chit.JobContext, body: dict[str, Any]) -> str:
    """A result too large for the job row (stored apart, read on demand)."""
    return "x" * body["size"]
