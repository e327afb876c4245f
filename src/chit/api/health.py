"""Liveness and readiness probes: no key needed."""

from __future__ import annotations

from fastapi import APIRouter, Request

from chit.api.deps import api_state, blocking
from chit.api.errors import STORE_RETRY_AFTER, ApiProblem, ChitRoute, documented
from chit.api.schemas.health import Health, Ready
from chit.store.capabilities import WriteLock

# Seconds /readyz waits for the database's write lock before saying not ready.
WRITABLE_WITHIN = 1.0

router = APIRouter(
    route_class=ChitRoute, generate_unique_id_function=lambda route: route.name, tags=["health"]
)


@router.get("/healthz", response_model=Health, summary="Liveness: the process answers")
async def get_health() -> Health:
    return Health(status="ok")


@router.get(
    "/readyz",
    response_model=Ready,
    summary="Readiness: the database answers and takes writes",
    responses=documented(),
)
async def get_readiness(request: Request) -> Ready:
    store = api_state(request).store
    version = await blocking(store.schema_version)
    if isinstance(store, WriteLock) and not await blocking(store.writable, WRITABLE_WITHIN):
        raise ApiProblem(
            503,
            "writes_blocked",
            "the job database answers reads, but another process holds its write lock: "
            "writes would wait and fail; try again shortly",
            headers={"Retry-After": str(STORE_RETRY_AFTER)},
        )
    return Ready(status="ready", schema_version=version)
