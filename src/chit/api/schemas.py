"""What the HTTP API takes and answers, as pydantic models: the OpenAPI schema
and `chit.Client` both use them. Times are ISO 8601 with a timezone."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    WithJsonSchema,
    model_validator,
)

from chit import bounds
from chit.ids import JOB_ID_PATTERN
from chit.jobs import FailureGroup, Job, KindLastHour, State, Stats, Step, WorkflowView
from chit.limits import KindLimits, Limits, Paused
from chit.queue import JobRequest
from chit.schedules import StoredSchedule, recent_slots, slot_key, slot_text


def _in_range(value: datetime) -> datetime:
    utc = bounds.storable_time(value)
    if utc is None:
        raise ValueError(f"time out of range: use {bounds.YEARS}")
    return utc


def _whole(value: Any) -> Any:
    # JSON Schema's integer is any number without a fraction: 2.0 is 2 (1.5 and
    # true are still refused by the strict field).
    if type(value) is float and value.is_integer() and abs(value) <= 2**53:
        return int(value)
    return value


def _written_out(value: Any) -> Any:
    # Lax pydantic reads a number as seconds since 1970: `"run_at": 0` is a slip,
    # and so is `?since=0.5` (a query's values are all text).
    if isinstance(value, int | float) or (isinstance(value, str) and _number(value)):
        raise ValueError("a time is ISO 8601 text with a timezone, not a number")
    return value


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _printable(value: str) -> str:
    if not bounds.is_plain_text(value):  # NUL, newlines, control characters
        raise ValueError("a concurrency key is printable text: no NUL or control characters")
    return value


def no_nul(value: Any) -> Any:
    """PostgreSQL's text cannot hold NUL and SQLite would: refuse it on both."""
    if isinstance(value, str) and "\x00" in value:
        raise ValueError("text cannot hold a NUL character (\\u0000)")
    return value


Moment = Annotated[
    AwareDatetime,
    BeforeValidator(_written_out),
    AfterValidator(_in_range),
    Field(json_schema_extra={"pattern": bounds.YEAR_PATTERN}),
]
# Strict: `true` or `1.5` is a slip, not priority 1.
Priority = Annotated[
    int,
    Field(strict=True, ge=-bounds.PRIORITY_LIMIT, le=bounds.PRIORITY_LIMIT),
    BeforeValidator(_whole),
]
Name = Annotated[str, Field(min_length=1, max_length=bounds.NAME_MAX), AfterValidator(no_nul)]
ConcurrencyKey = Annotated[
    str,
    Field(
        min_length=1,
        max_length=bounds.CONCURRENCY_KEY_MAX,
        description="jobs of a key are limited together (a task's key_concurrency, key_rate)",
        json_schema_extra={"pattern": bounds.PLAIN_TEXT_PATTERN},
    ),
    AfterValidator(_printable),
]


def _one_line(value: str) -> str:
    if not bounds.is_plain_text(value):
        raise ValueError("a ref is printable text: no NUL or control characters")
    return value


Ref = Annotated[
    str,
    Field(
        min_length=1,
        max_length=bounds.REF_MAX,
        description="this job's name in its workflow, which other jobs give in depends_on",
        json_schema_extra={"pattern": bounds.PLAIN_TEXT_PATTERN},
    ),
    AfterValidator(_one_line),
]
# A dependency: a job id, or (in POST /workflows) a ref of the same request.
DependencyName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=bounds.REF_MAX,
        json_schema_extra={"pattern": bounds.PLAIN_TEXT_PATTERN},
    ),
    AfterValidator(_one_line),
]
RunOnIn = Literal["succeeded", "finished"]


def _ascii_printable(value: str) -> str:
    if not (value.isprintable() and value.isascii()):
        raise ValueError("a key is printable ASCII: no NUL, control or non-ASCII characters")
    return value


_PRINTABLE_ASCII = {"pattern": "^[ -~]*$"}


