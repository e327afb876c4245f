"""The schedules' end-to-end app: one no-op task and a schedule declared in
code, every second, which each worker writes to the database as it starts."""

from __future__ import annotations

from typing import Any

import chit

queue = chit.Queue()


@queue.task("tick")
def tick(job: chit.JobContext, body: dict[str, Any]) -> dict[str, Any]:
    return {"slot": job.id}


queue.schedule("every-second", "tick", {"from": "code"}, every="1s")
