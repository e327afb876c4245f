"""`Queue`: the task registry and the way code submits jobs.

queue = chit.Queue()                      # settings from CHIT_* variables

@queue.task("sales_report", payload=ReportRequest, max_attempts=3)
def sales_report(job: chit.JobContext, body: ReportRequest) -> dict: ...

job = queue.enqueue("sales_report", {"region": "emea"}, idempotency_key="emea-q3")
queue.wait(job.id, timeout=60).result     # also queue.get(job.id), queue.cancel(job.id)
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pydantic

from chit import retrying, tracing
from chit.bounds import (
    MAX_ATTEMPTS,
    NAME_MAX,
    PRIORITY_LIMIT,
)
from chit.checks import (
    check_timeout,
    checked_priority,
    checked_run_at,
    stored_payload,
)
from chit.errors import (
    ConfigError,
    IdempotencyConflict,
    InvalidRequest,
    InvalidTransition,
    JobNotFound,
    UnknownKind,
    WorkflowNotFound,
)
from chit.jobs import (
    CancelResult,
    ChangeResult,
    Enqueued,
    Job,
    JobChange,
    NewJob,
    ReplaySelector,
    State,
    Workflow,
    WorkflowView,
)
from chit.limits import LimitError, Limits, Rate
from chit.reading_output import OutputReads
from chit.requests import JobRequest, PreparedOnRead, one_request, prepared
from chit.schedules import (
    EPOCH,
    Schedule,
    StoredSchedule,
    check_catch_up,
    check_name,
    check_rule,
    slot_key,
)
from chit.settings import Settings
from chit.store import FullStore, open_store
from chit.store.capabilities import CallerTransactions
from chit.waits import Signal, send_signal

Handler = Callable[..., Any]


@dataclass(frozen=True)
class Task:
    kind: str
    handler: Handler
    payload_model: type[pydantic.BaseModel] | None
    max_attempts: int | None
    queue: str
    priority: int
    limits: Limits = field(default_factory=Limits)
    timeout: float | None = None  # seconds; the default of the kind's jobs

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.handler)


class Queue(OutputReads):
    def __init__(
        self,
        database_url: str | None = None,
        *,
        settings: Settings | None = None,
    ) -> None:
        base = settings if settings is not None else Settings.from_env()
        self.settings = base.replace(database_url=database_url)
        self.tasks: dict[str, Task] = {}
        # Declared in code (`schedule`), by name: written by `declare_schedules`.
        self.schedules: dict[str, Schedule] = {}
        self._store: FullStore | None = None
        self._store_lock = threading.Lock()

    def configure(self, **changes: Any) -> None:
        """Change settings (None leaves one as it is) before the store opens on
        them: the CLI applies its flags to an app's queue this way."""
        settings = self.settings.replace(**changes)
        if self._store is not None and settings.database_url != self.settings.database_url:
            raise ConfigError(
                "the queue's store is already open: set the database URL before its first use"
            )
        self.settings = settings

    # Registering

    def task(
        self,
        kind: str,
        *,
        payload: type[pydantic.BaseModel] | None = None,
        max_attempts: int | None = None,
        queue: str = "default",
        priority: int = 0,
        concurrency: int | None = None,
        rate: str | Rate | None = None,
        key_concurrency: int | None = None,
        key_rate: str | Rate | None = None,
        cost_rate: str | Rate | None = None,
        key_cost_rate: str | Rate | None = None,
        timeout: float | None = None,
    ) -> Callable[[Handler], Handler]:
        """Register a handler. `concurrency` and `rate` ("N/s", "N/m", "N/h") limit
        the kind across every worker; `key_concurrency` and `key_rate` each
        concurrency key of it. They are the defaults: an operator's
        `chit limits set` wins until cleared. `cost_rate` ("90000/m") and
        `key_cost_rate` bound the sum of the jobs' `cost` started per period.
        `timeout` (seconds) is the default
        deadline of each attempt: past it the attempt fails "timed out after N s"."""
        if not kind or len(kind) > NAME_MAX:
            raise ConfigError(f"task kind {kind!r}: must be 1 to {NAME_MAX} characters")
        if max_attempts is not None and not 1 <= max_attempts <= MAX_ATTEMPTS:
            raise ConfigError(f"task {kind!r}: max_attempts must be 1 to {MAX_ATTEMPTS}")
        if not -PRIORITY_LIMIT <= priority <= PRIORITY_LIMIT:
            raise ConfigError(
                f"task {kind!r}: priority must be from {-PRIORITY_LIMIT:,} to {PRIORITY_LIMIT:,}"
            )

        try:
            limits = Limits.checked(
                concurrency, rate, key_concurrency, key_rate, cost_rate, key_cost_rate
            )
        except LimitError as e:
            raise ConfigError(f"task {kind!r}: {e}") from None
        if timeout is not None:
            try:
                timeout = check_timeout(timeout)
            except InvalidRequest as e:
                raise ConfigError(f"task {kind!r}: {e}") from None

        def register(handler: Handler) -> Handler:
            if kind in self.tasks:
                raise ConfigError(f"task kind {kind!r} is registered twice")
            task = Task(kind, handler, payload, max_attempts, queue, priority, limits, timeout)
            self.tasks[kind] = task
            return handler

        return register

    # The store

    @property
    def store(self) -> FullStore:
        """Opened on first use, so importing an app module never touches the database."""
        if self._store is None:
            with self._store_lock:
                if self._store is None:
                    self._store = open_store(self.settings)
        return self._store

    def use_store(self, store: FullStore) -> None:
        self._store = store

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    # Submitting

    def enqueue(
        self,
        kind: str,
        payload: Any = None,
        *,
        idempotency_key: str | None = None,
        run_at: datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
        max_attempts: int | None = None,
        tenant: str = "",
        concurrency_key: str | None = None,
        timeout: float | None = None,
        ref: str | None = None,
        depends_on: Sequence[str] = (),
        run_on: str = "succeeded",
        expires_at: datetime | None = None,
        expires_in: float | None = None,
        unique_key: str | None = None,
        debounce_key: str | None = None,
        debounce: float | None = None,
        debounce_max: float | None = None,
        cost: int = 1,
        connection: Any = None,
    ) -> Enqueued:
        """Store a job and return `.id` and `.created` (False when the idempotency
        key matched an existing job with the same request). `timeout` (seconds)
        overrides the task's deadline for this job's attempts.

        `depends_on` (job ids): the job waits (`waiting`) until each has
        succeeded, and is cancelled if one fails or is cancelled; with
        `run_on="finished"` it runs once each has ended, whatever the outcome.
        `ref` names the job in the workflow it joins.

        `expires_at` (a datetime) or `expires_in` (seconds from now, by the
        database's clock): a job not started by then ends `cancelled`, error
        `expired before it started`.

        `unique_key`: while a job with that key (and tenant) is waiting, queued
        or running, enqueue stores nothing and returns that job with
        `created=False` (`.unique` True), whatever the payload; once it has
        finished the key is free. Idempotency keys, by contrast, hold for ever.

        `debounce_key` with `debounce` (seconds): the job starts that long from
        now; until it starts, another enqueue with the key replaces its payload
        and moves its start to `debounce` seconds from then, never later than
        `debounce_max` seconds (default 10 x `debounce`) after the first, and
        returns it with `created=False` (`.debounced` True).

        With `connection` (your psycopg connection, or your sqlite3 connection to
        the same file) the job is inserted in the transaction open on it: it exists
        if and only if your transaction commits.

        Raises UnknownKind, InvalidPayload, PayloadTooLarge, IdempotencyConflict."""
        request = one_request(locals())  # first: locals() is the arguments alone
        return self.enqueue_many([request], connection=connection)[0]

    def enqueue_many(
        self, requests: Iterable[JobRequest], *, connection: Any = None
    ) -> list[Enqueued]:
        """Validate every job and store them all in one transaction (yours, when
        `connection` is given): an invalid job raises and none is stored."""
        with tracing.enqueuing(list(requests)) as traced:
            jobs = self._jobs(traced, connection)
            if connection is None:
                return _checked(jobs, self.store.enqueue_many(jobs))
            joined = CallerTransactions.of(self.store)
            return _checked(jobs, joined.enqueue_many(jobs, connection))

    async def aenqueue(
        self,
        kind: str,
        payload: Any = None,
        *,
        idempotency_key: str | None = None,
        run_at: datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
        max_attempts: int | None = None,
        tenant: str = "",
        concurrency_key: str | None = None,
        timeout: float | None = None,
        ref: str | None = None,
        depends_on: Sequence[str] = (),
        run_on: str = "succeeded",
        expires_at: datetime | None = None,
        expires_in: float | None = None,
        unique_key: str | None = None,
        debounce_key: str | None = None,
        debounce: float | None = None,
        debounce_max: float | None = None,
        cost: int = 1,
        connection: Any = None,
    ) -> Enqueued:
        """`enqueue` for asyncio code: the same arguments, results and errors,
        and the event loop never waits on the database. `connection`: your
        `psycopg.AsyncConnection` (the job exists if and only if your transaction
        commits), or on SQLite a sqlite3 connection made with
        check_same_thread=False."""
        request = one_request(locals())  # first: locals() is the arguments alone
        return (await self.aenqueue_many([request], connection=connection))[0]

    async def aenqueue_many(
        self, requests: Iterable[JobRequest], *, connection: Any = None
    ) -> list[Enqueued]:
        """`enqueue_many` for asyncio code (see `aenqueue`): all the jobs stored
        in one transaction, or none."""
        with tracing.enqueuing(list(requests)) as traced:
            jobs = self._jobs(traced, connection)
            store = self._store
            if store is None:  # opening connects and migrates: not on the event loop
                store = await asyncio.to_thread(lambda: self.store)
            if connection is None:
                return _checked(jobs, await store.aenqueue_many(jobs))
            joined = CallerTransactions.of(store)
            return _checked(jobs, await joined.aenqueue_many(jobs, connection))

    async def aclose(self) -> None:
        """Close the store, and what `aenqueue` opened on this event loop."""
        store = self._store
        if store is not None:
            await store.aclose()
            await asyncio.to_thread(self.close)

    def _jobs(self, requests: Iterable[JobRequest], connection: Any) -> Sequence[NewJob]:
        requests = list(requests)
        if connection is None and len(requests) > 1:
            return PreparedOnRead(requests, self.tasks, self.settings)
        # One job is read at once either way; in your transaction, an invalid
        # one raises before anything is sent, so the transaction stays usable.
        return [self.prepare(r) for r in requests]

    def enqueue_workflow(
        self, requests: Iterable[JobRequest], *, connection: Any = None
    ) -> Workflow:
        """`enqueue_many` for a graph: the jobs, linked by `ref` and `depends_on`,
        stored in one transaction under one workflow id. A cycle, an unknown ref
        or id, a duplicate ref or a self-dependency raises InvalidRequest and
        nothing is stored."""
        requests = list(requests)
        if not any(r.ref is not None or r.depends_on for r in requests):
            # Without refs or dependencies the jobs would be stored under no workflow.
            raise InvalidRequest("a workflow needs at least one job with a ref or dependencies")
        results = self.enqueue_many(requests, connection=connection)
        return Workflow(
            id=self.workflow_of(results),
            jobs={r.ref: e.id for r, e in zip(requests, results, strict=True) if r.ref},
            ids=[e.id for e in results],
        )

    def workflow_of(self, results: Sequence[Enqueued]) -> str:
        """The workflow the jobs of one `enqueue_many` call joined; when none was
        stored (each answered by a job stored before, under its idempotency,
        unique or debounce key), that job's, or InvalidRequest if it has none."""
        workflow_id = next((r.workflow_id for r in results if r.workflow_id), None)
        if workflow_id is None:
            stored = self.store.get(results[0].id)
            workflow_id = stored.workflow_id if stored is not None else None
        if workflow_id is None:
            raise InvalidRequest(
                "no job of this workflow was stored: each was answered by a job stored"
                " before (its idempotency, unique or debounce key), which has no workflow"
            )
        return workflow_id

    def workflow(self, workflow_id: str, *, tenant: str | None = None) -> WorkflowView:
        """The workflow's jobs, states and edges. Raises WorkflowNotFound."""
        view = self.store.workflow(workflow_id, tenant)
        if view is None:
            raise WorkflowNotFound(workflow_id)
        return view

    def cancel_workflow(self, workflow_id: str, *, tenant: str | None = None) -> int:
        """Cancel every unfinished job of the workflow (running ones are asked to
        stop); how many. Raises WorkflowNotFound."""
        count = self.store.cancel_workflow(workflow_id, tenant)
        if count is None:
            raise WorkflowNotFound(workflow_id)
        return count

    # Following a job it enqueued: what `chit.Client` does over HTTP, for code
    # that talks to the database itself.

    def get(self, job_id: str, *, tenant: str | None = None) -> Job:
        """The job as it is now, its result loaded however large. Raises
        JobNotFound (also for another tenant's job when `tenant` is given)."""
        job = self.store.get(job_id, tenant)
        if job is None:
            raise JobNotFound(job_id)
        if job.result_external:
            _, result = self.store.get_result(job.id, tenant)
            job = dataclasses.replace(job, result=result)
        return job

    def cancel(self, job_id: str, *, tenant: str | None = None) -> CancelResult:
        """A queued job is cancelled at once (CANCELLED); a running one is asked
        to stop (REQUESTED: its handler sees `job.cancelled` at the next
        heartbeat); a finished one is left as it is (ALREADY_FINISHED). Raises
        JobNotFound."""
        result = self.store.cancel(job_id, tenant)
        if result is CancelResult.NOT_FOUND:
            raise JobNotFound(job_id)
        return result

    def signal(
        self, job_id: str, name: str, data: Any = None, *, tenant: str | None = None
    ) -> Signal:
        """Send the job the signal `name` with `data` (a JSON object; None: {}),
        which its handler's `job.wait_for(name)` returns, now or when it waits.
        The first of a name is stored (`created`); a later one answers the
        stored one and changes nothing. JobNotFound, JobFinished, InvalidWait."""
        return send_signal(self.store, job_id, name, data, tenant)

    def retry(self, job_id: str, *, tenant: str | None = None) -> Job:
        """A failed or cancelled job queued again, attempts reset (`waiting`
        while its dependencies are not met); returns it. Raises JobNotFound,
        and InvalidTransition when it is in another state or a dependency it
        needs ended failed or cancelled (chit.retrying: retry that one first)."""
        job = self.store.get(job_id, tenant)
        if job is None:
            raise JobNotFound(job_id)
        self._check_retry(job)
        if not self.store.retry(job.id, tenant):
            job = self.store.get(job_id, tenant) or job
            raise InvalidTransition(
                f"job {job.id} is {job.state.value}: only failed or cancelled jobs can be retried"
            )
        return self.get(job.id, tenant=tenant)

    def replay(self, selector: ReplaySelector) -> int:
        """`retry` for every job the selector matches; how many. Jobs named by
        id are checked as `retry` checks them, and none is replayed when one is
        refused (InvalidTransition); filters match only failed jobs, which ran."""
        for job_id in selector.ids:
            job = self.store.get(job_id, selector.tenant)
            if job is not None and job.state in (State.FAILED, State.CANCELLED):
                self._check_retry(job)
        return self.store.replay(selector)

    def _check_retry(self, job: Job) -> None:
        if job.state not in (State.FAILED, State.CANCELLED):
            raise InvalidTransition(
                f"job {job.id} is {job.state.value}: only failed or cancelled jobs can be retried"
            )
        if job.depends_on:
            reason = retrying.refusal(job, self.store.dependencies(job.id))
            if reason is not None:
                raise InvalidTransition(reason)

    def update(
        self,
        job_id: str,
        *,
        run_at: datetime | None = None,
        priority: int | None = None,
        payload: Any = None,
        tenant: str | None = None,
    ) -> Job:
        """Change a job that has not started (`queued` or `waiting`): each of
        `run_at`, `priority` and `payload` given replaces what is stored (None
        leaves it); the payload is checked against the task as at enqueue.
        Returns the job as changed. Raises JobNotFound, InvalidTransition once
        it started, InvalidRequest, InvalidPayload, PayloadTooLarge, and
        UnknownKind for a new payload of a kind this queue has no task for."""
        if run_at is None and priority is None and payload is None:
            raise InvalidRequest("say what to change: run_at, priority or payload")
        job = self._unstarted(job_id, tenant)
        change = JobChange(priority=None if priority is None else checked_priority(priority))
        if run_at is not None:
            due = checked_run_at(run_at)
            if job.expires_at is not None and job.expires_at <= due:
                raise InvalidRequest(
                    f"run_at {due.isoformat()} is not before the job's expires_at "
                    f"{job.expires_at.isoformat()}: it would expire before it is due"
                )
            change = dataclasses.replace(change, run_at=due)
        if payload is not None:
            task = self.tasks.get(job.kind)
            if task is None:
                raise UnknownKind(job.kind, list(self.tasks))
            _, _, encoded = stored_payload(task, payload, self.settings.max_payload_bytes)
            change = dataclasses.replace(change, payload_json=encoded)
        return self._changed(job_id, change, tenant)

    def run_now(self, job_id: str, *, tenant: str | None = None) -> Job:
        """Make a delayed job (a later `run_at`, a retry's backoff) due at once;
        one already due keeps its place. A `waiting` job runs as soon as its
        dependencies let it. Raises JobNotFound, InvalidTransition once it started."""
        self._unstarted(job_id, tenant)
        return self._changed(job_id, JobChange(run_now=True), tenant)

    def _unstarted(self, job_id: str, tenant: str | None) -> Job:
        job = self.store.get(job_id, tenant)
        if job is None:
            raise JobNotFound(job_id)
        if job.state not in (State.QUEUED, State.WAITING):
            raise _started(job)
        return job

    def _changed(self, job_id: str, change: JobChange, tenant: str | None) -> Job:
        result = self.store.update(job_id, change, tenant)
        job = self.store.get(job_id, tenant)
        if result is ChangeResult.NOT_FOUND or job is None:  # pruned in between
            raise JobNotFound(job_id)
        if result is ChangeResult.STARTED:  # a worker claimed it in between
            raise _started(job)
        return job

    def wait(self, job_id: str, timeout: float | None = None, *, tenant: str | None = None) -> Job:
        """Poll until the job is finished (succeeded, failed or cancelled) and
        return it as `get` does. Raises TimeoutError after `timeout` seconds
        (None: no limit) and JobNotFound."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.05
        while True:
            job = self.get(job_id, tenant=tenant)
            if job.state.terminal:
                return job
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"job {job_id} is still {job.state.value} after {timeout:g} s"
                    )
                delay = min(delay, left)
            time.sleep(delay)
            delay = min(delay * 1.5, 1.0)  # quick for short jobs, gentle for long ones

    # Schedules (chit/schedules.py; DESIGN.md, "Time")

    def schedule(
        self,
        name: str,
        kind: str,
        payload: Any = None,
        *,
        cron: str | None = None,
        every: str | float | None = None,
        tz: str = "UTC",
        catch_up: str = "latest",
    ) -> Schedule:
        """Declare a schedule: each slot of `cron` (5 fields, in `tz`) or of
        `every` ("30s", "15m", or seconds; at least 1 s) becomes one job of
        `kind` with `payload`, however many workers run. After downtime
        `catch_up="latest"` enqueues the most recent missed slot, `"all"` each
        one, `"none"` none.

        Checked now (InvalidRequest: a rule that does not parse, an unknown time
        zone, a bad name or catch_up, a payload the task refuses; UnknownKind: a
        kind this queue has no task for, once it has tasks). Like a task, it
        touches no database: each worker of this app writes its schedules to
        `chit_schedules` as it starts (`declare_schedules`), refusing to start
        when a schedule's kind has no task. A pause set by an operator stays."""
        schedule = self.check_schedule(
            name, kind, payload, cron=cron, every=every, tz=tz, catch_up=catch_up
        )
        if name in self.schedules:
            raise ConfigError(f"schedule {name!r} is declared twice")
        self.schedules[name] = schedule
        return schedule

    def declare_schedules(self, store: FullStore | None = None) -> list[StoredSchedule]:
        """Write the schedules declared in code to the database (a worker does
        it before its first claim; a deploy script may too). Schedules removed
        from the code are left alone: `chit schedules remove NAME` ends one.
        Raises ConfigError when a schedule's kind has no task here."""
        checked = []
        for s in self.schedules.values():
            if s.kind not in self.tasks:
                raise ConfigError(
                    f"schedule {s.name!r} runs kind {s.kind!r}, which has no task in this app"
                )
            try:  # declared before its task: its payload is checked now
                checked.append(dataclasses.replace(s, payload=self._schedule_payload(s, True)))
            except InvalidRequest as e:
                raise ConfigError(f"schedule {s.name!r}: {e}") from None
        target = store if store is not None else self.store
        return [target.declare_schedule(s, source="code") for s in checked]

    def check_schedule(
        self,
        name: Any,
        kind: Any,
        payload: Any = None,
        *,
        cron: Any = None,
        every: Any = None,
        tz: Any = "UTC",
        catch_up: Any = "latest",
    ) -> Schedule:
        """A Schedule from what code, the CLI or the API gives, checked; nothing
        stored. The kind must be one of this queue's tasks, unless it has none
        (a plain Queue of the CLI or an API without the app): then the payload
        must be a JSON object within the size limit, checked again when a
        worker enqueues a slot."""
        schedule = Schedule(
            name=check_name(name),
            kind=kind,
            payload={},
            rule=check_rule(cron, every, tz),
            catch_up=check_catch_up(catch_up),
        )
        if not isinstance(kind, str) or not 1 <= len(kind) <= NAME_MAX:
            raise InvalidRequest(f"kind must be 1 to {NAME_MAX} characters")
        if kind not in self.tasks and self.tasks:
            raise UnknownKind(kind, list(self.tasks))
        return dataclasses.replace(
            schedule, payload=self._schedule_payload(dataclasses.replace(schedule, payload=payload))
        )

    def _schedule_payload(self, schedule: Schedule, known: bool = False) -> dict[str, Any]:
        """The payload a slot's job stores, checked as enqueue checks it."""
        if known or schedule.kind in self.tasks:
            key = slot_key(schedule.name, EPOCH)
            job = self.prepare(JobRequest(schedule.kind, schedule.payload, idempotency_key=key))
            return job.payload
        bare = Task(schedule.kind, _no_handler, None, None, "default", 0)
        _, stored, _ = stored_payload(bare, schedule.payload, self.settings.max_payload_bytes)
        return stored

    def prepare(self, request: JobRequest) -> NewJob:
        """Validate a request against its task and settings; the NewJob to store."""
        return prepared(request, self.tasks, self.settings)


def _checked(jobs: Sequence[NewJob], results: list[Enqueued]) -> list[Enqueued]:
    """The store's results, or IdempotencyConflict for a key that matched a
    stored job asked for differently."""
    for job, result in zip(jobs, results, strict=True):
        if result.created or result.unique or result.debounced:
            continue
        if result.request_hash != job.request_hash:
            assert job.idempotency_key is not None
            raise IdempotencyConflict(job.idempotency_key, result.id)
    return results


def _started(job: Job) -> InvalidTransition:
    return InvalidTransition(
        f"job {job.id} is {job.state.value}: only queued or waiting jobs can be changed"
    )


def _no_handler(*args: Any) -> None:
    """A schedule's kind this process has no task for (checked, never run)."""
