"""`GET /stats` (chit/api/routes.py)."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field

from chit.api.schemas.limits import LimitOut, PausedOut
from chit.jobs import KindLastHour, Stats
from chit.limits import KindLimits, Paused


class KindLastHourOut(BaseModel):
    succeeded: int
    failed: int
    failure_rate: float | None = Field(
        description="failed / (failed + succeeded) over the last hour, 0 to 1"
    )


class StatsOut(BaseModel):
    by_state: dict[str, int]
    by_kind: dict[str, dict[str, int]]
    failed_last_hour: int
    succeeded_last_hour: int
    failure_rate: float | None = Field(
        description="failed / (failed + succeeded) over the last hour, 0 to 1; "
        "null when nothing finished"
    )
    queue_lag_seconds: float | None = Field(description="age of the oldest due queued job")
    stale_running: int
    last_hour_by_kind: dict[str, KindLastHourOut] = Field(
        default_factory=dict,
        description="jobs that succeeded and failed in the last hour, per kind",
    )
    limits: list[LimitOut] = Field(
        default_factory=list,
        description="every kind's limits, as GET /limits (for a key of every tenant only: "
        "the counts span tenants)",
    )
    paused: list[PausedOut] = Field(
        default_factory=list, description="paused queues and kinds (as `limits`)"
    )

    @classmethod
    def of(
        cls,
        stats: Stats,
        last_hour: list[KindLastHour] | None = None,
        limits: Sequence[KindLimits] = (),
        pauses: Sequence[Paused] = (),
    ) -> StatsOut:
        return cls(
            by_state=stats.by_state,
            by_kind=stats.by_kind,
            failed_last_hour=stats.failed_last_hour,
            succeeded_last_hour=stats.succeeded_last_hour,
            failure_rate=stats.failure_rate,
            queue_lag_seconds=stats.oldest_queued_age,
            stale_running=stats.stale_running,
            last_hour_by_kind={
                k.kind: KindLastHourOut(
                    succeeded=k.succeeded, failed=k.failed, failure_rate=k.failure_rate
                )
                for k in last_hour or ()
            },
            limits=[LimitOut.of(k) for k in limits],
            paused=[PausedOut.of(p) for p in pauses],
        )
