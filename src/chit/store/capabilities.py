"""A store's capabilities: each a small interface beside the core contract
(the lifecycle, `chit.store.base.Store`), which a store declares by inheriting
it. What the API, the dashboard and the metrics read, API keys, the dashboard's
sessions, flow control (limits and pauses), schedules, workflows, the fleet;
and what only some stores have: one write lock, joining the application's
own transaction, claiming as a wake arrives. A worker needs none of these but
`declare_limits` when it starts (and uses the last where a store has it).

`FullStore` is the core and every feature's interface: what `open_store`
returns and what the API and dashboard ask for. `Capability.of(store)` is
where code that needs one of the others says, in one line, that the store it
was given lacks it.
"""

from __future__ import annotations

import abc
import builtins
import threading
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Self

from chit.errors import Unsupported
from chit.fleet import LiveWorker, QueueCounts, WorkerBeat
from chit.jobs import (
    ApiKey,
    Attempt,
    AttemptStats,
    Claimed,
    Enqueued,
    FailureGroup,
    Job,
    JobFilter,
    MinuteCount,
    NewApiKey,
    NewJob,
    OutputItem,
    Page,
    Received,
    SignalResult,
    StateKindCount,
    Stats,
    Step,
    WaitedJob,
    WorkflowView,
)
from chit.limits import KindLimits, Limits, Paused
from chit.schedules import Move, Schedule, StoredSchedule
from chit.store.base import Store
from chit.store.feeds import OutputFeed


class Capability(abc.ABC):
    """An interface a store declares by inheriting it."""

    what: ClassVar[str]  # what the interface offers, as a message names it

    @classmethod
    def of(cls, store: object) -> Self:
        """`store` as this capability, or Unsupported saying in one line which
        store lacks what: called where the capability is used."""
        if isinstance(store, cls):
            return store
        raise Unsupported(f"{type(store).__name__} does not offer {cls.what}")


class Workflows(Capability):
    """Workflows (jobs stored in one enqueue_many call with refs or dependencies)
    as the API, the client, the CLI and the dashboard read and cancel them."""

    what: ClassVar[str] = "workflows"

    @abc.abstractmethod
    def workflow(self, workflow_id: str, tenant: str | None = None) -> WorkflowView | None:
        """The workflow's jobs in enqueue order, each with its ref, kind, state
        and dependency ids; None if unknown (or another tenant's)."""

    @abc.abstractmethod
    def cancel_workflow(self, workflow_id: str, tenant: str | None = None) -> int | None:
        """`cancel` every job of the workflow that is not terminal: waiting and
        queued ones are cancelled, running ones asked to stop. How many were
        cancelled or asked; None if the workflow is unknown (or another tenant's)."""

    @abc.abstractmethod
    def dependents(self, job_id: str, tenant: str | None = None) -> builtins.list[str]:
        """The ids of the jobs that depend directly on this one, oldest first."""


class Waits(Capability):
    """Jobs that wait without a slot (DESIGN.md "Long AI tasks"): signals, and
    what a waiting job's handler reads when it runs again. The wait itself is
    an outcome (`Suspended`, recorded by `finish`); a job that waits for other
    jobs is queued in the transaction that makes the last of them terminal,
    whichever way (an outcome, a cancel, a rescue, an expiry)."""

    what: ClassVar[str] = "waits and signals"

    @abc.abstractmethod
    def signal(self, job_id: str, name: str, data: Any, tenant: str | None = None) -> SignalResult:
        """Store the job's signal `name` (JSON `data` the caller has checked)
        unless one of that name is stored (EXISTING, the stored data, nothing
        changed); a waiting job waiting for it becomes `queued` in the same
        transaction. FINISHED for a terminal job, NOT_FOUND for an unknown one
        (or another tenant's); neither stores anything. Signals go with the job."""

    @abc.abstractmethod
    def received(self, job_id: str, name: str) -> Received:
        """The job's signal `name` if stored; else whether its last wait, for
        that signal, ended by its timeout."""

    @abc.abstractmethod
    def waited_jobs(self, job_id: str, ids: Sequence[str]) -> tuple[builtins.list[WaitedJob], bool]:
        """The jobs among `ids` that exist (any tenant; the caller checks), in
        `ids`' order, large results not loaded; and whether `job_id`'s last
        wait, for exactly those ids, ended by its timeout."""

    @abc.abstractmethod
    def wake_waiters(self, now: datetime | None = None) -> int:
        """`queued` every waiting job whose wait's timeout has passed, reading
        an index on the deadline (never every waiting job); how many."""


