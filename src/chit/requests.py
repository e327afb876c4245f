"""`JobRequest`: the one list of a job's options, and its checks.

Every way in derives from it or is held to it (tests/unit/test_entry_points.py):
`Queue.enqueue` and `aenqueue` (their parameters are its fields by name),
`Queue.enqueue_many` and `enqueue_workflow` (which take it), `Client.submit`,
`AsyncClient.submit`, `POST /jobs` and `chit submit`. `prepared` turns one into
the job to store, its task's defaults filled in.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from datetime import datetime
from operator import attrgetter
from typing import Any, Protocol, overload

import pydantic

from chit import tracing
from chit.bounds import COST_MAX, MAX_ATTEMPTS, whole_cost
from chit.checks import (
    check_concurrency_key,
    check_debounce,
    check_expiry,
    check_idempotency_key,
    check_timeout,
    check_unique_key,
    checked_priority,
    checked_run_at,
    is_whole,
    stored_payload,
)
from chit.encoding import canonical
from chit.errors import InvalidRequest, UnknownKind
from chit.jobs import NewJob, RunOn
from chit.limits import Limits
from chit.settings import Settings


@dataclass(frozen=True, slots=True)  # slots: a third quicker to make, one a job
class JobRequest:
    """A job's options: one job for `Queue.enqueue_many` and `enqueue_workflow`;
    `enqueue` and `aenqueue` take the same fields as arguments."""

    kind: str
    payload: Any = None
    idempotency_key: str | None = None
    run_at: datetime | None = None
    priority: int | None = None
    queue: str | None = None
    max_attempts: int | None = None
    tenant: str = ""
    concurrency_key: str | None = None
    timeout: float | None = None  # seconds; None: the task's
    # Workflows: a name for this job that later requests of the same call give
    # in `depends_on`; the jobs it waits for (refs of this call, or ids of
    # stored jobs); "succeeded" (the default) or "finished" (run whatever the
    # dependencies' outcome: a callback).
    ref: str | None = None
    depends_on: Sequence[str] = ()
    run_on: str = "succeeded"
    # Expiry (DESIGN.md "Time"): not started by this time, or within this many
    # seconds of being stored, the job ends cancelled; at most one of the two.
    expires_at: datetime | None = None
    expires_in: float | None = None
    # At most one job per key waiting, queued or running; another enqueue while
    # it is returns that job (created=False), whatever its payload.
    unique_key: str | None = None
    # The W3C traceparent of the span the job is enqueued under, when it is not
    # the current one (POST /jobs's header); one that is not valid is ignored.
    traceparent: str | None = None
    # Debounce (DESIGN.md "Changing work already queued"): the job starts
    # `debounce` seconds from now; while it has not started, another enqueue
    # with the key (and tenant) replaces its payload and moves its start to
    # `debounce` seconds from then, never past `debounce_max` (default 10 x
    # `debounce`) seconds after the first. Answered created=False, debounced=True.
    debounce_key: str | None = None
    debounce: float | None = None
    debounce_max: float | None = None
    # Budgets (DESIGN.md "Long AI tasks"): what the job is expected to spend
    # (tokens, cents: a whole number, 1 to COST_MAX), counted against the kind's
    # cost_rate and key_cost_rate; `job.report_cost` replaces it with what was spent.
    cost: int = 1


class TaskDefaults(Protocol):
    """What a request is resolved against: a `chit.queue.Task`."""

    @property
    def kind(self) -> str: ...
    @property
    def payload_model(self) -> type[pydantic.BaseModel] | None: ...
    @property
    def max_attempts(self) -> int | None: ...
    @property
    def queue(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def timeout(self) -> float | None: ...
    @property
    def limits(self) -> Limits: ...


# The options most requests leave at their defaults, read in one call and
# compared in one: `prepared` then skips the checks and fields each needs (a
# plain job should not pay for every feature). Their types are compared
# first, so that no value's own == (an array's, a mock's) decides; `cost`
# on its own, since True == 1.
_RARE = attrgetter(
    *(
        f.name
        for f in fields(JobRequest)
        if f.name not in ("kind", "payload", "priority", "queue", "max_attempts", "tenant", "cost")
    )
)
_RARE_DEFAULTS = _RARE(JobRequest(""))
_RARE_TYPES = tuple(map(type, _RARE_DEFAULTS))


def _plain(request: JobRequest) -> bool:
    """Whether every rare option of `request` is at its default."""
    rare = _RARE(request)
    return (
        tuple(map(type, rare)) == _RARE_TYPES
        and rare == _RARE_DEFAULTS
        and type(request.cost) is int
        and request.cost == 1
    )


def prepared(request: JobRequest, tasks: Mapping[str, TaskDefaults], settings: Settings) -> NewJob:
    """Validate a request against its kind's task and settings; the NewJob to store."""
    task = tasks.get(request.kind)
    if task is None:
        raise UnknownKind(request.kind, list(tasks))
    _, payload, encoded = stored_payload(task, request.payload, settings.max_payload_bytes)
    if request.idempotency_key is not None:
        check_idempotency_key(request.idempotency_key)
    if request.unique_key is not None:
        check_unique_key(request.unique_key)
    max_attempts = request.max_attempts
    if max_attempts is None:  # not `or`: an explicit 0 is refused below, not replaced
        max_attempts = task.max_attempts or settings.max_attempts
    if not is_whole(max_attempts) or not 1 <= max_attempts <= MAX_ATTEMPTS:
        raise InvalidRequest(f"max_attempts must be 1 to {MAX_ATTEMPTS}, not {max_attempts}")
    priority = checked_priority(task.priority if request.priority is None else request.priority)
    queue = request.queue or task.queue
    if "\x00" in queue:  # PostgreSQL's text cannot hold it; refuse on both backends
        raise InvalidRequest("a queue name cannot hold a NUL character (\\u0000)")
    if _plain(request):
        return NewJob(
            request.kind,
            payload,
            queue,
            priority,
            max_attempts,
            tenant=request.tenant,
            timeout=task.timeout,
            payload_json=encoded,
        )
    run_at = None if request.run_at is None else checked_run_at(request.run_at)
    concurrency_key = request.concurrency_key
    if concurrency_key is not None:
        check_concurrency_key(concurrency_key)
    timeout = task.timeout if request.timeout is None else check_timeout(request.timeout)
    debounce = None
    if (request.debounce_key, request.debounce, request.debounce_max) != (None, None, None):
        debounce = check_debounce(request)
    expires_at, expires_in = check_expiry(request.expires_at, request.expires_in, run_at)
    # The default, 1, stored as NULL; `True == 1`, so its type is checked too.
    default_cost = type(request.cost) is int and request.cost == 1
    cost = None if default_cost else check_cost(request.cost, task, concurrency_key)
    job = NewJob(
        kind=request.kind,
        payload=payload,
        queue=queue,
        priority=priority,
        max_attempts=max_attempts,
        run_at=run_at,
        idempotency_key=request.idempotency_key,
        tenant=request.tenant,
        concurrency_key=concurrency_key or "",
        timeout=timeout,
        payload_json=encoded,
        ref=request.ref,
        depends_on=tuple(request.depends_on),
        run_on=run_on(request.run_on),
        expires_at=expires_at,
        expires_in=expires_in,
        unique_key=request.unique_key,
        debounce=debounce,
        traceparent=tracing.valid_traceparent(request.traceparent),
        cost=cost,
    )
    if job.idempotency_key is None:
        return job
    return replace(job, request_hash=request_hash(request, job))