DebounceKey = Annotated[
    str,
    Field(
        min_length=1,
        max_length=bounds.DEBOUNCE_KEY_MAX,
        description="while the job of this key has not started, another submit with the key "
        "replaces its payload and moves its start (created: false, debounced: true)",
        json_schema_extra=_PRINTABLE_ASCII,
    ),
    AfterValidator(_ascii_printable),
]
UniqueKey = Annotated[
    str,
    Field(
        min_length=1,
        max_length=bounds.UNIQUE_KEY_MAX,
        description="at most one job per key waiting, queued or running: another submit "
        "answers that job (created: false); free again once it has finished",
        json_schema_extra=_PRINTABLE_ASCII,
    ),
    AfterValidator(_ascii_printable),
]


_DEBOUNCED: dict[str, JsonValue] = {
    "required": ["debounce_key"],
    "properties": {"debounce_key": {"type": "string"}},
}


class SubmitJob(BaseModel):
    """`POST /jobs`. The payload is checked against the task's model."""

    # The schema says what `_one_expiry` and the queue's check_debounce check (a
    # null is absent): not both expiries; debounce and debounce_max only with a
    # debounce_key, which needs debounce and leaves the start to it.
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "allOf": [
                {
                    "not": {
                        "required": ["expires_at", "expires_in"],
                        "properties": {
                            "expires_at": {"type": "string"},
                            "expires_in": {"type": "number"},
                        },
                    }
                },
                {
                    "if": {
                        "anyOf": [
                            {"required": [name], "properties": {name: {"type": "number"}}}
                            for name in ("debounce", "debounce_max")
                        ]
                    },
                    "then": _DEBOUNCED,
                },
                {
                    "if": _DEBOUNCED,
                    "then": {
                        "required": ["debounce"],
                        "properties": {
                            "debounce": {"type": "number"},
                            "depends_on": {"maxItems": 0},
                            **{
                                name: {"type": "null"}
                                for name in (
                                    "run_at",
                                    "expires_at",
                                    "expires_in",
                                    "unique_key",
                                    "ref",
                                )
                            },
                        },
                    },
                },
            ]
        },
    )

    kind: Name
    payload: Any = Field(default=None, description="JSON; checked against the task's payload model")
    queue: Name | None = None
    priority: Priority | None = Field(default=None, description="smaller runs first; default 0")
    run_at: Moment | None = Field(default=None, description="not before this time")
    max_attempts: Annotated[int | None, BeforeValidator(_whole)] = Field(
        default=None, strict=True, ge=1, le=bounds.MAX_ATTEMPTS
    )
    # Strict: `true` or "30" is a slip, not a number of seconds.
    timeout: float | None = Field(
        default=None,
        strict=True,
        gt=0,
        le=bounds.TIMEOUT_MAX,
        allow_inf_nan=False,
        description="seconds an attempt may run before it fails 'timed out'; default: the task's",
    )
    concurrency_key: ConcurrencyKey | None = None
    ref: Ref | None = None
    depends_on: list[DependencyName] = Field(
        default_factory=list,
        max_length=bounds.DEPENDENCIES_MAX,
        description="ids of jobs (of the same tenant) this one waits for: it stays "
        "`waiting` until each has succeeded, and is cancelled if one fails or is cancelled",
    )
    run_on: RunOnIn = Field(
        default="succeeded",
        description="`finished`: run once every dependency has ended, whatever the outcome "
        "(a callback)",
    )
    expires_at: Moment | None = Field(
        default=None,
        description="not started by this time, the job ends `cancelled` "
        "('expired before it started'); not with expires_in",
    )
    expires_in: float | None = Field(
        default=None,
        strict=True,
        gt=0,
        le=bounds.EXPIRES_IN_MAX,
        allow_inf_nan=False,
        description="seconds from now: the same as expires_at, by the database's clock",
    )

    unique_key: UniqueKey | None = None
    debounce_key: DebounceKey | None = None
    debounce: float | None = Field(
        default=None,
        strict=True,
        ge=bounds.DEBOUNCE_MIN,
        le=bounds.DEBOUNCE_MAX,
        allow_inf_nan=False,
        description="with debounce_key: seconds to wait for another submit of the key before "
        "the job starts; each one moves the start to this long after it",
    )
    debounce_max: float | None = Field(
        default=None,
        strict=True,
        ge=bounds.DEBOUNCE_MIN,
        le=bounds.DEBOUNCE_BOUND_MAX,
        allow_inf_nan=False,
        description="seconds after the first submit that the start never moves past; "
        "default 10 x debounce",
    )

    @model_validator(mode="after")
    def _one_expiry(self) -> SubmitJob:
        if self.expires_at is not None and self.expires_in is not None:
            raise ValueError("give expires_at or expires_in, not both")
        return self

    def job_request(self, tenant: str, idempotency_key: str | None) -> JobRequest:
        return JobRequest(
            kind=self.kind,
            payload=self.payload,
            idempotency_key=idempotency_key,
            run_at=self.run_at,
            priority=self.priority,
            queue=self.queue,
            max_attempts=self.max_attempts,
            tenant=tenant,
            timeout=self.timeout,
            concurrency_key=self.concurrency_key,
            ref=self.ref,
            depends_on=self.depends_on,
            run_on=self.run_on,
            expires_at=self.expires_at,
            expires_in=self.expires_in,
            unique_key=self.unique_key,
            debounce_key=self.debounce_key,
            debounce=self.debounce,
            debounce_max=self.debounce_max,
        )