class Reports(Capability):
    """Reading jobs and their history, and the one operator action the reports offer."""

    what: ClassVar[str] = "reports"

    @abc.abstractmethod
    def attempts(self, job_id: str) -> builtins.list[Attempt]:
        """Every claim of the job, oldest first."""

    @abc.abstractmethod
    def steps(self, job_id: str) -> builtins.list[Step]:
        """The durable steps a job stored, in the order they were stored."""

    @abc.abstractmethod
    def list(self, where: JobFilter, limit: int = 50, cursor: str | None = None) -> Page:
        """Jobs newest first; pass `next_cursor` back to get the next page."""

    @abc.abstractmethod
    def failures(self, tenant: str | None = None) -> builtins.list[FailureGroup]:
        """Failed jobs grouped by kind and first line of error, largest group first."""

    @abc.abstractmethod
    def stats(self, tenant: str | None = None, now: datetime | None = None) -> Stats:
        """Counts by state and kind, last hour's outcomes, queue lag, stale leases."""

    # The HTTP API

    @abc.abstractmethod
    def get_many(self, job_ids: Sequence[str]) -> builtins.list[Job]:
        """The jobs among `job_ids` that exist, read as `get` reads them, in any
        order, in one query however many ids: the API's event poller watches
        every streamed job with one call per tick."""

    @abc.abstractmethod
    def attempt_stats(
        self, bounds: Sequence[float], tenant: str | None = None
    ) -> builtins.list[AttemptStats]:
        """Attempts grouped by kind and outcome, with durations counted into the
        histogram `bounds` (seconds, ascending). Read from the attempt records,
        so the figures are right whichever processes ran the jobs; pruning jobs
        removes their attempts, which a metrics scraper sees as a counter reset."""

    # The dashboard. Each reads an index, so that pages stay fast with millions of jobs.

    @abc.abstractmethod
    def count_jobs(
        self, tenant: str | None = None, cap: int = 10_000
    ) -> builtins.list[StateKindCount]:
        """Jobs per state and kind, each pair counted up to `cap` (then `capped`):
        the cost is bounded by the number of kinds times `cap`, never the table's
        size. Pairs with no job are left out."""

    @abc.abstractmethod
    def finished_per_minute(
        self, tenant: str | None = None, now: datetime | None = None
    ) -> builtins.list[MinuteCount]:
        """Jobs that succeeded or failed in the hour before `now` (the window of
        `stats`' last hour), per minute and kind. Summed over minutes, the last
        hour's outcomes per kind."""

    @abc.abstractmethod
    def oldest_queued(self, tenant: str | None = None, now: datetime | None = None) -> Job | None:
        """The queued job that has been due longest (its `run_at` is the queue lag),
        or None when no queued job is due."""

    @abc.abstractmethod
    def stale_jobs(
        self, tenant: str | None = None, limit: int = 20, now: datetime | None = None
    ) -> builtins.list[Job]:
        """Up to `limit` running jobs whose lease has expired, longest expired first."""

    @abc.abstractmethod
    def search(self, text: str, tenant: str | None = None, limit: int = 50) -> builtins.list[Job]:
        """Jobs whose idempotency key is exactly `text`, and jobs whose id starts
        with `text` (a whole id, or its first characters, any case), newest first."""

    @abc.abstractmethod
    def replay_failure_group(self, kind: str, error: str, tenant: str | None = None) -> int:
        """`retry` every failed job of `kind` whose error's first line is exactly
        `error` (one group of `failures`); returns how many."""


