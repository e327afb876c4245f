"""Storing new jobs, written once for both SQL backends as steps
(`EnqueueSQL._inserting`): each statement is yielded and its rows sent back,
so a sync and an async driver run the same logic."""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any

from chit.errors import InvalidRequest, StoreError
from chit.ids import new_job_ids
from chit.jobs import Enqueued, NewJob, State
from chit.store import graph
from chit.store.sql.base import SQLBase, dumps


@dataclass(frozen=True, slots=True)
class InsertStep:
    """Insert these jobs (`_insert`); send back the ids inserted, each with its
    stored created_at (as the driver reads it)."""

    batch: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class QueryStep:
    """Run this statement; send back its rows (a list, possibly empty)."""

    query: str
    params: dict[str, Any]


# Enqueueing as steps (SQLStore._inserting): what to run next, its answer sent back.
Inserting = Generator[InsertStep | QueryStep, Any, list[Enqueued]]

# A new job's fields that `enqueue` sends as they are.
_NEW_JOB: tuple[str, ...] = ("kind", "queue", "priority", "payload", "tenant", "idempotency_key")
_NEW_JOB += ("request_hash", "max_attempts", "concurrency_key", "timeout", "expires_in")
_NEW_JOB += ("unique_key", "traceparent", "cost")
_NO_DEBOUNCE: dict[str, Any] = {"debounce_key": None, "debounce": None, "debounce_max": None}

# How often an enqueue inserts again a job whose unique key it found taken
# but could not find the holder of (it finished in between: the key is free).
UNIQUE_TRIES = 5


class EnqueueSQL(SQLBase):
    """Storing new jobs: keys, debounce and workflows, as steps any driver runs."""

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
            inserted: dict[str, Any] = yield InsertStep(batch)
            workflow_id = None
        else:
            inserted, workflow_id = yield from self._inserting_graph(ids, jobs, batch)
        if len(inserted) == len(jobs):
            return [self._new(job_id, inserted, workflow_id) for job_id in ids]
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
            self._new(job_id, inserted, workflow_id) if job_id in inserted else existing[job_id]
            for job_id in ids
        ]

    def _new(self, job_id: str, inserted: dict[str, Any], workflow_id: str | None) -> Enqueued:
        return Enqueued(
            job_id, True, workflow_id=workflow_id, created_at=self._at(inserted[job_id])
        )

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
    ) -> Generator[InsertStep | QueryStep, Any, tuple[dict[str, Any], str]]:
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
        inserted: dict[str, Any] = yield InsertStep(batch)
        depended_on = {target for targets in edges.depends_on for target in targets}
        for n, job_id in enumerate(ids):
            if job_id not in inserted and job_id in depended_on:
                raise InvalidRequest(
                    f"job {n}: its idempotency or unique key matched a stored job, so the jobs"
                    " of this call that depend on it cannot be linked; leave the key off"
                )
        told = graph.stored_dependents(edges, set(inserted))
        if told:
            items = [{"id": t, "dependents": new} for t, new in told.items()]
            yield QueryStep(self.Q["add_dependents"], {"items": dumps(items)})
        return inserted, workflow_id

    def _insert(self, conn: Any, batch: list[dict[str, Any]]) -> dict[str, Any]:
        """Insert the jobs of `batch` in one statement; the ids it inserted, each
        with its created_at."""
        rows = conn.execute(self.Q["enqueue"], self._insert_params(batch))
        return {r["id"]: r["created_at"] for r in rows}

    def _insert_params(self, batch: list[dict[str, Any]]) -> dict[str, Any]:
        return {"jobs": dumps(batch), "now": self.d.now(None)}
