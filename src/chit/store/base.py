"""The store contract: the lifecycle of a job, as a worker and a submitter see it.

Each store (SQLite, PostgreSQL) implements `Store`, the core contract; what
the API, the dashboard and the metrics read, keys and sessions, flow control,
schedules, workflows and the fleet are capabilities beside it, and so is what
only some stores have (`chit.store.capabilities`). Nothing outside
`chit.store` writes SQL. The same behavioural suite (tests/store) runs against
every store.

Rules every implementation keeps:

- Claiming is one atomic statement: a job is handed to at most one worker.
- Every write a worker makes about a job it holds (heartbeat, checkpoint,
  outcome) is fenced by that claim's lease token and `state = 'running'`.
  A fenced-out write changes nothing and reports False; it never raises.
- Times come from the database clock. `now` arguments exist for tests only.
- Large results live outside the job row; `get` never loads them.
"""

from __future__ import annotations

import abc
import asyncio
import threading
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

from chit.jobs import (
    Beat,
    CancelResult,
    ChangeResult,
    Claimed,
    DependencyInfo,
    Enqueued,
    HeartbeatResult,
    Job,
    JobChange,
    NewJob,
    Outcome,
    Progress,
    ReplaySelector,
    RescueReport,
)

# Whether a step is stored, and its result (None when not).
StoredStep = tuple[bool, Any]