class ApiKeys(Capability):
    """The HTTP API's keys. Only a key's hash is stored."""

    what: ClassVar[str] = "API keys"

    @abc.abstractmethod
    def create_api_key(self, key: NewApiKey) -> ApiKey:
        """Store a new key (its hash, tenant and scopes) and return it."""

    @abc.abstractmethod
    def find_api_key(self, key_hash: str) -> ApiKey | None:
        """The unrevoked key with that hash, or None."""

    @abc.abstractmethod
    def list_api_keys(self, include_revoked: bool = False) -> list[ApiKey]:
        """Keys, oldest first; revoked ones only when asked for."""

    @abc.abstractmethod
    def revoke_api_key(self, key_id: str) -> bool:
        """Revoke for good (the row is kept for the record) and end the dashboard
        sessions signed in with it. False when the id is unknown or the key was
        already revoked."""


@dataclass(frozen=True, slots=True)
class NewSession:
    """A dashboard sign-in to store. Hashes only: neither the session id the
    cookie holds nor the API key is ever stored."""

    id_hash: str
    key_hash: str
    idle_seconds: float  # it ends after this long without a request
    max_seconds: float  # and this long after sign-in, whatever happens


@dataclass(frozen=True, slots=True)
class StoredSession:
    key_hash: str
    created_at: datetime
    idle_expires_at: datetime
    expires_at: datetime


class Sessions(Capability):
    """The dashboard's server-side sessions (chit.dashboard.session), by the
    sha256 of the id its cookie holds. Times are the database's unless a test
    passes `now`."""

    what: ClassVar[str] = "dashboard sessions"

    @abc.abstractmethod
    def create_session(self, session: NewSession, now: datetime | None = None) -> None:
        """Store a sign-in; sessions that have expired are deleted on the way."""

    @abc.abstractmethod
    def touch_session(
        self, id_hash: str, idle_seconds: float, now: datetime | None = None
    ) -> StoredSession | None:
        """The session, its idle expiry moved to `now + idle_seconds` (never past
        its absolute expiry; a backend may skip the write while the expiry is
        within a minute of that); None when it is unknown, signed out or expired."""

    @abc.abstractmethod
    def delete_session(self, id_hash: str) -> bool:
        """Sign out; False when there was no such session."""


class FlowControl(Capability):
    """Limits and pauses (DESIGN.md, "Flow control"): kept in the database, so
    they hold across every worker, and read by claims. Claims see a change
    within a second."""

    what: ClassVar[str] = "limits and pauses"

    @abc.abstractmethod
    def declare_limits(self, declared: Mapping[str, Limits]) -> None:
        """The code's limits of these kinds, as a starting worker knows them
        (an empty Limits: the code has none). An operator's override stays."""

    @abc.abstractmethod
    def set_limits(self, kind: str, limits: Limits) -> KindLimits:
        """An operator's override of the limits given (the others stay as they were)."""

    @abc.abstractmethod
    def clear_limits(self, kind: str) -> bool:
        """Drop the operator's override of a kind; False when there was none."""

    @abc.abstractmethod
    def limits(self, now: datetime | None = None) -> builtins.list[KindLimits]:
        """Every kind with a declared or overridden limit, by kind, with its
        running and waiting jobs."""

    @abc.abstractmethod
    def pause(self, queue: str | None = None, kind: str | None = None) -> bool:
        """Claim no job of a queue, or of a kind (exactly one is given); running
        jobs finish. False when it was paused already."""

    @abc.abstractmethod
    def resume(self, queue: str | None = None, kind: str | None = None) -> bool:
        """Undo `pause`; False when it was not paused."""

    @abc.abstractmethod
    def pauses(self) -> builtins.list[Paused]:
        """What is paused, queues first, by name."""


class Secrets(Capability):
    """Secrets the server makes for itself and every API process shares (the key
    that signs event-stream tokens)."""

    what: ClassVar[str] = "server secrets"

    @abc.abstractmethod
    def server_secret(self, name: str, new: str) -> str:
        """The secret stored as `name`, storing `new` first if there is none yet:
        whichever process stores first, every process then gets the same value."""


