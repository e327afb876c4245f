"""The store written once, over named queries (`sql/<dialect>/queries.sql`).

A backend subclasses `SQLStore` and gives it what truly differs between
databases: connections and transactions (`_read`, `_write`, `_tx`, `_migrating`,
`_run_script`), a `Dialect` (how values are sent and read, how a query's
fragments are filled in), and its hot paths (`_finish`, `_opened`,
enqueue_many, list, wait_for_jobs). Everything else is here.

Both backends' connections have `execute(query, params)` returning a cursor
with `fetchone`, `fetchall` and `rowcount`, and rows readable by column name
(the names of the named queries).
"""

from __future__ import annotations

import abc
import itertools
import json
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Generator, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from functools import cached_property
from typing import Any, ClassVar

from chit.errors import InvalidRequest, StoreError
from chit.ids import id_prefix_range, new_job_ids
from chit.jobs import (
    ApiKey,
    Attempt,
    AttemptOutcome,
    AttemptStats,
    Beat,
    CancelResult,
    ChangeResult,
    ClaimedJob,
    DependencyCounts,
    DependencyInfo,
    Enqueued,
    FailureGroup,
    HeartbeatResult,
    Job,
    JobChange,
    MinuteCount,
    NewApiKey,
    NewJob,
    Outcome,
    Progress,
    ReplaySelector,
    RescueReport,
    RunOn,
    State,
    StateKindCount,
    Stats,
    Step,
    WorkflowJob,
    WorkflowView,
)
from chit.limits import KindLimits, Limits, Paused
from chit.schedules import Move, Rule, Schedule, StoredSchedule
from chit.store import graph, queries
from chit.store.flow import (
    FLOW_SECONDS,
    THROTTLED_POLL,
    Claim,
    Flow,
    FlowClaim,
    limit_params,
    read_flow,
)
from chit.store.reports import FullStore, NewSession, StoredSession
from chit.store.sql_fleet import FleetSQL


@dataclass(frozen=True, slots=True)
class InsertStep:
    """Insert these jobs (`_insert`); send back the set of ids inserted."""

    batch: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class QueryStep:
    """Run this statement; send back its rows (a list, possibly empty)."""

    query: str
    params: dict[str, Any]


# Enqueueing as steps (SQLStore._inserting): what to run next, its answer sent back.
Inserting = Generator[InsertStep | QueryStep, Any, list[Enqueued]]

# One encoder for every call: json.dumps with options builds a new one each time.
dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


@dataclass(frozen=True)
class Dialect:
    """How one database takes values (parameters) and gives them back (columns)."""

    name: str  # the folder of its queries.sql and migrations
    now: Callable[[datetime | None], Any]  # the database clock, unless a test gives a time
    interval: Callable[[float], Any]  # seconds: a lease, a delay, an age
    time: Callable[[datetime], Any]
    array: Callable[[Sequence[Any]], Any]  # ids, histogram bounds
    loads: Callable[[Any], Any]  # a JSON column
    when: Callable[[Any], datetime | None]  # a time column, as aware UTC
    query: Callable[..., Any]  # (name, **fragments): the named query, `{fragments}` filled in
    # `{tenant}`: every tenant, or an equality on j.tenant; with seek=False one that
    # only filters the rows another index finds (SQLite has no statistics to choose).
    tenant: Callable[[str | None, bool], str]
    prune_batch: Callable[[], int]  # rows a prune statement deletes at most
    text: Callable[[str], str] = str  # a text parameter, made storable


# A job's columns that are read as they come, in both dialects.
_AS_THEY_ARE: tuple[str, ...] = ("id", "kind", "queue", "priority", "attempts", "max_attempts")
_AS_THEY_ARE += ("tenant", "idempotency_key", "worker", "error", "concurrency_key", "timeout")
_AS_THEY_ARE += ("workflow_id", "ref", "unique_key", "debounce_key")


# A new job's fields that `enqueue` sends as they are.
_NEW_JOB: tuple[str, ...] = ("kind", "queue", "priority", "payload", "tenant", "idempotency_key")
_NEW_JOB += ("request_hash", "max_attempts", "concurrency_key", "timeout", "expires_in")
_NEW_JOB += ("unique_key", "traceparent")
_NO_DEBOUNCE: dict[str, Any] = {"debounce_key": None, "debounce": None, "debounce_max": None}

# How often an enqueue inserts again a job whose unique key it found taken
# but could not find the holder of (it finished in between: the key is free).
UNIQUE_TRIES = 5


def scalar(cursor: Any) -> Any:
    row = cursor.fetchone()
    if row is None:
        return None
    return next(iter(row.values())) if isinstance(row, Mapping) else row[0]


def _claim_order(r: Any) -> tuple[Any, ...]:
    return (r["priority"], r["run_at"], r["id"])


def kinds_term(held: Sequence[str], runnable: frozenset[str] | None) -> str:
    """A one-statement claim's `{held}`: it leaves the `held` kinds' jobs queued,
    and, when the worker says which kinds it runs, every other kind's. As
    literals, not a parameter: PostgreSQL's generic plan, blind to a parameter's
    value, takes `kind <> ALL($n)` for one that excludes nearly every row and
    sorts the backlog instead of walking chit_jobs_claimable."""
    if runnable is not None:
        allowed = sorted(runnable - set(held))
        return f"kind IN ({_literals(allowed)})" if allowed else "false"
    return f"kind NOT IN ({_literals(held)})" if held else "true"


def _runnable(kinds: Collection[str] | None) -> frozenset[str] | None:
    return None if kinds is None else frozenset(kinds)


def _literals(kinds: Sequence[str]) -> str:
    return ", ".join("'" + k.replace("'", "''") + "'" for k in kinds)


def progressed(progress: Progress | None) -> dict[str, Any]:
    """The parameters of a write that sets progress when given it."""
    if progress is None:
        return {"has_progress": False, "done": None, "total": None}
    return {"has_progress": True, "done": progress.done, "total": progress.total}


# How far a dashboard session's idle expiry may lag behind its last request (or
# a tenth of the idle time, if less): a session is written at most once this
# often, not on every page view.
SESSION_TOUCH_SLACK = 60.0


