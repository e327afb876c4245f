"""`POST /jobs` and what the job routes answer (chit/api/routes.py,
chit/api/changes.py)."""

from __future__ import annotations

import inspect
from datetime import datetime
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    model_validator,
)

from chit import bounds
from chit.api.schemas.common import (
    ConcurrencyKey,
    DebounceKey,
    DependencyName,
    Moment,
    Name,
    Priority,
    Ref,
    RunOnIn,
    UniqueKey,
    no_nul,
    whole_number,
)
from chit.ids import JOB_ID_PATTERN
from chit.jobs import FailureGroup, Job, State, Step
from chit.requests import JobRequest

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
    max_attempts: Annotated[int | None, BeforeValidator(whole_number)] = Field(
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
    cost: Annotated[int, BeforeValidator(whole_number)] = Field(
        default=1,
        strict=True,
        ge=1,
        le=bounds.COST_MAX,
        description="what the job is expected to spend (tokens, cents), counted against its "
        "kind's cost_rate; more than the kind may spend in a whole window is refused",
    )

    @model_validator(mode="after")
    def _one_expiry(self) -> SubmitJob:
        if self.expires_at is not None and self.expires_in is not None:
            raise ValueError("give expires_at or expires_in, not both")
        return self

    def job_request(self, tenant: str, idempotency_key: str | None) -> JobRequest:
        """The fields are JobRequest's by name; the key and the tenant come
        with the request (its Idempotency-Key header, its API key)."""
        fields = {name: getattr(self, name) for name in type(self).model_fields}
        return JobRequest(**fields, tenant=tenant, idempotency_key=idempotency_key)


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


class DependenciesOut(BaseModel):
    total: int
    succeeded: int
    failed: int
    cancelled: int
    pending: int = Field(description="not finished yet")


class ProgressOut(BaseModel):
    done: int | None = None
    total: int | None = None
    message: str | None = Field(
        default=None, description="what the job said it is doing (job.progress(..., message=))"
    )


class WaitingForOut(BaseModel):
    """What a waiting job waits for (JobContext.wait_for, wait_for_jobs)."""

    signal: str | None = Field(default=None, description="the signal's name; null: jobs")
    jobs: list[str] | None = Field(default=None, description="the jobs' ids; null: a signal")
    until: datetime | None = Field(
        default=None, description="when it is queued anyway, its wait timed out; null: never"
    )


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
    waiting_for: WaitingForOut | None = Field(
        default=None,
        description="waiting: what its handler waits for; null otherwise (and for a job "
        "waiting for its dependencies)",
    )
    cost: int = Field(
        default=1,
        description="what each attempt counts against the kind's cost_rate unless its "
        "handler reports what it spent: the cost given at enqueue (1 unless given)",
    )

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
            progress=ProgressOut(
                done=job.progress.done, total=job.progress.total, message=job.progress.message
            ),
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
            waiting_for=None
            if job.waiting_for is None
            else WaitingForOut(
                signal=job.waiting_for.signal,
                jobs=None if job.waiting_for.jobs is None else list(job.waiting_for.jobs),
                until=job.waiting_for.until,
            ),
            cost=job.cost,
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
