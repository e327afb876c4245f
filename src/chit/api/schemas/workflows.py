"""What `POST /workflows` takes and the workflow routes answer
(chit/api/workflows.py)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from chit import bounds
from chit.api.schemas.common import RunOnIn
from chit.api.schemas.jobs import SubmitJob
from chit.jobs import State, WorkflowView


class SubmitWorkflow(BaseModel):
    """`POST /workflows`: jobs linked by `ref` and `depends_on` (refs of this
    request, or ids of stored jobs), stored all or nothing."""

    model_config = ConfigDict(extra="forbid")

    jobs: list[SubmitJob] = Field(
        min_length=1,
        description="in the order they are stored; one at least with a ref or depends_on",
        # What Queue.enqueue_workflow checks: without, no job would be of a workflow.
        json_schema_extra={
            "contains": {
                "anyOf": [
                    {"required": ["ref"], "properties": {"ref": {"type": "string"}}},
                    {
                        "required": ["depends_on"],
                        "properties": {"depends_on": {"type": "array", "minItems": 1}},
                    },
                ]
            }
        },
    )

    @model_validator(mode="after")
    def _edges(self) -> SubmitWorkflow:
        edges = sum(len(job.depends_on) for job in self.jobs)
        if edges > bounds.DEPENDENCIES_MAX:
            raise ValueError(
                f"a workflow has at most {bounds.DEPENDENCIES_MAX:,} dependencies "
                f"(depends_on entries, over all its jobs); this one has {edges:,}"
            )
        return self


class WorkflowSubmitted(BaseModel):
    workflow_id: str
    jobs: dict[str, str] = Field(description="each job's id by its ref")
    ids: list[str] = Field(description="every job's id, in the order given (with or without a ref)")
    status_url: str
    created: bool = Field(description="false: the Idempotency-Key matched an existing workflow")


class WorkflowJobOut(BaseModel):
    id: str
    ref: str | None
    kind: str
    state: State
    depends_on: list[str] = Field(description="job ids")
    run_on: RunOnIn


class WorkflowOut(BaseModel):
    """`GET /workflows/{id}`: its jobs in the order stored, with their edges."""

    id: str
    jobs: list[WorkflowJobOut]
    states: dict[str, int] = Field(description="how many of its jobs are in each state")

    @classmethod
    def of(cls, view: WorkflowView) -> WorkflowOut:
        states: dict[str, int] = {}
        for job in view.jobs:
            states[job.state.value] = states.get(job.state.value, 0) + 1
        return cls(
            id=view.id,
            jobs=[
                WorkflowJobOut(
                    id=j.id,
                    ref=j.ref,
                    kind=j.kind,
                    state=j.state,
                    depends_on=list(j.depends_on),
                    run_on=j.run_on.value,
                )
                for j in view.jobs
            ],
            states=states,
        )


class WorkflowCancelled(BaseModel):
    id: str
    cancelled: int = Field(
        description="jobs cancelled (waiting or queued) or asked to stop (running)"
    )