class EditJob(BaseModel):
    """`PATCH /jobs/{job_id}`: what to change of a job that has not started;
    each field given replaces the stored one."""

    model_config = ConfigDict(extra="forbid")

    run_at: Moment | None = Field(default=None, description="not before this time")
    priority: Priority | None = Field(default=None, description="smaller runs first")
    payload: Any = Field(
        default=None, description="JSON; checked against the task's payload model, as at submit"
    )


class Submitted(BaseModel):
    job_id: str
    status_url: str
    created: bool = Field(
        description="false: the Idempotency-Key matched an existing job, the unique_key "
        "an active one, or the debounce_key one not started (then debounced is true)"
    )
    debounced: bool = Field(
        default=False,
        description="true: the debounce_key's job, not started yet, took this payload and start",
    )
    workflow_id: str | None = Field(
        default=None, description="the workflow the job joined (one with dependencies)"
    )
    events_token: str | None = Field(
        default=None,
        description="a short-lived token for this job's event stream alone, for a browser's "
        "EventSource (which cannot send Authorization); given to keys with read scope",
    )
    events_url: str | None = Field(
        default=None, description="the event stream's path with events_token in its query"
    )


class SubmitWorkflow(BaseModel):
    """`POST /workflows`: jobs linked by `ref` and `depends_on` (refs of this
    request, or ids of stored jobs), stored all or nothing."""

    model_config = ConfigDict(extra="forbid")

    jobs: list[SubmitJob] = Field(min_length=1, description="in the order they are stored")

    @model_validator(mode="after")
    def _edges(self) -> SubmitWorkflow:
        edges = sum(len(job.depends_on) for job in self.jobs)
        if edges > bounds.DEPENDENCIES_MAX:
            raise ValueError(
                f"a workflow has at most {bounds.DEPENDENCIES_MAX:,} dependencies "
                f"(depends_on entries, over all its jobs); this one has {edges:,}"
            )
        return self


class WorkflowSubmitted(BaseModel):
    workflow_id: str
    jobs: dict[str, str] = Field(description="each job's id by its ref")
    ids: list[str] = Field(description="every job's id, in the order given (with or without a ref)")
    status_url: str
    created: bool = Field(description="false: the Idempotency-Key matched an existing workflow")


class WorkflowJobOut(BaseModel):
    id: str
    ref: str | None
    kind: str
    state: State
    depends_on: list[str] = Field(description="job ids")
    run_on: RunOnIn


