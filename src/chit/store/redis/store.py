"""`RedisStore`: the core contract (chit.store.redis.core) and each capability
the Redis store offers, one module each."""

from __future__ import annotations

from chit.store.capabilities import FullStore
from chit.store.redis.access import AccessRedis
from chit.store.redis.fleet import FleetRedis
from chit.store.redis.flow import FlowRedis
from chit.store.redis.output import OutputRedis
from chit.store.redis.reports import ReportsRedis
from chit.store.redis.schedules import SchedulesRedis
from chit.store.redis.waits import WaitsRedis
from chit.store.redis.workflows import WorkflowsRedis


class RedisStore(
    FlowRedis,
    WorkflowsRedis,
    ReportsRedis,
    AccessRedis,
    SchedulesRedis,
    FleetRedis,
    OutputRedis,
    WaitsRedis,
    FullStore,
):
    """The Redis store (Redis 7.0+, Valkey 7.2+); see chit.store.redis.core."""
