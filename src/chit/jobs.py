"""The values the store takes and returns: states, jobs, attempts, outcomes, reports.

Everything here is plain data. Times are timezone-aware UTC datetimes; JSON
payloads, results and checkpoints are already-decoded Python values.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


class State(enum.StrEnum):
    # Enqueued with dependencies not yet met (DESIGN.md "Workflows and steps"):
    # never claimed; `queued` in the transaction that records the last one.
    WAITING = "waiting"
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset({State.SUCCEEDED, State.FAILED, State.CANCELLED})


class RunOn(enum.StrEnum):
    """When a job with dependencies runs: once every dependency `succeeded`
    (the default; a dependency that fails or is cancelled cancels it), or once
    every dependency `finished`, whatever the outcome (a callback)."""

    SUCCEEDED = "succeeded"
    FINISHED = "finished"


class AttemptOutcome(enum.StrEnum):
    """How one claim of a job ended; `None` on an attempt that is still running."""

    SUCCEEDED = "succeeded"
    RETRIED = "retried"
    FAILED = "failed"
    LEASE_EXPIRED = "lease_expired"
    RELEASED = "released"
    CANCELLED = "cancelled"
    SNOOZED = "snoozed"  # chit.Snooze: queued again after a delay, the attempt not counted


@dataclass(frozen=True, slots=True)
class Debounce:
    """While the job of this key (and tenant) has not started, another enqueue
    of the key replaces its payload and moves its start to `delay` seconds from
    then, never past `bound` seconds after the job was stored."""

    key: str
    delay: float
    bound: float


# Not frozen: a frozen dataclass sets each field through object.__setattr__,
# which made building one the largest cost of preparing a job after its JSON.
@dataclass(slots=True)
class NewJob:
    """A job to insert. `run_at=None` means now (by the database clock); not
    changed once built."""

    kind: str
    payload: Any
    queue: str = "default"
    priority: int = 0
    max_attempts: int = 5
    run_at: datetime | None = None
    idempotency_key: str | None = None
    tenant: str = ""
    # Flow control: the key a task's key_concurrency and key_rate bound; "" for none.
    concurrency_key: str = ""
    # Seconds an attempt may run before it is failed "timed out"; None: no deadline.
    timeout: float | None = None
    # Fingerprint of what was asked for, so the same idempotency key with a
    # different request can be told apart from an honest retry.
    request_hash: str | None = None
    # `payload` as JSON, when the caller has it already (Queue.prepare encodes it
    # to validate and size it): a store may write this rather than encode again.
    payload_json: str | None = None
    # Workflows: a name other jobs of the same enqueue_many call use in their
    # `depends_on`; the jobs this one waits for (refs of the same call, or ids of
    # stored jobs of the same tenant); when it runs (RunOn).
    ref: str | None = None
    depends_on: tuple[str, ...] = ()
    run_on: RunOn = RunOn.SUCCEEDED
    # Expiry: a job not started by then ends cancelled, "expired before it
    # started"; an absolute time, or seconds from now by the store's clock.
    expires_at: datetime | None = None
    expires_in: float | None = None
    # At most one job per key (and tenant) waiting, queued or running; free again
    # once that job has finished. None: no key.
    unique_key: str | None = None
    # The W3C traceparent of the enqueue's producer span (chit.tracing), if any.
    traceparent: str | None = None
    # Debounce (one field: each makes every NewJob slower to build).
    debounce: Debounce | None = None
    # What the job is expected to spend against its kind's cost_rate; None: 1.
    cost: int | None = None


@dataclass(frozen=True, slots=True)
class Enqueued:
    id: str
    created: bool
    # Only meaningful when created is False: the stored job's fingerprint.
    request_hash: str | None = None
    # The workflow the job belongs to: every job of an enqueue_many call that
    # has refs or dependencies shares one (see Store.enqueue_many); None otherwise.
    workflow_id: str | None = None
    # created is False because the unique key matched an active job (whatever
    # its request: the key decides), not because of an idempotency key.
    unique: bool = False
    # created is False because the debounce key's job took this payload and start.
    debounced: bool = False
    # When created: the stored job's created_at, the database's clock (a store
    # that cannot say leaves it None).
    created_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class DependencyCounts:
    """A job's direct dependencies by outcome; `pending` are not terminal yet."""

    total: int
    succeeded: int
    failed: int
    cancelled: int
    pending: int


