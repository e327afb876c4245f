"""What the HTTP API takes and answers, as pydantic models: the OpenAPI schema
and `chit.Client` both use them. Times are ISO 8601 with a timezone."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, AwareDatetime, BaseModel, BeforeValidator, ConfigDict, Field

from chit import bounds
from chit.jobs import FailureGroup, Job, KindLastHour, State, Stats


def _in_range(value: datetime) -> datetime:
    utc = bounds.storable_time(value)
    if utc is None:
        raise ValueError(f"time out of range: use {bounds.YEARS}")
    return utc


def _written_out(value: Any) -> Any:
    # Lax pydantic reads a number as seconds since 1970: `"run_at": 0` is a slip.
    if isinstance(value, int | float):
        raise ValueError("a time is ISO 8601 text with a timezone, not a number")
    return value


Moment = Annotated[AwareDatetime, BeforeValidator(_written_out), AfterValidator(_in_range)]
Name = Annotated[str, Field(min_length=1, max_length=bounds.NAME_MAX)]


class SubmitJob(BaseModel):
    """`POST /jobs`. The payload is checked against the task's model."""

    model_config = ConfigDict(extra="forbid")

    kind: Name
    payload: Any = Field(default=None, description="JSON; checked against the task's payload model")
    queue: Name | None = None
    # Strict: `true` or `1.5` is a slip, not priority 1.
    priority: int | None = Field(
        default=None,
        strict=True,
        ge=-bounds.PRIORITY_LIMIT,
        le=bounds.PRIORITY_LIMIT,
        description="smaller runs first; default 0",
    )
    run_at: Moment | None = Field(default=None, description="not before this time")
    max_attempts: int | None = Field(default=None, strict=True, ge=1, le=bounds.MAX_ATTEMPTS)
    # Strict: `true` or "30" is a slip, not a number of seconds.
    timeout: float | None = Field(
        default=None,
        strict=True,
        gt=0,
        le=bounds.TIMEOUT_MAX,
        allow_inf_nan=False,
        description="seconds an attempt may run before it fails 'timed out'; default: the task's",
    )


class Submitted(BaseModel):
    job_id: str
    status_url: str
    created: bool = Field(description="false: the Idempotency-Key matched an existing job")


class ProgressOut(BaseModel):
    done: int | None = None
    total: int | None = None


class JobStatus(BaseModel):
    """`GET /jobs/{id}`. A large result is not inlined: follow `result_url`."""

    id: str
    kind: str
    queue: str
    priority: int
    state: State
    attempts: int
    max_attempts: int
    progress: ProgressOut
    result: Any = None
    result_url: str | None = Field(
        default=None, description="set when the result is too large to inline"
    )
    error: str | None = None
    stale: bool = Field(description="running, but the lease expired: the worker may be gone")
    cancel_requested: bool
    run_at: datetime
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    timeout: float | None = Field(default=None, description="seconds an attempt may run")

    @classmethod
    def of(cls, job: Job, result_url: str) -> JobStatus:
        return cls(
            id=job.id,
            kind=job.kind,
            queue=job.queue,
            priority=job.priority,
            state=job.state,
            attempts=job.attempts,
            max_attempts=job.max_attempts,
            progress=ProgressOut(done=job.progress.done, total=job.progress.total),
            result=None if job.result_external else job.result,
            result_url=result_url if job.result_external else None,
            error=job.error,
            stale=job.stale,
            cancel_requested=job.cancel_requested,
            run_at=job.run_at,
            created_at=job.created_at,
            updated_at=job.updated_at,
            started_at=job.started_at,
            finished_at=job.finished_at,
            timeout=job.timeout,
        )


class JobList(BaseModel):
    jobs: list[JobStatus]
    next_cursor: str | None = Field(description="pass as `cursor` for the next page")


class ReplayRequest(BaseModel):
    """`POST /jobs/replay`: explicit ids (failed or cancelled jobs), or every failed
    job matching all the given filters. At least one field is required."""

    model_config = ConfigDict(extra="forbid")

    ids: list[str] | None = Field(default=None, max_length=bounds.REPLAY_IDS_MAX)
    kind: Name | None = None
    error_prefix: str | None = Field(default=None, min_length=1, max_length=bounds.ERROR_PREFIX_MAX)
    since: Moment | None = Field(default=None, description="failed at or after this time")


class Replayed(BaseModel):
    replayed: int


class FailureGroupOut(BaseModel):
    kind: str
    error: str = Field(description="the first line of the error")
    count: int
    first_seen: datetime
    last_seen: datetime
    latest_id: str

    @classmethod
    def of(cls, group: FailureGroup) -> FailureGroupOut:
        return cls(
            kind=group.kind,
            error=group.error,
            count=group.count,
            first_seen=group.first_seen,
            last_seen=group.last_seen,
            latest_id=group.latest_id,
        )


class Failures(BaseModel):
    groups: list[FailureGroupOut]


class KindLastHourOut(BaseModel):
    succeeded: int
    failed: int
    failure_ratio: float | None = Field(
        description="failed / succeeded over the last hour; null when nothing succeeded"
    )


class StatsOut(BaseModel):
    by_state: dict[str, int]
    by_kind: dict[str, dict[str, int]]
    failed_last_hour: int
    succeeded_last_hour: int
    failure_rate: float | None = Field(description="failed / finished over the last hour")
    queue_lag_seconds: float | None = Field(description="age of the oldest due queued job")
    stale_running: int
    last_hour_by_kind: dict[str, KindLastHourOut] = Field(
        default_factory=dict,
        description="jobs that succeeded and failed in the last hour, per kind",
    )

    @classmethod
    def of(cls, stats: Stats, last_hour: list[KindLastHour] | None = None) -> StatsOut:
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
                    succeeded=k.succeeded, failed=k.failed, failure_ratio=k.failure_ratio
                )
                for k in last_hour or ()
            },
        )


class Health(BaseModel):
    status: Literal["ok"]


class Ready(BaseModel):
    status: Literal["ready"]
    schema_version: int


class ErrorOut(BaseModel):
    """Every error the API answers: a stable `error` code for programs and a
    `message` for people; `details` carries field errors or known kinds."""

    error: str
    message: str
    details: Any = None