class Schedules(Capability):
    """Schedules (DESIGN.md, "Time"; chit.schedules): one row a name, read by
    every worker's maintenance tick. Slots are computed from the rule in
    Python at the database's time (`now` for tests); the store keeps each
    schedule's first slot not enqueued yet (`next_at`) and guards its moves."""

    what: ClassVar[str] = "schedules"

    @abc.abstractmethod
    def declare_schedule(
        self, schedule: Schedule, source: str = "operator", now: datetime | None = None
    ) -> StoredSchedule:
        """Insert or update by name. A new schedule, or one whose rule (cron,
        period or time zone) changed, starts at its first slot from `now`; one
        whose rule is the same keeps its next slot, so slots missed while no
        worker ran are caught up by its policy. A pause stays."""

    @abc.abstractmethod
    def get_schedule(self, name: str) -> StoredSchedule | None:
        """One schedule with its last job's state; None if unknown."""

    @abc.abstractmethod
    def list_schedules(self) -> builtins.list[StoredSchedule]:
        """Every schedule, by name."""

    @abc.abstractmethod
    def remove_schedule(self, name: str) -> bool:
        """Delete; its jobs stay. False when unknown."""

    @abc.abstractmethod
    def pause_schedule(
        self, name: str, paused: bool, now: datetime | None = None
    ) -> StoredSchedule | None:
        """Pause (no slot enqueued) or resume (from the first slot at or after
        `now`: a pause's slots are not caught up); doing it twice changes nothing.
        None if unknown."""

    @abc.abstractmethod
    def schedule_clock(
        self, kinds: Sequence[str], now: datetime | None = None
    ) -> tuple[datetime, datetime | None]:
        """The database's time (or `now`), and the earliest next slot of the
        unpaused schedules of these kinds (None: there is none)."""

    @abc.abstractmethod
    def due_schedules(
        self, kinds: Sequence[str], limit: int, now: datetime | None = None
    ) -> builtins.list[tuple[Schedule, datetime]]:
        """Up to `limit` unpaused schedules of these kinds whose next slot is at
        or before `now`, each with that slot, the most overdue first. The cost
        follows the due schedules, not the table."""

    @abc.abstractmethod
    def advance_schedules(self, moves: Sequence[Move]) -> int:
        """Move schedules on in one statement: each from its `seen` next slot to
        `next_at`, recording its last slot and job when given. A move whose
        `seen` is no longer the schedule's next slot (another worker moved it)
        or whose schedule was paused or removed changes nothing. How many moved."""

    @abc.abstractmethod
    def schedule_runs(self, keys: Sequence[str]) -> builtins.list[Job]:
        """The jobs holding these idempotency keys (tenant ''), in any order."""


class Fleet(Capability):
    """The workers and each queue's load (chit/fleet.py): what autoscalers read."""

    what: ClassVar[str] = "worker registration"

    @abc.abstractmethod
    def beat_worker(
        self, beat: WorkerBeat, stale_after: float, now: datetime | None = None
    ) -> None:
        """Record the worker alive, with what it says of itself, until
        `stale_after` seconds from now; forget every worker past its own."""

    @abc.abstractmethod
    def forget_worker(self, worker_id: str) -> None:
        """A worker that stopped: gone from `live_workers` at once."""

    @abc.abstractmethod
    def live_workers(self, now: datetime | None = None) -> builtins.list[LiveWorker]:
        """The workers whose last beat has not gone stale, oldest first."""

    @abc.abstractmethod
    def queue_counts(
        self, tenant: str | None = None, now: datetime | None = None
    ) -> builtins.list[QueueCounts]:
        """Each queue's ready, scheduled and running jobs and how long its oldest
        ready one has waited; a queue may come in more than one row (summed by
        fleet.queue_loads), a queue with no job in none."""