class WorkflowOut(BaseModel):
    """`GET /workflows/{id}`: its jobs in the order stored, with their edges."""

    id: str
    jobs: list[WorkflowJobOut]
    states: dict[str, int] = Field(description="how many of its jobs are in each state")

    @classmethod
    def of(cls, view: WorkflowView) -> WorkflowOut:
        states: dict[str, int] = {}
        for job in view.jobs:
            states[job.state.value] = states.get(job.state.value, 0) + 1
        return cls(
            id=view.id,
            jobs=[
                WorkflowJobOut(
                    id=j.id,
                    ref=j.ref,
                    kind=j.kind,
                    state=j.state,
                    depends_on=list(j.depends_on),
                    run_on=j.run_on.value,
                )
                for j in view.jobs
            ],
            states=states,
        )


class WorkflowCancelled(BaseModel):
    id: str
    cancelled: int = Field(
        description="jobs cancelled (waiting or queued) or asked to stop (running)"
    )


class DependenciesOut(BaseModel):
    total: int
    succeeded: int
    failed: int
    cancelled: int
    pending: int = Field(description="not finished yet")


class ProgressOut(BaseModel):
    done: int | None = None
    total: int | None = None


class JobStatus(BaseModel):
    """`GET /jobs/{id}`. A large result is not inlined: follow `result_url`."""

    id: str
    kind: str
    queue: str
    priority: int
    concurrency_key: str | None = Field(default=None, description="null: none")
    state: State
    attempts: int
    max_attempts: int
    progress: ProgressOut
    result: Any = None
    result_url: str | None = Field(
        default=None, description="set when the result is too large to inline"
    )
    error: str | None = Field(
        default=None,
        description="why a failed job failed: its first line ('Type: message'); "
        "the traceback too for admin keys",
    )
    error_type: str | None = Field(default=None, description="the exception's type, of `error`")
    last_error: str | None = Field(
        default=None,
        description="an earlier attempt's error, while the job is not failed (queued for a "
        "retry, running again, or succeeded after it); shown as `error` is",
    )
    stale: bool = Field(description="running, but the lease expired: the worker may be gone")
    cancel_requested: bool
    run_at: datetime
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    timeout: float | None = Field(default=None, description="seconds an attempt may run")
    workflow_id: str | None = Field(default=None, description="null: in no workflow")
    ref: str | None = None
    depends_on: list[str] = Field(default_factory=list, description="ids of its dependencies")
    run_on: RunOnIn = "succeeded"
    dependencies: DependenciesOut | None = Field(
        default=None, description="its direct dependencies by outcome; null: it has none"
    )
    expires_at: datetime | None = Field(
        default=None, description="not started by then, it ends cancelled; null: never"
    )
    unique_key: str | None = Field(default=None, description="null: none")
    debounce_key: str | None = Field(default=None, description="null: none")

    @classmethod
    def of(cls, job: Job, result_url: str, traceback: bool = False) -> JobStatus:
        """`traceback`: the error whole, with the server's paths (admin keys,
        the dashboard); otherwise its first line only."""
        error = job.error if traceback or job.error is None else headline(job.error)
        failed = job.state in (State.FAILED, State.CANCELLED)
        return cls(
            id=job.id,
            kind=job.kind,
            queue=job.queue,
            priority=job.priority,
            concurrency_key=job.concurrency_key or None,
            state=job.state,
            attempts=job.attempts,
            max_attempts=job.max_attempts,
            progress=ProgressOut(done=job.progress.done, total=job.progress.total),
            result=None if job.result_external else job.result,
            result_url=result_url if job.result_external else None,
            error=error if failed else None,
            error_type=error_type(job.error) if failed else None,
            last_error=None if failed else error,
            stale=job.stale,
            cancel_requested=job.cancel_requested,
            run_at=job.run_at,
            created_at=job.created_at,
            updated_at=job.updated_at,
            started_at=job.started_at,
            finished_at=job.finished_at,
            timeout=job.timeout,
            workflow_id=job.workflow_id,
            ref=job.ref,
            depends_on=list(job.depends_on),
            run_on=job.run_on.value,
            dependencies=None
            if job.dependencies is None
            else DependenciesOut(
                total=job.dependencies.total,
                succeeded=job.dependencies.succeeded,
                failed=job.dependencies.failed,
                cancelled=job.dependencies.cancelled,
                pending=job.dependencies.pending,
            ),
            expires_at=job.expires_at,
            unique_key=job.unique_key,
            debounce_key=job.debounce_key,
        )