def check_cost(cost: Any, task: TaskDefaults, concurrency_key: str | None) -> int:
    """A job's cost: a whole number from 1 to COST_MAX, and no more than the
    kind's own cost_rate (or key_cost_rate, for a job with a key) allows in a
    whole window, which it could never start within."""
    checked = whole_cost(cost, 1)
    if checked is None:
        raise InvalidRequest(f"cost must be a whole number from 1 to {COST_MAX:,}, not {cost!r}")
    limits = task.limits
    if not concurrency_key:  # a key's own budget binds keyed jobs only
        limits = replace(limits, key_cost_rate=None)
    most = limits.most_cost()
    if most is not None and checked > most:
        raise InvalidRequest(
            f"cost {checked:,} is more than kind {task.kind!r} may spend in a whole window"
            f" ({most:,}): the job could never start"
        )
    return checked


def one_request(arguments: dict[str, Any]) -> JobRequest:
    """The JobRequest of an `enqueue` or `aenqueue` call, from its `locals()`:
    their parameters (but `self` and `connection`) are JobRequest's fields by
    name, so the two signatures the docs and IDEs show are the only lists of them."""
    fields = dict(arguments)  # a copy (a C loop), then the two that are not fields
    del fields["self"], fields["connection"]
    return JobRequest(**fields)