class Output(Capability):
    """A job's output (DESIGN.md "Long AI tasks"): the values its handler emits,
    numbered per job across attempts, fenced like every write of a held job,
    deleted with the job."""

    what: ClassVar[str] = "job output"

    @abc.abstractmethod
    def append_output(
        self,
        job_id: str,
        lease_token: str,
        values: Sequence[str],
        size: int,
        now: datetime | None = None,
    ) -> int | None:
        """Append `values` (JSON texts the caller checked, in order; `size` their
        bytes) to the output of the job `lease_token` holds, in one transaction
        that also tells listeners: each gets the next `seq`, the job's current
        attempt and the store's time. The last seq written; None when fenced out
        (nothing written)."""

    @abc.abstractmethod
    def output_used(self, job_id: str) -> tuple[int, int]:
        """(the last seq, the bytes) of the job's output so far, every attempt's;
        (0, 0) for none."""

    @abc.abstractmethod
    def output(
        self, job_id: str, after: int = 0, limit: int = 100, tenant: str | None = None
    ) -> builtins.list[OutputItem] | None:
        """Up to `limit` values with seq above `after`, in order; None when the
        job is unknown (or another tenant's)."""

    @abc.abstractmethod
    def output_heads(self, job_ids: Sequence[str]) -> dict[str, int]:
        """The last seq of each of these jobs that has output, in one query."""

    @abc.abstractmethod
    def listen_to(self, job_ids: Sequence[str]) -> None:
        """Listeners are about to follow these jobs: from now on their claims
        and outcomes are announced on the output feed too, as their output
        is (a store whose feed wakes for every write does nothing). A job
        nobody listened to costs no announcement."""

    @abc.abstractmethod
    def output_feed(self) -> OutputFeed:
        """A new feed of output writes (the caller closes it)."""


class WriteLock(Capability):
    """One lock every write of the store queues on (SQLite's), which a
    database that answers reads may still hold: readiness asks for it."""

    what: ClassVar[str] = "a store-wide write lock"

    @abc.abstractmethod
    def writable(self, timeout: float) -> bool:
        """Whether a write could start within `timeout` seconds, writing nothing."""


class CallerTransactions(Capability):
    """Enqueueing inside the application's own open transaction, on its own
    connection: the jobs exist if and only if that transaction commits."""

    what: ClassVar[str] = "enqueueing in the caller's transaction (connection=)"

    @abc.abstractmethod
    def enqueue_many(self, jobs: Sequence[NewJob], connection: Any = None) -> list[Enqueued]:
        """`Store.enqueue_many`; with `connection` (a psycopg connection for
        PostgreSQL, a sqlite3 connection to the same file for SQLite), inside
        the transaction open on it, which it does not commit."""

    @abc.abstractmethod
    async def aenqueue_many(self, jobs: Sequence[NewJob], connection: Any = None) -> list[Enqueued]:
        """`enqueue_many` for asyncio code, on the application's async connection."""


class ClaimsOnWake(Capability):
    """An idle worker's wait and its next claim in one round trip: the job that
    wakes it is claimed as the wake arrives, not after another request (Redis:
    a blocking move of the wake token, then the claim, pipelined)."""

    what: ClassVar[str] = "a claim in the round trip that wakes an idle worker"

    @abc.abstractmethod
    def claim_on_wake(
        self,
        worker: str,
        queues: Sequence[str],
        limit: int,
        lease_seconds: float,
        timeout: float,
        stop: threading.Event | None = None,
        kinds: Collection[str] | None = None,
    ) -> Claimed | None:
        """`wait_for_jobs`, then, if a wake ended the wait, `claim` (the same
        arguments, the same result) without a further request; None when the
        wait ended otherwise (its timeout, `stop`, a wait the store cannot
        pair with a claim: the caller claims as usual)."""


class FullStore(
    Store,
    Reports,
    Workflows,
    ApiKeys,
    Sessions,
    FlowControl,
    Secrets,
    Schedules,
    Fleet,
    Output,
    Waits,
):
    """The core contract and every feature's interface: what `open_store`
    returns, and what the API, the dashboard and the CLI ask for."""