class SQLStore(FleetSQL, FullStore):
    d: ClassVar[Dialect]
    Q: ClassVar[dict[str, str]]
    result_inline_bytes: int
    # Hand-backs (a worker stopping) of one job that do not use up its attempt
    # (invariant 6); each later one counts, so a job no deploy lets finish ends failed.
    # CHIT_FREE_HAND_BACKS, set by open_store.
    free_hand_backs: int = 3
    # Flow control's view (store/flow.py): limits and pauses, whether each queue
    # holds more than one group of queued jobs, and where its turns stand.
    _flow: Flow = Flow()

    @abc.abstractmethod
    def _read(self) -> AbstractContextManager[Any]: ...

    @abc.abstractmethod
    def _write(self) -> AbstractContextManager[Any]:
        """A connection for writing: a transaction on SQLite, autocommit on PostgreSQL."""

    @abc.abstractmethod
    def _tx(self) -> AbstractContextManager[Any]:
        """A connection whose statements in the block commit together."""

    @abc.abstractmethod
    def _migrating(self) -> AbstractContextManager[Any]:
        """A transaction no other migrator runs beside, the migrations table created."""

    @abc.abstractmethod
    def _run_script(self, conn: Any, script: str) -> None:
        """Run a migration file inside the open transaction."""

    # The hot path runs on `conn`, inside whatever transaction it is in, at `now`
    # as the dialect sends it: `_finish` records the outcomes.

    @abc.abstractmethod
    def _finish(self, conn: Any, outcomes: Sequence[Outcome], now: Any) -> list[bool]: ...

    # Flow control's hooks (store/flow.py)

    def _lock_kinds(self, conn: Any, kinds: Sequence[str]) -> bool:
        """Make claims of these limited kinds wait for each other, if the backend
        runs claims side by side; whether it locked."""
        return False

    def _fixed_clock(self, conn: Any, now: Any) -> Any:
        """`now` as one instant for every statement of a transaction."""
        return now

    def _transaction(self, conn: Any) -> AbstractContextManager[Any]:
        """The block's statements in one transaction on `conn`, which may be in
        one already (SQLite's writes always are)."""
        return nullcontext()

    def _opened(self, conn: Any, claim: Claim, rows: list[Any], now: Any) -> None:
        """Open the attempts of jobs `claim_ids` claimed, if it did not."""

    def _close_attempts(self, conn: Any, rows: list[Any], now: Any) -> None:
        """Close the open attempts of the jobs of `rows`, if the statement that
        took them back (`rescue_expired`) did not."""

    # Rows to values

    def _job(self, r: Any) -> Job:
        loads, when, at = self.d.loads, self.d.when, self._at
        fields: dict[str, Any] = {name: r[name] for name in _AS_THEY_ARE}
        fields |= {name: loads(r[name]) for name in ("payload", "checkpoint", "result")}
        fields |= {name: at(r[name]) for name in ("run_at", "created_at", "updated_at")}
        fields |= {
            name: when(r[name])
            for name in ("lease_expires_at", "started_at", "finished_at", "expires_at")
        }
        fields |= {name: bool(r[name]) for name in ("result_external", "cancel_requested", "stale")}
        return Job(
            **fields,
            state=State(r["state"]),
            progress=Progress(r["progress_done"], r["progress_total"]),
            run_on=RunOn(r["run_on"]),
            depends_on=tuple(loads(r["depends_on"]) or ()),
        )

    def _claimed(self, r: Any) -> ClaimedJob:
        return ClaimedJob(
            **{name: r[name] for name in ("id", "kind", "queue", "max_attempts", "lease_token")},
            payload=self.d.loads(r["payload"]),
            attempt=r["attempts"],
            checkpoint=self.d.loads(r["checkpoint"]),
            progress=Progress(r["progress_done"], r["progress_total"]),
            timeout=r["timeout"],
            has_dependencies=bool(r["has_dependencies"]),
            tenant=r["tenant"],
            traceparent=r["traceparent"],
        )

    def _api_key(self, r: Any) -> ApiKey:
        return ApiKey(
            **{name: r[name] for name in ("id", "name", "tenant")},
            scopes=tuple(r["scopes"].split()),
            created_at=self._at(r["created_at"]),
            revoked_at=self.d.when(r["revoked_at"]),
        )

    def _at(self, value: Any) -> datetime:
        """A NOT NULL time column."""
        when = self.d.when(value)
        assert when is not None, "a NOT NULL time column was NULL"
        return when

    def _is_large(self, encoded: str) -> bool:
        """Whether a result is stored out of the job row."""
        return len(encoded.encode()) > self.result_inline_bytes

    # Schema

    def schema_version(self) -> int:
        with self._read() as conn:
            if not scalar(conn.execute(self.Q["migrations_table_exists"])):
                return 0
            return int(scalar(conn.execute(self.Q["schema_version"])))

    def migrate(self) -> int:
        pending = queries.migrations(self.d.name)
        if self.schema_version() == len(pending):
            return len(pending)
        with self._migrating() as conn:
            current = scalar(conn.execute(self.Q["schema_version"]))
            if current > len(pending):
                raise StoreError(
                    f"database schema is version {current}, newer than this chit "
                    f"({len(pending)}); upgrade chit"
                )
            for version, name, script in pending:
                if version > current:
                    self._run_script(conn, script)
                    conn.execute(self.Q["record_migration"], {"version": version, "name": name})
        return len(pending)

    # Submitting

    def _insert_jobs(self, conn: Any, ids: Sequence[str], jobs: Sequence[NewJob]) -> list[Enqueued]:
        """Insert `jobs` with `ids` in one statement, the first job with an
        idempotency key winning; for each job, the one inserted or the one its
        key matched."""
        steps = self._inserting(ids, jobs)
        try:
            step = next(steps)
            while True:
                if isinstance(step, InsertStep):
                    step = steps.send(self._insert(conn, step.batch))
                else:  # an UPDATE returns no rows: none to fetch
                    cursor = conn.execute(step.query, step.params)
                    step = steps.send([] if cursor.description is None else cursor.fetchall())
        except StopIteration as done:
            return done.value

    def _inserting(self, ids: Sequence[str], jobs: Sequence[NewJob]) -> Inserting:
        """`_insert_jobs` as steps, each statement yielded and its rows sent back,
        so that a driver on a sync or an async connection runs the same logic
        (`_insert_jobs`; PostgresStore.aenqueue_many)."""
        pairs = enumerate(zip(ids, jobs, strict=True))
        batch = [self._item(n, job_id, job) for n, (job_id, job) in pairs]
        if not graph.is_graph(jobs):
            inserted: set[str] = yield InsertStep(batch)
            workflow_id = None
        else:
            inserted, workflow_id = yield from self._inserting_graph(ids, jobs, batch)
        if len(inserted) == len(jobs):
            return [Enqueued(job_id, True, workflow_id=workflow_id) for job_id in ids]
        # Some keys were taken (by earlier jobs, or earlier in this batch).
        existing: dict[str, Enqueued] = {}
        taken = [item for item in batch if item["id"] not in inserted]
        for _ in range(UNIQUE_TRIES):
            existing |= yield from self._finding_holders(taken)
            # A unique key whose holder finished between the insert and the look:
            # free now, so insert again (never on SQLite, whose write lock is held).
            taken = [item for item in taken if item["id"] not in existing]
            if not taken:
                break
            inserted |= yield InsertStep(taken)
            taken = [item for item in taken if item["id"] not in inserted]
        if taken:
            raise StoreError(f"could not enqueue: keys taken and freed {UNIQUE_TRIES} times over")
        return [
            Enqueued(job_id, True, workflow_id=workflow_id)
            if job_id in inserted
            else existing[job_id]
            for job_id in ids
        ]

    def _item(self, n: int, job_id: str, job: NewJob) -> dict[str, Any]:
        """A job as `enqueue` takes it: one dict filled in place (each copy of
        one, a `|`, costs a bulk enqueue some 2 % a job)."""
        item = {name: getattr(job, name) for name in _NEW_JOB}
        item["n"], item["id"] = n, job_id
        item["run_at"] = None if job.run_at is None else self.d.time(job.run_at)
        item["expires_at"] = None if job.expires_at is None else self.d.time(job.expires_at)
        debounce = job.debounce
        if debounce is None:
            item.update(_NO_DEBOUNCE)
        else:
            item["debounce_key"], item["debounce"] = debounce.key, debounce.delay
            item["debounce_max"] = debounce.bound
        return item

    def _finding_holders(
        self, taken: list[dict[str, Any]]
    ) -> Generator[QueryStep, Any, dict[str, Enqueued]]:
        """For each item `enqueue` did not insert, by its id: the stored job its
        idempotency key names, else the job not started holding its debounce key
        (given its payload and start), else the active job holding its unique key."""
        found: dict[str, Enqueued] = {}
        keyed = [item for item in taken if item["idempotency_key"] is not None]
        if keyed:
            rows = yield QueryStep(self.Q["find_by_idempotency_key"], {"jobs": dumps(keyed)})
            by_key = {(r["tenant"], r["idempotency_key"]): r for r in rows}
            for item in keyed:
                r = by_key.get((item["tenant"], item["idempotency_key"]))
                if r is not None:
                    found[item["id"]] = Enqueued(r["id"], False, r["request_hash"])
        # A request retried with its idempotency key answers its job, as it was.
        debounced = [i for i in taken if i["id"] not in found and i["debounce_key"] is not None]
        found |= yield from self._debouncing(debounced)
        unique = [item for item in taken if item["id"] not in found and item["unique_key"]]
        if unique:
            rows = yield QueryStep(self.Q["find_by_unique_key"], {"jobs": dumps(unique)})
            holders = {(r["tenant"], r["unique_key"]): r["id"] for r in rows}
            for item in unique:
                holder = holders.get((item["tenant"], item["unique_key"]))
                if holder is not None and holder != item["id"]:
                    found[item["id"]] = Enqueued(holder, False, unique=True)
        return found

    def _debouncing(
        self, items: list[dict[str, Any]]
    ) -> Generator[QueryStep, Any, dict[str, Enqueued]]:
        if not items:
            return {}
        # The last item of each key is the one its holder keeps (each enqueue
        # replaces the payload before it); the others debounced into it too.
        last = {(item["tenant"], item["debounce_key"]): item for item in items}
        sent = [
            {name: item[name] for name in ("kind", "tenant", "debounce_key", "payload")}
            | {"debounce": item["debounce"]}
            for item in last.values()
        ]
        params = {"jobs": dumps(sent), "now": self.d.now(None)}
        rows = yield QueryStep(self.Q["debounce"], params)
        holders = {(r["tenant"], r["debounce_key"]): r for r in rows}
        found: dict[str, Enqueued] = {}
        for item in items:
            holder = holders.get((item["tenant"], item["debounce_key"]))
            if holder is None:  # started in between: the key is free, insert again
                continue
            if holder["kind"] != item["kind"]:
                raise InvalidRequest(
                    f"debounce key {item['debounce_key']!r} is held by job {holder['id']} of"
                    f" kind {holder['kind']!r}, not started yet: a key debounces one kind"
                )
            found[item["id"]] = Enqueued(holder["id"], False, debounced=True)
        return found

    def _inserting_graph(
        self, ids: Sequence[str], jobs: Sequence[NewJob], batch: list[dict[str, Any]]
    ) -> Generator[InsertStep | QueryStep, Any, tuple[set[str], str]]:
        """Insert a batch with refs or dependencies: checked (graph.check), the
        stored jobs it names locked and read, each job in its first state, and
        the stored dependencies told of their new dependents. Raises
        InvalidRequest inside the transaction, which then stores nothing."""
        edges = graph.check(jobs, ids)
        found: dict[str, graph.Stored] = {}
        if edges.stored:
            rows = yield QueryStep(self.Q["lock_dependencies"], {"ids": self.d.array(edges.stored)})
            found = {
                r["id"]: graph.Stored(r["tenant"], State(r["state"]), r["workflow_id"])
                for r in rows
            }
        # The workflow of the first stored dependency that has one: a job added
        # to a running graph joins it.
        joined = (found[t].workflow_id for t in edges.stored if t in found)
        workflow_id = next(filter(None, joined), None) or new_job_ids(1)[0]
        for item, columns in zip(batch, graph.plan(jobs, edges, found, workflow_id), strict=True):
            item |= columns
        inserted: set[str] = yield InsertStep(batch)
        depended_on = {target for targets in edges.depends_on for target in targets}
        for n, job_id in enumerate(ids):
            if job_id not in inserted and job_id in depended_on:
                raise InvalidRequest(
                    f"job {n}: its idempotency or unique key matched a stored job, so the jobs"
                    " of this call that depend on it cannot be linked; leave the key off"
                )
        told = graph.stored_dependents(edges, inserted)
        if told:
            items = [{"id": t, "dependents": new} for t, new in told.items()]
            yield QueryStep(self.Q["add_dependents"], {"items": dumps(items)})
        return inserted, workflow_id

    def _insert(self, conn: Any, batch: list[dict[str, Any]]) -> set[str]:
        """Insert the jobs of `batch` in one statement; the ids it inserted."""
        return {r["id"] for r in conn.execute(self.Q["enqueue"], self._insert_params(batch))}

    def _insert_params(self, batch: list[dict[str, Any]]) -> dict[str, Any]:
        return {"jobs": dumps(batch), "now": self.d.now(None)}

    # Working

    def claim(
        self,
        worker: str,
        queues: Sequence[str],
        limit: int,
        lease_seconds: float,
        now: datetime | None = None,
        kinds: Collection[str] | None = None,
    ) -> list[ClaimedJob]:
        if limit <= 0 or not queues:
            return []
        claim = Claim(worker, queues, limit, lease_seconds, _runnable(kinds))
        return self._claim(claim, self.d.now(now))

    def _claim(self, claim: Claim, now: Any) -> list[ClaimedJob]:
        flow = self._flow_for(claim)
        if flow is not None and set(claim.queues) <= flow.paused_queues:
            self.throttled_until = time.monotonic() + THROTTLED_POLL
            return []
        # One queue without flow control: one statement. Else one transaction, so
        # a failure part way leaves no job claimed by a worker that never heard of it.
        with self._write() if flow is None and len(claim.queues) == 1 else self._tx() as conn:
            return self._claim_in(conn, claim, now, flow)

    def _claim_in(self, conn: Any, claim: Claim, now: Any, flow: Flow | None) -> list[ClaimedJob]:
        """Claim inside the transaction open on `conn`, under `flow` (`_flow_for`):
        without it, queue by queue in the order given until `claim.limit` are claimed."""
        self.throttled_until = float("-inf")
        if flow is not None:
            return FlowClaim(self, conn, claim, self._fixed_clock(conn, now), flow).run()
        claimed: list[ClaimedJob] = []
        held = self._held_kinds()
        query = self._claim_query("claim", held, claim.kinds)
        for queue in claim.queues:
            params = {"queue": queue, "limit": claim.limit - len(claimed), "now": now}
            # In claim order: SQLite's UPDATE ... RETURNING gives rows in no order.
            claimed += self._claiming(conn, claim, query, params, _claim_order)
            if len(claimed) >= claim.limit:
                return claimed
        if held:
            # Short, while some kinds are held: jobs of theirs may have come since
            # the queues' shapes were read. Read them again, and let the flow claim
            # take what is left if it must.
            self._shapes.clear()
            flow = self._flow_for(claim)
            if flow is not None:
                rest = claim._replace(limit=claim.limit - len(claimed))
                with self._transaction(conn):  # its lock held to the claim's commit
                    clock = self._fixed_clock(conn, now)
                    claimed += FlowClaim(self, conn, rest, clock, flow).run()
        return claimed

    def _claiming(
        self, conn: Any, claim: Claim, query: Any, params: dict[str, Any], order: Callable[..., Any]
    ) -> list[ClaimedJob]:
        """Run a claim statement (`claim`, `claim_ids`) for `claim` at `params["now"]`;
        the jobs it claimed, their attempts opened, in `order`."""
        params |= {"worker": claim.worker, "lease": self.d.interval(claim.lease_seconds)}
        rows = sorted(conn.execute(query, params).fetchall(), key=order)
        self._opened(conn, claim, rows, params["now"])
        return [self._claimed(r) for r in rows]

    def finish(self, outcomes: Sequence[Outcome], now: datetime | None = None) -> list[bool]:
        with self._tx() as conn:
            return self._finish(conn, outcomes, self.d.now(now))

    def finish_and_claim(
        self,
        outcomes: Sequence[Outcome],
        worker: str,
        queues: Sequence[str],
        limit: int,
        lease_seconds: float,
        now: datetime | None = None,
        kinds: Collection[str] | None = None,
    ) -> tuple[list[bool], list[ClaimedJob]]:
        if not outcomes:
            return [], self.claim(worker, queues, limit, lease_seconds, now, kinds)
        if limit <= 0 or not queues:
            return self.finish(outcomes, now), []
        claim = Claim(worker, queues, limit, lease_seconds, _runnable(kinds))
        return self._finish_and_claim(outcomes, claim, self.d.now(now))

    def _finish_and_claim(
        self, outcomes: Sequence[Outcome], claim: Claim, now: Any
    ) -> tuple[list[bool], list[ClaimedJob]]:
        with self._tx() as conn:
            applied = self._finish(conn, outcomes, now)
            return applied, self._claim_in(conn, claim, now, self._flow_for(claim))

    # Workflows: what an outcome does to the jobs that depend on it, in the
    # transaction that records it. Each step reads the dependents from the rows
    # of the jobs that ended: work proportional to the dependents.

    def _settle(self, conn: Any, succeeded: Sequence[str], ended: Sequence[str], now: Any) -> None:
        """`succeeded`: jobs that just succeeded; `ended`: jobs that just failed
        or were cancelled. Only jobs that have dependents need be given."""
        if succeeded:
            params = {"ids": self.d.array(list(succeeded)), "callbacks_only": False, "now": now}
            conn.execute(self.Q["count_down"], params)
        while ended:
            params = {"ids": self.d.array(list(ended)), "callbacks_only": True, "now": now}
            conn.execute(self.Q["count_down"], params)
            rows = conn.execute(self.Q["cancel_dependents"], params).fetchall()
            ended = [r["id"] for r in rows if r["has_dependents"]]

    def _restore(self, conn: Any, replayed: Sequence[str], now: Any) -> None:
        """Jobs a replay took out of failed or cancelled: the dependents they
        cancelled wait again, all the way down; callbacks count them pending."""
        while replayed:
            params = {"ids": self.d.array(list(replayed)), "now": now}
            conn.execute(self.Q["count_up"], params)
            rows = conn.execute(self.Q["uncancel_dependents"], params).fetchall()
            replayed = [r["id"] for r in rows if r["has_dependents"]]

    # Flow control

    def _flow_for(self, claim: Claim) -> Flow | None:
        """The flow a claim must heed, or None while the one-statement claim
        will do: no queue of the claim paused, and each holding one group of
        queued jobs, of a kind neither limited nor paused. Limits and pauses of
        other kinds cost it nothing: the statement leaves their jobs queued
        (`_held_kinds`), should one come while the shape read here is a second
        old, until the flow claim, which heeds them, takes over."""
        flow = self._flow
        if time.monotonic() - flow.read_at > FLOW_SECONDS:
            with self._read() as conn:
                flow = self._flow = read_flow(self, conn)
        held = self._held_kinds()
        for queue in claim.queues:
            mixed, kind = self._shape(queue)
            if mixed or kind in held or queue in flow.paused_queues:
                return flow
        return None

    def _held_kinds(self) -> tuple[str, ...]:
        """Kinds only a flow claim may take: limited or paused."""
        return self._flow.held_kinds

    def _claim_query(
        self, name: str, held: tuple[str, ...], runnable: frozenset[str] | None
    ) -> Any:
        """A claim statement with its kinds (`kinds_term`), rendered once for each."""
        key = (name, held, runnable)
        query = self._claim_queries.get(key)
        if query is None:
            if len(self._claim_queries) > 64:  # limits and pauses came and went
                self._claim_queries.clear()
            query = self._claim_queries[key] = self.d.query(name, held=kinds_term(held, runnable))
        return query

    @cached_property
    def _claim_queries(self) -> dict[tuple[str, tuple[str, ...], frozenset[str] | None], Any]:
        return {}

    def _shape(self, queue: str) -> tuple[bool, str | None]:
        """Whether the queue's queued jobs are of more than one kind, tenant or
        key, and if not, their kind (None: no queued jobs)."""
        shapes = self._shapes
        read_at, answer = shapes.get(queue, (float("-inf"), (False, None)))
        if time.monotonic() - read_at <= FLOW_SECONDS:
            return answer
        with self._read() as conn:
            first = conn.execute(self.Q["next_kind"], {"queue": queue, "kind": ""}).fetchone()
            answer = (False, None)
            if first is not None:
                kind = {"queue": queue, "kind": first["kind"]}
                group = kind | {"tenant": first["tenant"], "key": first["concurrency_key"]}
                several = bool(
                    conn.execute(self.Q["next_group"], group).fetchone()
                    or conn.execute(self.Q["next_kind"], kind).fetchone()
                )
                answer = (several, first["kind"])
        shapes[queue] = (time.monotonic(), answer)
        return answer

    @cached_property
    def _shapes(self) -> dict[str, tuple[float, tuple[bool, str | None]]]:
        return {}

    @cached_property
    def _cursors(self) -> dict[tuple[str, str], tuple[str, str]]:
        """Per queue and kind, the group (tenant, key) the last claim ended on."""
        return {}

    @cached_property
    def _turns(self) -> defaultdict[str, Iterator[int]]:
        """Per queue, a count of the flow claims (each starts one kind further on)."""
        return defaultdict(itertools.count)

    def _claim_ids(self, conn: Any, claim: Claim, ids: Sequence[str], now: Any) -> list[ClaimedJob]:
        order = {job_id: n for n, job_id in enumerate(ids)}
        params = {"ids": self.d.array(list(ids)), "now": now}
        return self._claiming(conn, claim, self.Q["claim_ids"], params, lambda r: order[r["id"]])

    def declare_limits(self, declared: Mapping[str, Limits]) -> None:
        with self._write() as conn:
            for kind, limits in declared.items():
                name = "declare_limits" if limits else "forget_declared_limits"
                conn.execute(self.Q[name], limit_params(kind, limits))
        self._flow = Flow()

    def set_limits(self, kind: str, limits: Limits) -> KindLimits:
        self._changed("set_limits", limit_params(kind, limits), flow=True)
        return next(k for k in self.limits() if k.kind == kind)

    def clear_limits(self, kind: str) -> bool:
        return self._changed("clear_limits", {"kind": kind}, flow=True) == 1

    def limits(self, now: datetime | None = None) -> list[KindLimits]:
        with self._read() as conn:
            flow = read_flow(self, conn)
            rows = conn.execute(self.Q["limit_usage"], {"now": self.d.now(now)}).fetchall()
        usage = {r["kind"]: {"running": r["running"], "waiting": r["waiting"]} for r in rows}
        return [replace(k, **usage.get(kind, {})) for kind, k in flow.kinds.items()]

    def pause(self, queue: str | None = None, kind: str | None = None) -> bool:
        return self._pausing("pause", queue, kind)

    def resume(self, queue: str | None = None, kind: str | None = None) -> bool:
        return self._pausing("resume", queue, kind)

    def _pausing(self, query: str, queue: str | None, kind: str | None) -> bool:
        if (queue is None) == (kind is None):
            raise ValueError("name a queue or a kind, not both")
        scope, name = ("queue", queue) if kind is None else ("kind", kind)
        return self._changed(query, {"scope": scope, "name": name}, flow=True) == 1

    def pauses(self) -> list[Paused]:
        with self._read() as conn:
            return list(read_flow(self, conn).paused)

    def heartbeat(
        self, beats: Sequence[Beat], lease_seconds: float, now: datetime | None = None
    ) -> HeartbeatResult:
        if not beats:
            return HeartbeatResult(frozenset(), frozenset())
        items = [{"id": b.job_id, "token": b.lease_token} | progressed(b.progress) for b in beats]
        params = {"lease": self.d.interval(lease_seconds), "now": self.d.now(now)}
        with self._write() as conn:
            rows = conn.execute(self.Q["heartbeat"], params | {"beats": dumps(items)}).fetchall()
        return HeartbeatResult(
            held=frozenset(r["id"] for r in rows),
            cancel_requested=frozenset(r["id"] for r in rows if r["cancel_requested"]),
        )

    def checkpoint(
        self,
        job_id: str,
        lease_token: str,
        data: Any,
        progress: Progress | None,
        lease_seconds: float,
        now: datetime | None = None,
    ) -> bool:
        fence = {"id": job_id, "token": lease_token, "now": self.d.now(now)}
        params = fence | {"checkpoint": dumps(data), "lease": self.d.interval(lease_seconds)}
        return self._changed("checkpoint", params | progressed(progress)) == 1

    def step(self, job_id: str, name: str) -> tuple[bool, Any]:
        rows = self._rows(self.Q["step"], {"id": job_id, "name": name})
        return (True, self.d.loads(rows[0]["result"])) if rows else (False, None)

    def save_step(
        self,
        job_id: str,
        lease_token: str,
        name: str,
        result: Any,
        now: datetime | None = None,
    ) -> bool:
        params = {"id": job_id, "token": lease_token, "name": name, "now": self.d.now(now)}
        return self._changed("save_step", params | {"result": dumps(result)}) == 1

    def rescue_expired(self, now: datetime | None = None) -> RescueReport:
        with self._tx() as conn:
            # The database clock read once: the statements must agree on the time.
            clock = self._fixed_clock(conn, self.d.now(now))
            rows = conn.execute(self.Q["rescue_expired"], {"now": clock}).fetchall()
            self._close_attempts(conn, rows, clock)
            ended = [r["id"] for r in rows if r["has_dependents"] and r["state"] != "queued"]
            self._settle(conn, [], ended, clock)
        count = [r["state"] for r in rows].count
        return RescueReport(
            requeued=count("queued"), failed=count("failed"), cancelled=count("cancelled")
        )

    def expire_jobs(self, now: datetime | None = None) -> int:
        params = {"now": self.d.now(now)}
        if not self._rows(self.Q["has_expired"], params):
            return 0
        with self._tx() as conn:
            clock = self._fixed_clock(conn, params["now"])
            rows = conn.execute(self.Q["expire_jobs"], {"now": clock}).fetchall()
            self._settle(conn, [], [r["id"] for r in rows if r["has_dependents"]], clock)
        return len(rows)

    # Reading

    def _rows(self, query: Any, params: Mapping[str, Any], write: bool = False) -> Any:
        """All rows of one statement, run on its own."""
        with self._write() if write else self._read() as conn:
            return conn.execute(query, params).fetchall()

    def _changed(self, query: str, params: Mapping[str, Any], flow: bool = False) -> int:
        """How many rows one write statement, run on its own, changed; with `flow`,
        one that changes limits or pauses, which claims then read afresh."""
        with self._write() as conn:
            changed = int(conn.execute(self.Q[query], params).rowcount)
        if flow:
            self._flow = Flow()
        return changed

    def get(self, job_id: str, tenant: str | None = None) -> Job | None:
        with self._read() as conn:
            rows = conn.execute(self.Q["get"], {"id": job_id, "tenant": tenant}).fetchall()
            if not rows:
                return None
            job = self._job(rows[0])
            if not job.depends_on:
                return job
            states = conn.execute(self.Q["dependency_states"], {"id": job_id}).fetchall()
        n = {r["state"]: r["n"] for r in states}
        done = n.get("succeeded", 0), n.get("failed", 0), n.get("cancelled", 0)
        counts = DependencyCounts(len(job.depends_on), *done, pending=sum(n.values()) - sum(done))
        return replace(job, dependencies=counts)

    def get_result(self, job_id: str, tenant: str | None = None) -> tuple[bool, Any]:
        rows = self._rows(self.Q["get_result"], {"id": job_id, "tenant": tenant})
        return (True, self.d.loads(rows[0]["result"])) if rows else (False, None)

    # Workflows

    def dependencies(self, job_id: str) -> list[DependencyInfo]:
        return [
            DependencyInfo(
                r["id"],
                r["kind"],
                State(r["state"]),
                self.d.loads(r["result"]),
                bool(r["result_external"]),
            )
            for r in self._rows(self.Q["dependencies"], {"id": job_id})
        ]

    def dependents(self, job_id: str, tenant: str | None = None) -> list[str]:
        return [r["id"] for r in self._rows(self.Q["dependents"], {"id": job_id, "tenant": tenant})]

    def workflow(self, workflow_id: str, tenant: str | None = None) -> WorkflowView | None:
        rows = self._rows(self.Q["workflow"], {"workflow_id": workflow_id, "tenant": tenant})
        if not rows:
            return None
        jobs = [
            WorkflowJob(
                **{name: r[name] for name in ("id", "ref", "kind")},
                state=State(r["state"]),
                depends_on=tuple(self.d.loads(r["depends_on"]) or ()),
                run_on=RunOn(r["run_on"]),
            )
            for r in rows
        ]
        return WorkflowView(workflow_id, rows[0]["tenant"], jobs)

    def cancel_workflow(self, workflow_id: str, tenant: str | None = None) -> int | None:
        now = self.d.now(None)
        params = {"workflow_id": workflow_id, "tenant": tenant, "now": now}
        with self._tx() as conn:
            rows = conn.execute(self.Q["cancel_workflow"], params).fetchall()
            if not rows:
                found = conn.execute(self.Q["workflow"], params).fetchone()
                return 0 if found is not None else None
            ended = [r["id"] for r in rows if r["state"] == "cancelled" and r["has_dependents"]]
            self._settle(conn, [], ended, now)
        return len(rows)

    def attempts(self, job_id: str) -> list[Attempt]:
        return [
            Attempt(
                **{name: r[name] for name in ("job_id", "attempt", "worker", "error")},
                started_at=self._at(r["started_at"]),
                finished_at=self.d.when(r["finished_at"]),
                outcome=None if r["outcome"] is None else AttemptOutcome(r["outcome"]),
            )
            for r in self._rows(self.Q["attempts"], {"id": job_id})
        ]

    def steps(self, job_id: str) -> list[Step]:
        return [
            Step(
                job_id=job_id,
                **{name: r[name] for name in ("name", "attempt")},
                result=self.d.loads(r["result"]),
                created_at=self._at(r["created_at"]),
            )
            for r in self._rows(self.Q["steps"], {"id": job_id})
        ]

    def failures(self, tenant: str | None = None) -> list[FailureGroup]:
        return [
            FailureGroup(
                **{name: r[name] for name in ("kind", "count", "latest_id")},
                error=r["first_line"],
                first_seen=self._at(r["first_seen"]),
                last_seen=self._at(r["last_seen"]),
            )
            for r in self._rows(self.Q["failures"], {"tenant": tenant})
        ]

    def stats(self, tenant: str | None = None, now: datetime | None = None) -> Stats:
        params = {"tenant": tenant, "now": self.d.now(now)}
        by_state = {s.value: 0 for s in State}
        by_kind: dict[str, dict[str, int]] = {}
        with self._read() as conn:
            for r in conn.execute(self.Q["stats_by_state_kind"], params).fetchall():
                by_state[r["state"]] += r["n"]
                by_kind.setdefault(r["kind"], {})[r["state"]] = r["n"]
            rows = conn.execute(self.Q["stats_last_hour"], params).fetchall()
            last_hour = {r["state"]: r["n"] for r in rows}
            return Stats(
                by_state=by_state,
                by_kind=by_kind,
                failed_last_hour=last_hour.get("failed", 0),
                succeeded_last_hour=last_hour.get("succeeded", 0),
                oldest_queued_age=scalar(conn.execute(self.Q["stats_queue_lag"], params)),
                stale_running=scalar(conn.execute(self.Q["stats_stale"], params)),
            )

    # Operating

    def cancel(self, job_id: str, tenant: str | None = None) -> CancelResult:
        params = {"id": job_id, "tenant": tenant, "now": self.d.now(None)}
        with self._tx() as conn:
            row = conn.execute(self.Q["cancel"], params).fetchone()
            if row is not None:
                result = CancelResult(row["result"])
                if result is CancelResult.CANCELLED and row["has_dependents"]:
                    self._settle(conn, [], [job_id], params["now"])
                return result
            exists = conn.execute(self.Q["job_state"], params).fetchone()
        return CancelResult.ALREADY_FINISHED if exists else CancelResult.NOT_FOUND

    def update(self, job_id: str, change: JobChange, tenant: str | None = None) -> ChangeResult:
        params = {
            "id": job_id,
            "tenant": tenant,
            "now": self.d.now(None),
            "run_now": change.run_now,
            "run_at": None if change.run_at is None else self.d.time(change.run_at),
            "priority": change.priority,
            "payload": change.payload_json,
        }
        with self._tx() as conn:
            if conn.execute(self.Q["update_job"], params).fetchone() is not None:
                return ChangeResult.CHANGED
            exists = conn.execute(self.Q["job_state"], params).fetchone()
        return ChangeResult.STARTED if exists else ChangeResult.NOT_FOUND

    def replay(self, selector: ReplaySelector) -> int:
        tenant = selector.tenant
        params: dict[str, Any] = {"tenant": tenant}
        if selector.ids:
            query: Any = self.Q["replay"]
            params["ids"] = self.d.array(list(selector.ids))
        else:
            params |= {
                "kind": selector.kind,
                "error_prefix": selector.error_prefix,
                "since": None if selector.since is None else self.d.time(selector.since),
            }
            # With a kind the tenant is sought on the same index; without, only checked.
            with_kind = selector.kind is not None
            name = "replay_failed_kind" if with_kind else "replay_failed"
            query = self.d.query(name, tenant=self.d.tenant(tenant, with_kind))
        return self._replayed(query, params)

    def _replayed(self, query: Any, params: Mapping[str, Any]) -> int:
        """Run a replay query, and put back what the replayed jobs had cancelled."""
        with self._tx() as conn:
            rows = conn.execute(query, params).fetchall()
            self._restore(conn, [r["id"] for r in rows if r["has_dependents"]], self.d.now(None))
        return len(rows)

    def prune(self, older_than_seconds: float, now: datetime | None = None) -> int:
        age, batch = self.d.interval(-older_than_seconds), self.d.prune_batch()
        params = {"age": age, "now": self.d.now(now), "batch": batch}
        deleted = 0
        while True:
            count = self._changed("prune", params)
            deleted += count
            if count < batch:
                return deleted

    # The HTTP API

    def get_many(self, job_ids: Sequence[str]) -> list[Job]:
        if not job_ids:
            return []
        rows = self._rows(self.Q["get_many"], {"ids": self.d.array(list(job_ids))})
        return [self._job(r) for r in rows]

    def attempt_stats(
        self, bounds: Sequence[float], tenant: str | None = None
    ) -> list[AttemptStats]:
        params = {"bounds": self.d.array([float(b) for b in bounds]), "tenant": tenant}
        rows = self._rows(self.Q["attempt_stats"], params)
        # Fold (kind, outcome, bucket) rows into one AttemptStats per kind and outcome.
        groups: dict[tuple[str, str | None], tuple[int, float, list[int]]] = {}
        for r in rows:
            key, count = (r["kind"], r["outcome"]), r["n"]
            total, seconds, buckets = groups.get(key, (0, 0.0, [0] * (len(bounds) + 1)))
            if r["bucket"] is not None:
                buckets[int(r["bucket"])] += count
            groups[key] = (total + count, seconds + (r["seconds"] or 0.0), buckets)
        return [
            AttemptStats(
                kind=kind,
                outcome=None if outcome is None else AttemptOutcome(outcome),
                count=total,
                duration_sum=seconds,
                buckets=tuple(buckets),
            )
            for (kind, outcome), (total, seconds, buckets) in sorted(
                groups.items(), key=lambda item: (item[0][0], item[0][1] or "")
            )
        ]

    def create_api_key(self, key: NewApiKey) -> ApiKey:
        params = asdict(key) | {"scopes": " ".join(key.scopes)}
        return self._api_key(self._rows(self.Q["create_api_key"], params, write=True)[0])

    def find_api_key(self, key_hash: str) -> ApiKey | None:
        rows = self._rows(self.Q["find_api_key"], {"key_hash": key_hash})
        return self._api_key(rows[0]) if rows else None

    def list_api_keys(self, include_revoked: bool = False) -> list[ApiKey]:
        rows = self._rows(self.Q["list_api_keys"], {"include_revoked": include_revoked})
        return [self._api_key(r) for r in rows]

    def revoke_api_key(self, key_id: str) -> bool:
        with self._write() as conn:
            revoked = conn.execute(self.Q["revoke_api_key"], {"id": key_id}).rowcount == 1
            # Within the transaction on SQLite; on PostgreSQL (autocommit) just
            # after, which is as safe: a session's key is checked on each request.
            conn.execute(self.Q["delete_key_sessions"], {"id": key_id})
            return revoked

    # The dashboard's sessions

    def create_session(self, session: NewSession, now: datetime | None = None) -> None:
        at = self.d.now(now)
        with self._write() as conn:
            conn.execute(self.Q["prune_sessions"], {"now": at})
            idle, most = self.d.interval(session.idle_seconds), self.d.interval(session.max_seconds)
            params = asdict(session) | {"now": at, "idle": idle, "max": most}
            conn.execute(self.Q["create_session"], params)

    def touch_session(
        self, id_hash: str, idle_seconds: float, now: datetime | None = None
    ) -> StoredSession | None:
        params = {"id_hash": id_hash, "idle": self.d.interval(idle_seconds), "now": self.d.now(now)}
        # Moved at most once a SESSION_TOUCH_SLACK: most requests only read.
        lag = min(SESSION_TOUCH_SLACK, idle_seconds / 10)
        slack = self.d.interval(idle_seconds - lag)
        rows = self._rows(self.Q["find_session"], params | {"slack": slack})
        if rows and not rows[0]["fresh"]:
            rows = self._rows(self.Q["touch_session"], params, write=True)
        if not rows:
            return None
        r = rows[0]
        times = {col: self._at(r[col]) for col in ("created_at", "idle_expires_at", "expires_at")}
        return StoredSession(key_hash=r["key_hash"], **times)

    def delete_session(self, id_hash: str) -> bool:
        return self._changed("delete_session", {"id_hash": id_hash}) == 1

    # Secrets

    def server_secret(self, name: str, new: str) -> str:
        with self._write() as conn:
            conn.execute(self.Q["add_secret"], {"name": name, "value": new})
            [row] = conn.execute(self.Q["get_secret"], {"name": name}).fetchall()
            return str(row["value"])

    # The dashboard

    def _by_tenant(self, name: str, tenant: str | None, seek: bool, **params: Any) -> Any:
        """All rows of a named query with a `{tenant}` term (Dialect.tenant)."""
        query = self.d.query(name, tenant=self.d.tenant(tenant, seek))
        return self._rows(query, params | {"tenant": tenant})

    def count_jobs(self, tenant: str | None = None, cap: int = 10_000) -> list[StateKindCount]:
        rows = self._by_tenant("count_by_state_kind", tenant, True, cap=cap)
        return [
            StateKindCount(State(r["state"]), r["kind"], r["n"], r["n"] >= cap)
            for r in rows
            if r["n"]
        ]

    def finished_per_minute(
        self, tenant: str | None = None, now: datetime | None = None
    ) -> list[MinuteCount]:
        rows = self._by_tenant("finished_per_minute", tenant, False, now=self.d.now(now))
        return [
            MinuteCount(self._at(r["minute"]), r["kind"], State(r["state"]), r["n"]) for r in rows
        ]

    def oldest_queued(self, tenant: str | None = None, now: datetime | None = None) -> Job | None:
        rows = self._by_tenant("oldest_queued", tenant, False, now=self.d.now(now))
        return self._job(rows[0]) if rows else None

    def stale_jobs(
        self, tenant: str | None = None, limit: int = 20, now: datetime | None = None
    ) -> list[Job]:
        rows = self._by_tenant("stale_jobs", tenant, True, now=self.d.now(now), limit=limit)
        return [self._job(r) for r in rows]

    def search(self, text: str, tenant: str | None = None, limit: int = 50) -> list[Job]:
        text = self.d.text(text.strip())
        if not text:
            return []
        rows = list(self._by_tenant("search_idempotency_key", tenant, True, key=text, limit=limit))
        bounds = id_prefix_range(text)
        if bounds is not None:
            low, high = bounds
            rows += self._by_tenant(
                "search_id_prefix", tenant, True, low=low, high=high, limit=limit
            )
        found = {r["id"]: self._job(r) for r in rows}
        return sorted(found.values(), key=lambda j: j.id, reverse=True)[:limit]

    def replay_failure_group(self, kind: str, error: str, tenant: str | None = None) -> int:
        query = self.d.query("replay_failure_group", tenant=self.d.tenant(tenant, True))
        params = {"kind": kind, "error": self.d.text(error), "tenant": tenant}
        return self._replayed(query, params)

    # Schedules (chit/schedules.py)

    def _rule(self, r: Any) -> Rule:
        return Rule(cron=r["cron"], every=r["every_seconds"], tz=r["tz"])

    def _declared(self, r: Any) -> dict[str, Any]:
        """The fields of a schedule row that a Schedule has."""
        fields = {name: r[name] for name in ("name", "kind", "catch_up")}
        return fields | {"payload": self.d.loads(r["payload"]), "rule": self._rule(r)}

    def _schedule(self, r: Any) -> StoredSchedule:
        return StoredSchedule(
            **self._declared(r),
            **{name: r[name] for name in ("last_job_id", "last_job_state", "source")},
            paused=bool(r["paused"]),
            next_at=self._at(r["next_at"]),
            last_slot=self.d.when(r["last_slot"]),
            created_at=self._at(r["created_at"]),
            updated_at=self._at(r["updated_at"]),
        )

    def _clock(self, conn: Any, kinds: Sequence[str], now: Any) -> tuple[datetime, datetime | None]:
        r = conn.execute(self.Q["schedule_clock"], {"now": now, "kinds": self.d.array(kinds)})
        row = r.fetchone()
        return self._at(row["now"]), self.d.when(row["next_at"])

    def declare_schedule(
        self, schedule: Schedule, source: str = "operator", now: datetime | None = None
    ) -> StoredSchedule:
        at = self.d.now(now)
        rule = schedule.rule
        params = {name: getattr(schedule, name) for name in ("name", "kind", "catch_up")}
        params |= {"cron": rule.cron, "every_seconds": rule.every, "tz": rule.tz}
        params |= {"payload": dumps(schedule.payload), "source": source, "now": at}
        with self._tx() as conn:
            clock, _ = self._clock(conn, [], at)
            params["next_at"] = self.d.time(rule.first_from(clock))
            conn.execute(self.Q["declare_schedule"], params)
            row = conn.execute(self.Q["get_schedule"], {"name": schedule.name}).fetchone()
        return self._schedule(row)

    def get_schedule(self, name: str) -> StoredSchedule | None:
        rows = self._rows(self.Q["get_schedule"], {"name": name})
        return self._schedule(rows[0]) if rows else None

    def list_schedules(self) -> list[StoredSchedule]:
        return [self._schedule(r) for r in self._rows(self.Q["list_schedules"], {})]

    def remove_schedule(self, name: str) -> bool:
        return self._changed("remove_schedule", {"name": name}) == 1

    def pause_schedule(
        self, name: str, paused: bool, now: datetime | None = None
    ) -> StoredSchedule | None:
        with self._tx() as conn:
            row = conn.execute(self.Q["get_schedule"], {"name": name}).fetchone()
            if row is None:
                return None
            clock, _ = self._clock(conn, [], self.d.now(now))
            next_at = self.d.time(self._rule(row).first_from(clock))
            params = {"name": name, "paused": paused, "next_at": next_at}
            conn.execute(self.Q["pause_schedule"], params)
            row = conn.execute(self.Q["get_schedule"], {"name": name}).fetchone()
        return self._schedule(row)

    def schedule_clock(
        self, kinds: Sequence[str], now: datetime | None = None
    ) -> tuple[datetime, datetime | None]:
        with self._read() as conn:
            return self._clock(conn, list(kinds), self.d.now(now))

    def due_schedules(
        self, kinds: Sequence[str], limit: int, now: datetime | None = None
    ) -> list[tuple[Schedule, datetime]]:
        params = {"kinds": self.d.array(list(kinds)), "limit": limit, "now": self.d.now(now)}
        rows = self._rows(self.Q["due_schedules"], params)
        return [(Schedule(**self._declared(r)), self._at(r["next_at"])) for r in rows]

    def advance_schedules(self, moves: Sequence[Move]) -> int:
        if not moves:
            return 0
        time = self.d.time
        items = [
            asdict(m)
            | {"seen": time(m.seen), "next_at": time(m.next_at)}
            | {"last_slot": None if m.last_slot is None else time(m.last_slot)}
            for m in moves
        ]
        return self._changed("advance_schedules", {"moves": dumps(items)})

    def schedule_runs(self, keys: Sequence[str]) -> list[Job]:
        if not keys:
            return []
        rows = self._rows(self.Q["schedule_runs"], {"keys": self.d.array(list(keys))})
        return [self._job(r) for r in rows]
