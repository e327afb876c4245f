"""Workflows on Redis (`Workflows`): a workflow's jobs, cancelling them, and a
job's dependents; what an outcome does to dependents is in chit.lua's `settle`.
One call each."""

from __future__ import annotations

from chit.jobs import RunOn, State, WorkflowJob, WorkflowView
from chit.store.capabilities import Workflows
from chit.store.redis.codec import loads
from chit.store.redis.core import RedisCore, tenant_arg


class WorkflowsRedis(RedisCore, Workflows):
    def workflow(self, workflow_id: str, tenant: str | None = None) -> WorkflowView | None:
        rows = self.redis.fcall_ro("chit_workflow", workflow_id, tenant_arg(tenant))
        if not rows:
            return None
        jobs = [
            WorkflowJob(
                job_id,
                ref,
                kind,
                State(state),
                tuple(loads(depends_on)) if depends_on else (),
                RunOn(run_on or "succeeded"),
            )
            for job_id, ref, kind, state, depends_on, run_on, _ in rows
        ]
        return WorkflowView(workflow_id, rows[0][6], jobs)

    def cancel_workflow(self, workflow_id: str, tenant: str | None = None) -> int | None:
        n = int(self.redis.fcall("chit_cancel_workflow", "", workflow_id, tenant_arg(tenant)))
        return None if n < 0 else n

    def dependents(self, job_id: str, tenant: str | None = None) -> list[str]:
        return list(self.redis.fcall_ro("chit_dependents", job_id, tenant_arg(tenant)))