@dataclass(frozen=True, slots=True)
class Progress:
    done: int | None = None
    total: int | None = None
    message: str | None = None  # job.progress(..., message=): what it is doing now


@dataclass(frozen=True, slots=True)
class Job:
    """A job row as a status read sees it. Large results are not loaded:
    `result_external` says the result lives in the results table."""

    id: str
    kind: str
    queue: str
    priority: int
    payload: Any
    state: State
    attempts: int
    max_attempts: int
    run_at: datetime
    created_at: datetime
    updated_at: datetime
    tenant: str = ""
    idempotency_key: str | None = None
    lease_expires_at: datetime | None = None
    worker: str | None = None
    progress: Progress = field(default_factory=Progress)
    checkpoint: Any = None
    result: Any = None
    result_external: bool = False
    error: str | None = None
    cancel_requested: bool = False
    started_at: datetime | None = None
    finished_at: datetime | None = None
    # Computed by the store with its own clock: running and past the lease.
    stale: bool = False
    concurrency_key: str = ""  # "" for none
    timeout: float | None = None  # seconds an attempt may run; None: no deadline
    # Workflows: None, (), None for a job enqueued without refs or dependencies.
    workflow_id: str | None = None
    ref: str | None = None
    run_on: RunOn = RunOn.SUCCEEDED
    depends_on: tuple[str, ...] = ()  # job ids, in the order given at enqueue
    dependencies: DependencyCounts | None = None  # None: the job has none
    expires_at: datetime | None = None  # not started by then: cancelled; None: never
    unique_key: str | None = None
    debounce_key: str | None = None
    # What a `waiting` job suspended itself for (JobContext.wait_for,
    # wait_for_jobs); None for any other state (and for workflow waits).
    waiting_for: WaitingFor | None = None
    # What each attempt counts against the kind's cost_rate unless it reports
    # what it spent (JobContext.report_cost): the cost given at enqueue.
    cost: int = 1


@dataclass(frozen=True, slots=True)
class WaitingFor:
    """What a suspended job waits for: a signal of that name, or every job of
    `jobs` to finish; `until` when the timeout queues it anyway (None: never)."""

    signal: str | None = None
    jobs: tuple[str, ...] | None = None
    until: datetime | None = None


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    """What a worker gets from `claim`: enough to run the job and fence its writes."""

    id: str
    kind: str
    queue: str
    payload: Any
    attempt: int
    max_attempts: int
    lease_token: str
    checkpoint: Any = None
    progress: Progress = field(default_factory=Progress)
    timeout: float | None = None  # seconds this attempt may run; None: no deadline
    # Whether the job has dependencies (JobContext.dependencies reads them then).
    has_dependencies: bool = False
    tenant: str = ""
    # The W3C traceparent stored at enqueue (chit.tracing): the attempt's span's
    # parent on the first attempt, a link on later ones.
    traceparent: str | None = None


class Claimed(list[ClaimedJob]):
    """What a claim took, in claim order, and when a limit or a pause held jobs
    back from it: the time.monotonic() at which they may have room, when the
    claimer should look again even if nothing wakes it (-inf: nothing held back)."""

    look_again_at: float = -math.inf


@dataclass(frozen=True, slots=True)
class DependencyInfo:
    """One direct dependency of a job as its handler sees it. `result` is the
    stored result when small; when `result_external`, read it with
    `Store.get_result` (JobContext.dependencies does, on first use)."""

    id: str
    kind: str
    state: State
    result: Any = None
    result_external: bool = False


@dataclass(frozen=True, slots=True)
class WorkflowJob:
    """One job of a workflow: what `GET /workflows/{id}` lists."""

    id: str
    ref: str | None
    kind: str
    state: State
    depends_on: tuple[str, ...]  # job ids
    run_on: RunOn = RunOn.SUCCEEDED


@dataclass(frozen=True, slots=True)
class WorkflowView:
    """A stored workflow: its jobs in enqueue order, each with its edges."""

    id: str
    tenant: str
    jobs: list[WorkflowJob]


@dataclass(frozen=True, slots=True)
class Workflow:
    """What `Queue.enqueue_workflow` returns: the workflow id, and each job's id
    by its ref (jobs given without a ref are only in `ids`, in input order)."""

    id: str
    jobs: dict[str, str]
    ids: list[str]


@dataclass(frozen=True, slots=True)
class Attempt:
    job_id: str
    attempt: int
    worker: str
    started_at: datetime
    finished_at: datetime | None
    outcome: AttemptOutcome | None
    error: str | None


