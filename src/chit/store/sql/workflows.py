"""Workflows on the SQL stores: a job's dependents, a workflow's jobs, and
cancelling a workflow (what an outcome does to dependents is in `base`)."""

from __future__ import annotations

from chit.jobs import RunOn, State, WorkflowJob, WorkflowView
from chit.store.sql.base import SQLBase


class WorkflowsSQL(SQLBase):
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