def headline(error: str) -> str:
    """The first line of a stored error: 'Type: message' (worker/execute.py)."""
    return error.split("\n", 1)[0]


def error_type(error: str | None) -> str | None:
    if not error:
        return None
    name = headline(error).split(":", 1)[0].strip()
    return name if name.replace(".", "").replace("_", "").isalnum() else None


class JobList(BaseModel):
    jobs: list[JobStatus]
    next_cursor: str | None = Field(description="pass as `cursor` for the next page")


class StepOut(BaseModel):
    name: str
    attempt: int = Field(description="the attempt that ran the step and stored its result")
    result: Any = Field(description="the step's JSON result, as stored")
    created_at: datetime = Field(description="when the result was stored")

    @classmethod
    def of(cls, step: Step) -> StepOut:
        return cls(
            name=step.name, attempt=step.attempt, result=step.result, created_at=step.created_at
        )


class StepList(BaseModel):
    steps: list[StepOut] = Field(description="in the order they were stored")


class ReplayRequest(BaseModel):
    """`POST /jobs/replay`: explicit ids (failed or cancelled jobs), or every failed
    job matching all the given filters. At least one field is required."""

    model_config = ConfigDict(extra="forbid")

    ids: list[str] | None = Field(default=None, max_length=bounds.REPLAY_IDS_MAX)
    kind: Name | None = None
    error_prefix: Annotated[str, AfterValidator(no_nul)] | None = Field(
        default=None, min_length=1, max_length=bounds.ERROR_PREFIX_MAX
    )
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


# Flow control (DESIGN.md, "Flow control")

_CONCURRENCY_SCHEMA: dict[str, Any] = {
    "type": "integer",
    "minimum": 1,
    "maximum": bounds.CONCURRENCY_MAX,
}
# 1 to 1,000,000 (RATE_MAX) starts a period, as `Limits.checked` allows.
_RATE_SCHEMA: dict[str, Any] = {
    "type": "string",
    "pattern": r"^\s*0*([1-9][0-9]{0,5}|1000000)\s*/\s*(s|m|h)\s*$",
}
# Typed for the schema, checked by `Limits.checked`: the API refuses a bad value
# with the message `@queue.task` and the CLI give.
_ConcurrencyIn = Annotated[Any, WithJsonSchema({"anyOf": [_CONCURRENCY_SCHEMA, {"type": "null"}]})]
_RateIn = Annotated[Any, WithJsonSchema({"anyOf": [_RATE_SCHEMA, {"type": "null"}]})]


class SetLimits(BaseModel):
    """`PUT /limits/{kind}`: the operator's override of the limits given (at
    least one); the others stay as they were. Rates are "N/s", "N/m" or "N/h"."""

    # At least one given, not null: `{}` is refused with 422 and the schema says so.
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "anyOf": [
                {"required": [name], "properties": {name: dict(schema)}}
                for name, schema in (
                    ("concurrency", _CONCURRENCY_SCHEMA),
                    ("rate", _RATE_SCHEMA),
                    ("key_concurrency", _CONCURRENCY_SCHEMA),
                    ("key_rate", _RATE_SCHEMA),
                )
            ]
        },
    )

    concurrency: _ConcurrencyIn = Field(default=None, description="at most this many running")
    rate: _RateIn = Field(default=None, description='at most N starts per period, e.g. "10/s"')
    key_concurrency: _ConcurrencyIn = Field(default=None, description="the same, per key")
    key_rate: _RateIn = Field(default=None, description="the same, per key")

    def checked(self) -> Limits:
        """The limits, or LimitError (answered 422 with its message)."""
        return Limits.checked(self.concurrency, self.rate, self.key_concurrency, self.key_rate)