@dataclass(frozen=True, slots=True)
class Step:
    """A durable step a job stored (`JobContext.step`): its name, the attempt
    that ran it, and its JSON result."""

    job_id: str
    name: str
    attempt: int
    result: Any
    created_at: datetime


@dataclass(frozen=True, slots=True)
class OutputItem:
    """One value a handler emitted (`JobContext.emit`): `seq` numbers a job's
    output in order across its attempts (never reused), `attempt` is the claim
    that emitted it, `at` when the store wrote it."""

    seq: int
    attempt: int
    data: Any
    at: datetime


@dataclass(frozen=True, slots=True)
class Beat:
    """One held job in a heartbeat; progress is written only when given."""

    job_id: str
    lease_token: str
    progress: Progress | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    held: frozenset[str]
    cancel_requested: frozenset[str]


# Outcomes a worker records. Each is fenced by the lease token.


@dataclass(frozen=True, slots=True)
class Succeeded:
    """`progress`, when given, is the handler's last report, written with the result."""

    job_id: str
    lease_token: str
    result: Any = None
    progress: Progress | None = None


@dataclass(frozen=True, slots=True)
class Failed:
    """`retry_in=None` fails the job for good; otherwise it is queued again
    that many seconds from now (by the store's clock), unless it has used all
    its attempts, which fails it whatever the caller asked."""

    job_id: str
    lease_token: str
    error: str
    retry_in: float | None = None


@dataclass(frozen=True, slots=True)
class Released:
    """Handed back unfinished (worker shutdown): queued at once, attempt not counted."""

    job_id: str
    lease_token: str


@dataclass(frozen=True, slots=True)
class Cancelled:
    """The handler stopped because cancellation was requested."""

    job_id: str
    lease_token: str


@dataclass(frozen=True, slots=True)
class Snoozed:
    """The handler raised chit.Snooze: `queued` again `delay` seconds from now
    (by the store's clock), the attempt not counted."""

    job_id: str
    lease_token: str
    delay: float


@dataclass(frozen=True, slots=True)
class Suspended:
    """The handler waits (JobContext.wait_for, wait_for_jobs): `waiting`, no
    lease, the attempt not counted, until the signal `signal` is stored, every
    job of `jobs` is terminal, or `timeout` seconds (None: no limit) pass; then
    `queued` in the transaction that sees it. Queued at once when that already
    holds as the outcome is recorded."""

    job_id: str
    lease_token: str
    signal: str | None = None
    jobs: tuple[str, ...] | None = None
    timeout: float | None = None


Outcome = Succeeded | Failed | Released | Cancelled | Snoozed | Suspended


class SignalStatus(enum.StrEnum):
    CREATED = "created"  # stored now (and the job queued if it waited for it)
    EXISTING = "existing"  # one of that name was stored before: nothing changed
    FINISHED = "finished"  # the job is terminal: nothing stored
    NOT_FOUND = "not_found"  # unknown, or another tenant's


@dataclass(frozen=True, slots=True)
class SignalResult:
    """What `signal` did; `data` is the stored signal's (CREATED, EXISTING)."""

    status: SignalStatus
    data: Any = None


@dataclass(frozen=True, slots=True)
class Received:
    """A job's signal of one name as its handler reads it: `found` and its
    data, or `timed_out` when the job's wait for that name ended by its timeout."""

    found: bool
    data: Any = None
    timed_out: bool = False


@dataclass(frozen=True, slots=True)
class WaitedJob:
    """A job another waits for (JobContext.wait_for_jobs), as the waiter reads it;
    `result` is None when `result_external` (Store.get_result reads it)."""

    id: str
    kind: str
    state: State
    tenant: str
    result: Any = None
    result_external: bool = False
    error: str | None = None


class ChangeResult(enum.StrEnum):
    CHANGED = "changed"  # queued or waiting: the change is stored
    STARTED = "started"  # running or finished: nothing changed
    NOT_FOUND = "not_found"


@dataclass(frozen=True, slots=True)
class JobChange:
    """An edit of a job not yet started (`Queue.update`, `PATCH /jobs/{id}`):
    each field given replaces the stored one. `run_now` makes the job due at
    the database's time (or leaves it as it is when it is due already); the
    payload arrives checked, as the canonical JSON text of the object to store."""

    run_at: datetime | None = None
    run_now: bool = False
    priority: int | None = None
    payload_json: str | None = None