def run_on(value: str) -> RunOn:
    if value == "succeeded":  # the default, without the enum's lookup (a job's 0.25 µs)
        return RunOn.SUCCEEDED
    try:
        return RunOn(value)
    except ValueError:
        raise InvalidRequest(f"run_on must be 'succeeded' or 'finished', not {value!r}") from None


class PreparedOnRead(Sequence[NewJob]):
    """Requests validated as the store reads them, once each: PostgreSQL inserts
    the first jobs of a large batch while later ones are checked (10,000 jobs:
    validating took 40 % of the time). An invalid one raises inside the store's
    transaction, which then stores nothing."""

    def __init__(
        self, requests: list[JobRequest], tasks: Mapping[str, TaskDefaults], settings: Settings
    ):
        self._requests = requests
        self._tasks = tasks
        self._settings = settings
        self._jobs: list[NewJob] = []

    def __len__(self) -> int:
        return len(self._requests)

    def __iter__(self) -> Iterator[NewJob]:
        # Sequence's own goes through __getitem__'s checks each job: 4 % of a
        # 10,000-job PostgreSQL enqueue_many's client time.
        for n in range(len(self._requests)):
            yield self._job(n)

    @overload
    def __getitem__(self, index: int) -> NewJob: ...
    @overload
    def __getitem__(self, index: slice) -> list[NewJob]: ...
    def __getitem__(self, index: int | slice) -> NewJob | list[NewJob]:
        if isinstance(index, slice):
            return [self[n] for n in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self._job(index)

    def _job(self, n: int) -> NewJob:
        """Job n, the requests up to it prepared (once: reads by index and by
        iteration may interleave)."""
        jobs = self._jobs
        while len(jobs) <= n:
            jobs.append(prepared(self._requests[len(jobs)], self._tasks, self._settings))
        return jobs[n]


def request_hash(request: JobRequest, job: NewJob) -> str:
    """Fingerprint of what was asked for, so the same idempotency key with a
    different request can be told apart from an honest retry. `job` is
    `request` resolved (the task's queue, priority and attempts filled in, the
    payload as stored, the expiry checked); the timeout hashed is the
    request's own, None when it gave none, not the task's."""
    fingerprint: Mapping[str, Any] = {
        "kind": job.kind,
        # The stored payload, not the canonical text of what was submitted: a
        # payload with number keys sorts them as numbers there, as text here.
        "payload": job.payload,
        "queue": job.queue,
        "priority": job.priority,
        "max_attempts": job.max_attempts,
        "run_at": None if job.run_at is None else job.run_at.isoformat(),
    }
    if request.concurrency_key is not None:  # absent: the same fingerprint as before keys existed
        fingerprint = {**fingerprint, "concurrency_key": request.concurrency_key}
    # The same: a job asked for without one keeps its fingerprint.
    if request.timeout is not None:
        fingerprint = {**fingerprint, "timeout": float(request.timeout)}
    # The same again for a job without dependencies. Refs are hashed as given:
    # they name jobs of the call, so the same call repeated hashes the same.
    if job.depends_on:  # a set: the order given changes nothing
        fingerprint = {**fingerprint, "depends_on": sorted(set(job.depends_on))}
    if job.run_on is not RunOn.SUCCEEDED:
        fingerprint = {**fingerprint, "run_on": job.run_on.value}
    if job.expires_at is not None:
        fingerprint = {**fingerprint, "expires_at": job.expires_at.isoformat()}
    if job.expires_in is not None:
        fingerprint = {**fingerprint, "expires_in": job.expires_in}
    if job.unique_key is not None:
        fingerprint = {**fingerprint, "unique_key": job.unique_key}
    if job.cost is not None:
        fingerprint = {**fingerprint, "cost": job.cost}
    return hashlib.sha256(canonical(fingerprint).encode()).hexdigest()