class Store(abc.ABC):
    """A job store. Safe to share between threads; each backend manages its connections."""

    # Whether two writes from one process run at once (PostgreSQL: two
    # connections) or queue on one lock (SQLite: one writer per file): a worker
    # records outcomes from two threads where they do.
    concurrent_writes: bool = False

    # Layout

    @abc.abstractmethod
    def migrate(self) -> int:
        """Bring the store's layout (a schema, server-side functions) up to date,
        safe if several processes race; return the version now in place."""

    @abc.abstractmethod
    def schema_version(self) -> int:
        """The layout's version in place (0 for an empty store): one cheap round
        trip, StoreError when the store cannot be reached."""

    # Submitting

    def enqueue(self, job: NewJob) -> Enqueued:
        """Insert a `queued` job. With an idempotency key already used by the same
        tenant, insert nothing and return the existing id with `created=False`
        and the stored request hash (the caller decides whether that is a conflict)."""
        return self.enqueue_many([job])[0]

    @abc.abstractmethod
    def enqueue_many(self, jobs: Sequence[NewJob]) -> list[Enqueued]:
        """`enqueue` for many jobs in one transaction; results in input order.
        (Inside the application's own transaction: `CallerTransactions`.)

        Reading a job of `jobs` may raise (Queue.enqueue_many validates each as
        it is read): let it through, and store none. Read them all before taking
        a lock other writers wait on.

        Workflows (DESIGN.md "Workflows and steps"): each job's `depends_on`
        names refs of this call or ids of stored jobs of the same tenant. A job
        with dependencies is stored `waiting` (never claimed), or `queued` at
        once when every dependency has already succeeded (or, for
        `run_on=finished`, is terminal), or `cancelled` with error
        `dependency <id> failed` / `... cancelled` when one already failed or
        was cancelled (and so on down the graph). Every job of a call with
        refs or dependencies gets one `workflow_id` (returned in each
        Enqueued): that of its first dependency outside the call that has one,
        else a new id. Refused with InvalidRequest, storing nothing: a cycle,
        an unknown ref or id, a self-dependency, a duplicate ref, another
        tenant's job, more than bounds.DEPENDENCIES_MAX edges, a ref another
        job depends on carrying an idempotency key that matched a stored job."""

    async def aenqueue_many(self, jobs: Sequence[NewJob]) -> list[Enqueued]:
        """`enqueue_many` for asyncio code: the same results and errors, and the
        event loop never waits on the store. This default runs `enqueue_many` in
        a thread; backends do better."""
        return await asyncio.to_thread(self.enqueue_many, jobs)

    async def aclose(self) -> None:
        """Close what `aenqueue_many` opened on the running event loop (then
        `close` closes the rest)."""
        return  # nothing by default: the thread `aenqueue_many` used needs no closing

    # Working

    @abc.abstractmethod
    def claim(
        self,
        worker: str,
        queues: Sequence[str],
        limit: int,
        lease_seconds: float,
        now: datetime | None = None,
        kinds: Collection[str] | None = None,
    ) -> Claimed:
        """Move up to `limit` due `queued` jobs to `running` for `worker`, in queue
        order, then priority (smaller first), then run_at. Each claim counts an
        attempt, sets a fresh lease token and opens an attempt record. With
        `kinds` (the kinds the worker has code for), jobs of other kinds are
        left queued for workers that run them. When a limit or a pause left
        jobs queued, the answer says when to look again (`look_again_at`: when
        a rate window frees, or soon for a slot, which frees without a write
        that would wake an idle worker)."""

    @abc.abstractmethod
    def heartbeat(
        self, beats: Sequence[Beat], lease_seconds: float, now: datetime | None = None
    ) -> HeartbeatResult:
        """Renew the leases of all given held jobs, writing progress where given,
        in one statement. Jobs whose token no longer matches are left out of
        `held`: the worker has lost them."""

    @abc.abstractmethod
    def checkpoint(
        self,
        job_id: str,
        lease_token: str,
        data: Any,
        progress: Progress | None,
        lease_seconds: float,
        now: datetime | None = None,
    ) -> bool:
        """Persist resume state now, renewing the lease (and progress) with it.
        False when fenced out."""

    @abc.abstractmethod
    def step(self, job_id: str, name: str) -> StoredStep:
        """(True, result) when the job stored a step of that name (in any
        attempt), (False, None) when not. Steps are kept across retry and replay
        and go with the job when it is deleted."""

    @abc.abstractmethod
    def save_step(
        self,
        job_id: str,
        lease_token: str,
        name: str,
        result: Any,
        now: datetime | None = None,
    ) -> bool:
        """Store a step's result (JSON the caller has checked), fenced like a
        checkpoint: False, storing nothing, when the token no longer holds the
        job. A step already stored keeps its first result (True)."""

    @abc.abstractmethod
    def report_cost(
        self, job_id: str, lease_token: str, cost: int, now: datetime | None = None
    ) -> bool:
        """Replace the running attempt's cost (its job's estimate) with what it
        spent (a checked whole number), so that later claims count that against
        the kind's cost_rate; fenced like a checkpoint (False when not held)."""

    @abc.abstractmethod
    def finish(self, outcomes: Sequence[Outcome], now: datetime | None = None) -> list[bool]:
        """Record outcomes of held jobs in one transaction; each item is fenced
        on its own and reports whether it took effect.

        - Succeeded: `succeeded`, result stored (out of the row when large).
        - Failed with retry_in: `queued` again after that many seconds.
        - Failed without retry_in: `failed`, with the error.
        - Released: `queued` at once, the attempt not counted.
        - Cancelled: `cancelled`.
        - Snoozed: `queued` again after its delay, the attempt not counted
          (attempts as before the claim), the attempt record `snoozed`.
        A job whose cancellation was requested ends `cancelled` on Failed,
        Released and Snoozed too. Each closes the job's open attempt record.

        In the same transaction, a job that ends `succeeded` counts down its
        dependents and makes `queued` those whose last dependency it was; one
        that ends `failed` or `cancelled` cancels its waiting dependents (all
        the way down) and counts down the `run_on=finished` ones. The cost is
        proportional to the dependents; a job without any pays nothing."""

    @abc.abstractmethod
    def finish_and_claim(
        self,
        outcomes: Sequence[Outcome],
        worker: str,
        queues: Sequence[str],
        limit: int,
        lease_seconds: float,
        now: datetime | None = None,
        kinds: Collection[str] | None = None,
    ) -> tuple[list[bool], Claimed]:
        """`finish` then `claim`, in one transaction: a busy worker hands in its
        outcomes and takes the next jobs for the slots they free with one commit
        (and, on PostgreSQL, one round trip) instead of two. All or nothing: if
        the claim fails, no outcome is recorded either, and the call can be
        retried as a whole."""

    @abc.abstractmethod
    def rescue_expired(self, now: datetime | None = None) -> RescueReport:
        """Running jobs past their lease: `queued` again when attempts remain,
        `failed` with "worker lost: lease expired after N attempts" when not,
        `cancelled` when cancellation was requested. A job it fails or cancels
        settles its dependents as `finish` does."""

    @abc.abstractmethod
    def expire_jobs(self, now: datetime | None = None) -> int:
        """Waiting or queued jobs never started whose `expires_at` has passed
        (claims skip them): `cancelled`, error `expired before it started`, their
        dependents settled as `finish` does; returns how many. A job that
        started once (a retry, a snooze) is not expired."""

    # Reading

    @abc.abstractmethod
    def get(self, job_id: str, tenant: str | None = None) -> Job | None:
        """One job, without a large result; None if unknown (or another tenant's).
        A job with dependencies carries `depends_on` and `dependencies` counts."""

    @abc.abstractmethod
    def dependencies(self, job_id: str) -> list[DependencyInfo]:
        """The direct dependencies of a job, in the order given at enqueue (those
        pruned since are left out); large results are not loaded."""

    @abc.abstractmethod
    def get_result(self, job_id: str, tenant: str | None = None) -> tuple[bool, Any]:
        """(found, result), loading a large result from the results table."""

    # Operating

    @abc.abstractmethod
    def cancel(self, job_id: str, tenant: str | None = None) -> CancelResult:
        """Queued or waiting: cancelled at once, and its waiting dependents with
        it (all the way down; `run_on=finished` ones are counted down). Running:
        cancellation requested (the worker sees it at its next heartbeat).
        Terminal: unchanged."""

    @abc.abstractmethod
    def update(self, job_id: str, change: JobChange, tenant: str | None = None) -> ChangeResult:
        """Apply `change` to a `queued` or `waiting` job, in one atomic step
        against a claim: CHANGED, or STARTED when the job is running or
        finished (nothing changed), or NOT_FOUND."""

    def retry(self, job_id: str, tenant: str | None = None) -> bool:
        """A failed or cancelled job back to `queued`, attempts 0 (`waiting`
        when dependencies of its own are not met). The dependents its failure
        or cancellation cancelled go back to `waiting`, all the way down, and
        `run_on=finished` ones count it as pending again. False when the job is
        in any other state (or unknown); history is kept."""
        return self.replay(ReplaySelector(ids=(job_id,), tenant=tenant)) == 1

    @abc.abstractmethod
    def replay(self, selector: ReplaySelector) -> int:
        """`retry` for every job the selector matches; returns how many."""

    @abc.abstractmethod
    def prune(self, older_than_seconds: float, now: datetime | None = None) -> int:
        """Delete terminal jobs finished longer ago than that; returns how many."""

    @abc.abstractmethod
    def wait_for_jobs(
        self, queues: Sequence[str], timeout: float, stop: threading.Event | None = None
    ) -> None:
        """Block up to `timeout` seconds, returning early when new work may have
        arrived (a cheap change check or a notification), or within a few
        milliseconds of `stop` being set (a worker told to stop). Spurious
        returns are fine."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release every connection."""