class CancelResult(enum.StrEnum):
    CANCELLED = "cancelled"  # was queued; now cancelled
    REQUESTED = "requested"  # is running; the worker will see it at its next heartbeat
    ALREADY_FINISHED = "already_finished"  # terminal; nothing changed
    NOT_FOUND = "not_found"


@dataclass(frozen=True, slots=True)
class RescueReport:
    requeued: int
    failed: int
    cancelled: int


@dataclass(frozen=True, slots=True)
class JobFilter:
    state: State | None = None
    kind: str | None = None
    queue: str | None = None
    since: datetime | None = None  # created at or after
    tenant: str | None = None  # None: every tenant


@dataclass(frozen=True, slots=True)
class Page:
    jobs: list[Job]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class ReplaySelector:
    """Which failed jobs to replay: explicit ids, or every failed job matching
    all the given filters. Ids may name failed or cancelled jobs."""

    ids: tuple[str, ...] = ()
    kind: str | None = None
    error_prefix: str | None = None
    since: datetime | None = None  # finished at or after
    tenant: str | None = None


@dataclass(frozen=True, slots=True)
class FailureGroup:
    kind: str
    error: str  # first line of the error
    count: int
    first_seen: datetime
    last_seen: datetime
    latest_id: str


@dataclass(frozen=True, slots=True)
class Stats:
    by_state: dict[str, int]
    by_kind: dict[str, dict[str, int]]  # kind -> state -> count
    failed_last_hour: int
    succeeded_last_hour: int
    oldest_queued_age: float | None  # seconds; queue lag
    stale_running: int

    @property
    def failure_rate(self) -> float | None:
        """failed / (failed + succeeded) over the last hour, 0 to 1: chit's one
        failure figure (the API, the CLI, the dashboard and the metrics give
        this one). None when nothing finished."""
        return failure_rate(self.failed_last_hour, self.succeeded_last_hour)


def failure_rate(failed: int, succeeded: int) -> float | None:
    """The share of finished jobs that failed; None when none finished. Never
    infinite, unlike failed / succeeded, so a kind whose every job fails reads 100 %."""
    finished = failed + succeeded
    return None if finished == 0 else failed / finished


# The HTTP API: keys and metrics


@dataclass(frozen=True, slots=True)
class NewApiKey:
    """A key to store. Only `key_hash` (sha256 of the whole key) is kept, never the key."""

    id: str
    key_hash: str
    tenant: str  # "*" means every tenant
    scopes: tuple[str, ...]
    name: str = ""


@dataclass(frozen=True, slots=True)
class ApiKey:
    id: str
    name: str
    tenant: str
    scopes: tuple[str, ...]
    created_at: datetime
    revoked_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class AttemptStats:
    """Every attempt of one kind that ended one way; `outcome=None` counts the
    attempts still running. `buckets[i]` counts finished attempts that took at
    most `bounds[i]` seconds and more than `bounds[i - 1]`; the last entry counts
    those longer than every bound (not cumulative)."""

    kind: str
    outcome: AttemptOutcome | None
    count: int
    duration_sum: float
    buckets: tuple[int, ...]


# The dashboard


@dataclass(frozen=True, slots=True)
class StateKindCount:
    """How many jobs of one kind are in one state, counted up to a cap:
    `capped` means there are at least `count` (the cap), perhaps many more."""

    state: State
    kind: str
    count: int
    capped: bool


@dataclass(frozen=True, slots=True)
class MinuteCount:
    """Jobs of one kind that ended in one state (succeeded or failed) during the
    minute starting at `minute`."""

    minute: datetime
    kind: str
    state: State
    count: int


@dataclass(frozen=True, slots=True)
class KindLastHour:
    """One kind's outcomes over the last hour: what alerting on a rate needs."""

    kind: str
    succeeded: int
    failed: int

    @property
    def failure_rate(self) -> float | None:
        """failed / (failed + succeeded), as `Stats.failure_rate`."""
        return failure_rate(self.failed, self.succeeded)


def last_hour_by_kind(minutes: list[MinuteCount]) -> list[KindLastHour]:
    """`finished_per_minute` summed over the hour, per kind, by kind name."""
    totals: dict[str, list[int]] = {}
    for m in minutes:
        counts = totals.setdefault(m.kind, [0, 0])
        counts[0 if m.state is State.SUCCEEDED else 1] += m.count
    return [KindLastHour(kind, s, f) for kind, (s, f) in sorted(totals.items())]