class LimitValues(BaseModel):
    concurrency: int | None = None
    rate: str | None = Field(default=None, description='"N/s", "N/m" or "N/h"')
    key_concurrency: int | None = None
    key_rate: str | None = None

    @classmethod
    def of(cls, limits: Limits) -> LimitValues:
        return cls.model_validate(limits.as_dict())


class LimitOut(BaseModel):
    """A kind's limits in force (the operator's where set, else the code's),
    what each side set, and the kind's jobs now."""

    kind: str
    concurrency: int | None = None
    rate: str | None = None
    key_concurrency: int | None = None
    key_rate: str | None = None
    declared: LimitValues = Field(description="by the code, when a worker started")
    override: LimitValues = Field(description="by an operator, until cleared")
    running: int
    waiting: int = Field(description="queued and due, not running")
    updated_at: datetime | None = None

    @classmethod
    def of(cls, kind: KindLimits) -> LimitOut:
        return cls(
            kind=kind.kind,
            **kind.effective.as_dict(),
            declared=LimitValues.of(kind.declared),
            override=LimitValues.of(kind.override),
            running=kind.running,
            waiting=kind.waiting,
            updated_at=kind.updated_at,
        )


class PausedOut(BaseModel):
    """A paused queue (`kind` null) or kind (`queue` null)."""

    queue: str | None
    kind: str | None
    paused_at: datetime

    @classmethod
    def of(cls, paused: Paused) -> PausedOut:
        return cls(queue=paused.queue, kind=paused.kind, paused_at=paused.paused_at)


class LimitsOut(BaseModel):
    """`GET /limits`, and `chit limits --json`."""

    limits: list[LimitOut]
    paused: list[PausedOut]

    @classmethod
    def of(cls, limits: Sequence[KindLimits], pauses: Sequence[Paused]) -> LimitsOut:
        return cls(
            limits=[LimitOut.of(k) for k in limits], paused=[PausedOut.of(p) for p in pauses]
        )


class Cleared(BaseModel):
    kind: str
    cleared: bool = Field(description="false: the kind had no operator override")


class QueuePause(BaseModel):
    queue: str
    paused: bool
    changed: bool = Field(description="false: it was paused (or running) already")


class KindPause(BaseModel):
    kind: str
    paused: bool
    changed: bool = Field(description="false: it was paused (or running) already")


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


class Health(BaseModel):
    status: Literal["ok"]


class Ready(BaseModel):
    status: Literal["ready"]
    schema_version: int


class ErrorOut(BaseModel):
    """Every error the API answers: a stable `error` code for programs and a
    `message` for people; `details` is always an object: `errors` (a list of
    `loc`, `msg`, `type`) for invalid fields, `known_kinds`, `job_id`, or empty."""

    error: str
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


class EventsTokenOut(BaseModel):
    """`POST /jobs/{job_id}/events-token`: open `events_url` with no Authorization."""

    job_id: str
    events_token: str
    events_url: str = Field(description="the event stream's path with the token in its query")
    expires_at: datetime = Field(description="the token is refused from then on")


def replay_request_schema() -> dict[str, Any]:
    """`ReplayRequest` as the route takes it: ids alone, or at least one filter
    (a null field counts as absent). The model alone says "any field may be
    null", which let generated clients send `{}` or both, refused with 422."""
    fields = ReplayRequest.model_json_schema()["properties"]
    null = {"type": "null"}

    def given(name: str) -> dict[str, Any]:
        value = dict(fields[name]["anyOf"][0])
        if name == "ids":
            value["items"] = {"type": "string", "pattern": f"^{JOB_ID_PATTERN.pattern}$"}
        return value

    def variant(present: tuple[str, ...], must: list[dict[str, Any]]) -> dict[str, Any]:
        properties = {
            name: {"anyOf": [given(name), null]} if name in present else null for name in fields
        }
        if "ids" in present:
            properties["ids"] = given("ids")
        return {
            "type": "object",
            "additionalProperties": False,
            "properties": properties,
            **({"anyOf": must} if must else {"required": ["ids"]}),
        }

    filters = ("kind", "error_prefix", "since")
    return {
        "description": inspect.cleandoc(ReplayRequest.__doc__ or ""),
        "oneOf": [
            variant(("ids",), []),
            variant(
                filters,
                [{"required": [name], "properties": {name: given(name)}} for name in filters],
            ),
        ],
    }


