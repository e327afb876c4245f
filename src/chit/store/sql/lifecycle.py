"""The job's lifecycle on the SQL stores (the core `Store` contract): schema,
claims, outcomes, leases, reads of one job, and an operator's changes."""

from __future__ import annotations

import abc
from collections.abc import Collection, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from datetime import datetime
from typing import Any

from chit.errors import StoreError
from chit.jobs import (
    Beat,
    CancelResult,
    ChangeResult,
    Claimed,
    DependencyCounts,
    DependencyInfo,
    HeartbeatResult,
    Job,
    JobChange,
    Outcome,
    Progress,
    ReplaySelector,
    RescueReport,
    State,
)
from chit.store import queries
from chit.store.flow import Claim
from chit.store.sql.base import dumps, progressed, scalar
from chit.store.sql.claims import ClaimsSQL, runnable_kinds
from chit.store.sql.enqueue import EnqueueSQL


class LifecycleSQL(EnqueueSQL, ClaimsSQL):
    # Hand-backs (a worker stopping) of one job that do not use up its attempt
    # (invariant 6); each later one counts, so a job no deploy lets finish ends failed.
    # CHIT_FREE_HAND_BACKS, set by open_store.
    free_hand_backs: int = 3

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

    def _close_attempts(self, conn: Any, rows: list[Any], now: Any) -> None:
        """Close the open attempts of the jobs of `rows`, if the statement that
        took them back (`rescue_expired`) did not."""

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

    # Working

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
    ) -> tuple[list[bool], Claimed]:
        if not outcomes:
            return [], self.claim(worker, queues, limit, lease_seconds, now, kinds)
        if limit <= 0 or not queues:
            return self.finish(outcomes, now), Claimed()
        claim = Claim(worker, queues, limit, lease_seconds, runnable_kinds(kinds))
        return self._finish_and_claim(outcomes, claim, self.d.now(now))

    def _finish_and_claim(
        self, outcomes: Sequence[Outcome], claim: Claim, now: Any
    ) -> tuple[list[bool], Claimed]:
        with self._tx() as conn:
            applied = self._finish(conn, outcomes, now)
            return applied, self._claim_in(conn, claim, now, self._flow_for(claim))

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

    def prune(self, older_than_seconds: float, now: datetime | None = None) -> int:
        age, batch = self.d.interval(-older_than_seconds), self.d.prune_batch()
        params = {"age": age, "now": self.d.now(now), "batch": batch}
        deleted = 0
        while True:
            count = self._changed("prune", params)
            deleted += count
            if count < batch:
                return deleted
