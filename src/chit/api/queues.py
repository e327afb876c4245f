"""`GET /queues`: each queue's load and the live workers, what an autoscaler
reads (DESIGN.md "Autoscaling signals"; docs/autoscaling.md). `/metrics` has
the same figures (chit/api/metrics.py)."""

from __future__ import annotations

import dataclasses

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from chit import fleet
from chit.api.deps import Reader, api_state, blocking
from chit.api.errors import ChitRoute, documented
from chit.queue import Queue
from chit.store import FullStore

router = APIRouter(
    route_class=ChitRoute, generate_unique_id_function=lambda route: route.name, tags=["queues"]
)


class QueueOut(BaseModel):
    name: str
    ready: int = Field(description="queued jobs that can start now")
    scheduled: int = Field(description="queued jobs due later: a delay, a retry's backoff")
    running: int = Field(description="jobs a worker holds")
    oldest_ready_seconds: float = Field(description="how long the oldest ready job has waited")
    paused: bool = Field(description="claims take none of its jobs until resumed")


class WorkersOut(BaseModel):
    count: int = Field(description="workers alive: beating, not stopped")
    slots: int = Field(description="handlers they run at once, in all")
    busy: int = Field(description="slots running a job now")


class QueuesOut(BaseModel):
    queues: list[QueueOut]
    workers: WorkersOut


def read_loads(
    store: FullStore, queue: Queue | None, tenant: str | None
) -> tuple[list[fleet.QueueLoad], fleet.Fleet]:
    """Every queue's load (the caller's tenant's jobs) and the live workers.
    The app's tasks' queues and `default` are always in it, at zero when empty.
    A tenant's key learns no other queue's name: not the queues workers take,
    nor the paused ones (pauses are the operators', as in /stats)."""
    workers = store.live_workers()
    tasks = queue.tasks.values() if queue is not None else ()
    known = {"default", *(task.queue for task in tasks)}
    counts, pauses = store.queue_counts(tenant), store.pauses()
    if tenant is not None:
        named = known | {c.queue for c in counts}
        pauses = [p for p in pauses if p.queue in named]
    named_by = workers if tenant is None else []
    loads = fleet.queue_loads(counts, pauses, named_by, known)
    return loads, fleet.fleet(workers)


@router.get(
    "/queues",
    name="list_queues",
    response_model=QueuesOut,
    summary="Each queue's ready, scheduled and running jobs, and the workers: for autoscaling",
    responses=documented(),
)
async def list_queues(request: Request, principal: Reader) -> QueuesOut:
    """Ready jobs can start now; scheduled ones are due later. The workers are
    those alive (each says so every upkeep; one that stops is gone at once, one
    that dies within three upkeeps, 45 s at most). A tenant's key counts its
    own jobs; the workers and pauses are everyone's."""
    state = api_state(request)
    loads, workers = await blocking(read_loads, state.store, state.queue, principal.tenant)
    return QueuesOut(
        queues=[QueueOut(**dataclasses.asdict(q)) for q in loads],
        workers=WorkersOut(**dataclasses.asdict(workers)),
    )
