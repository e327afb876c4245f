"""Waits on the SQL stores (`Waits`): signals, what a waiting job's rerun
reads, the deadline's wake-up, and the `Suspended` outcome a finish records.
A job waiting for other jobs is queued by the trigger of migration `waits`
when the last of them ends, in the statement that ends it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from chit.jobs import (
    Received,
    SignalResult,
    SignalStatus,
    State,
    Suspended,
    WaitedJob,
)
from chit.store.sql.base import SQLBase, dumps, scalar


class WaitsSQL(SQLBase):
    def signal(self, job_id: str, name: str, data: Any, tenant: str | None = None) -> SignalResult:
        params = {"id": job_id, "name": self.d.text(name), "tenant": tenant}
        params |= {"data": dumps(data), "now": self.d.now(None)}
        with self._tx() as conn:
            params["now"] = self._fixed_clock(conn, params["now"])
            state = scalar(conn.execute(self.Q["signal_target"], params))
            if state is None:
                return SignalResult(SignalStatus.NOT_FOUND)
            if State(state).terminal:
                return SignalResult(SignalStatus.FINISHED)
            row = conn.execute(self.Q["insert_signal"], params).fetchone()
            if row is None:
                stored = scalar(conn.execute(self.Q["stored_signal"], params))
                return SignalResult(SignalStatus.EXISTING, self.d.loads(stored))
            conn.execute(self.Q["resume_signalled"], params)
        return SignalResult(SignalStatus.CREATED, self.d.loads(row["data"]))

    def received(self, job_id: str, name: str) -> Received:
        rows = self._rows(self.Q["received"], {"id": job_id, "name": self.d.text(name)})
        if not rows:
            return Received(False)
        if rows[0]["timed_out"]:
            return Received(False, timed_out=True)
        return Received(True, self.d.loads(rows[0]["data"]))

    def waited_jobs(self, job_id: str, ids: Sequence[str]) -> tuple[list[WaitedJob], bool]:
        params = {"id": job_id, "ids": self.d.array(list(ids)), "now": self.d.now(None)}
        params["jobs"] = params["ids"]
        with self._read() as conn:
            rows = conn.execute(self.Q["waited_jobs"], params).fetchall()
            timed_out = bool(scalar(conn.execute(self.Q["wait_timed_out"], params)))
        jobs = [
            WaitedJob(
                id=r["id"],
                kind=r["kind"],
                state=State(r["state"]),
                tenant=r["tenant"],
                result=self.d.loads(r["result"]),
                result_external=bool(r["result_external"]),
                error=r["error"],
            )
            for r in rows
        ]
        return jobs, timed_out

    def wake_waiters(self, now: datetime | None = None) -> int:
        with self._tx() as conn:
            clock = self._fixed_clock(conn, self.d.now(now))
            rows = conn.execute(self.Q["wake_waiters"], {"now": clock}).fetchall()
            items = [[r["id"], r["wait_signal"]] for r in rows if r["wait_signal"] is not None]
            if items:
                conn.execute(self.Q["signal_timed_out"], {"items": dumps(items), "now": clock})
        return len(rows)

    def _suspend(self, conn: Any, outcome: Suspended, now: Any) -> Any:
        """Record a Suspended outcome in the caller's transaction: the row of
        `suspend` (id, outcome, state, has_dependents), None when fenced out."""
        jobs = outcome.jobs
        params = {"id": outcome.job_id, "token": outcome.lease_token, "now": now}
        params |= {
            "signal": outcome.signal,
            "jobs": None if jobs is None else self.d.array(list(jobs)),
        }
        params["timeout"] = None if outcome.timeout is None else self.d.interval(outcome.timeout)
        row = conn.execute(self.Q["suspend"], params).fetchone()
        if row is not None and row["state"] == "waiting":
            if jobs:
                conn.execute(self.Q["wait_on_jobs"], params)
            conn.execute(self.Q["resume_ready"], params)
        return row