# Schedules (DESIGN.md, "Time")


class PutSchedule(BaseModel):
    """`PUT /schedules/{name}`: declare or replace a schedule. Exactly one of
    `cron` (5 fields, in `tz`) and `every` ("30s", "15m", or seconds). A schedule
    whose rule is unchanged keeps its next slot; `paused` left out keeps its pause."""

    model_config = ConfigDict(extra="forbid")

    kind: str = Field(description="the task kind each slot's job runs")
    payload: Any = Field(default=None, description="the jobs' payload (a JSON object)")
    cron: Any = Field(default=None, description='a 5-field cron rule, e.g. "0 8 * * *"')
    every: Any = Field(default=None, description='a period, e.g. "30s" or 30 (seconds); >= 1 s')
    tz: Any = Field(default="UTC", description='an IANA time zone for cron, e.g. "Europe/Paris"')
    catch_up: Any = Field(
        default="latest", description="after downtime: latest (one), all (each) or none"
    )
    paused: bool | None = Field(default=None, strict=True)  # 0 or "yes" is a slip


class ScheduleRun(BaseModel):
    """One of a schedule's recent jobs."""

    slot: str = Field(description="the slot in UTC, YYYY-MM-DDTHH:MM:SSZ")
    job_id: str
    state: State
    finished_at: datetime | None = None
    error: str | None = None

    @classmethod
    def recent(cls, jobs_of: Any, s: StoredSchedule, count: int = 10) -> list[ScheduleRun]:
        """The jobs of the schedule's last `count` slots, newest first, read with
        `jobs_of(keys)` (the store's schedule_runs): slots with no job left out."""
        slots = recent_slots(s.rule, s.last_slot, count)
        by_key = {j.idempotency_key: j for j in jobs_of([slot_key(s.name, t) for t in slots])}
        runs = []
        for t in slots:
            job = by_key.get(slot_key(s.name, t))
            if job is not None:
                runs.append(
                    cls(
                        slot=slot_text(t),
                        job_id=job.id,
                        state=job.state,
                        finished_at=job.finished_at,
                        error=job.error,
                    )
                )
        return runs


class ScheduleOut(BaseModel):
    name: str
    kind: str
    payload: dict[str, Any]
    rule: str = Field(description='as people read it: "0 8 * * * (Europe/Paris)", "every 30s"')
    cron: str | None
    every: int | None = Field(description="seconds")
    tz: str
    catch_up: str
    paused: bool
    source: str = Field(description="code (queue.schedule) or operator (CLI, API)")
    next_at: datetime = Field(description="the next slot to enqueue")
    last_slot: datetime | None
    last_job_id: str | None
    last_job_state: State | None
    created_at: datetime
    updated_at: datetime
    runs: list[ScheduleRun] | None = Field(
        default=None, description="GET /schedules/{name}: the recent slots' jobs, newest first"
    )

    @classmethod
    def of(cls, s: StoredSchedule, runs: Sequence[ScheduleRun] | None = None) -> ScheduleOut:
        return cls(
            name=s.name,
            kind=s.kind,
            payload=s.payload,
            rule=str(s.rule),
            cron=s.rule.cron,
            every=s.rule.every,
            tz=s.rule.tz,
            catch_up=s.catch_up,
            paused=s.paused,
            source=s.source,
            next_at=s.next_at,
            last_slot=s.last_slot,
            last_job_id=s.last_job_id,
            last_job_state=None if s.last_job_state is None else State(s.last_job_state),
            created_at=s.created_at,
            updated_at=s.updated_at,
            runs=None if runs is None else list(runs),
        )


class SchedulesOut(BaseModel):
    schedules: list[ScheduleOut]


class ScheduleRemoved(BaseModel):
    name: str
    removed: bool
