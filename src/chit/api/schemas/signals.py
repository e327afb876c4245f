"""The bodies of `POST /jobs/{id}/signals/{name}` (DESIGN.md "Long AI tasks")."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from chit.bounds import SIGNAL_DATA_BYTES


class SignalOut(BaseModel):
    """The stored signal: this request's (`created: true`, 201) or, for a name
    already signalled, the first one's (`created: false`, 200: nothing changed)."""

    job_id: str
    name: str
    data: dict[str, Any] | None = Field(
        description="the stored signal's data; null when the job's wait for this name "
        "had timed out before it came"
    )
    created: bool


SIGNAL_BODY = {
    "required": True,
    "description": f"the signal's data: a JSON object of at most {SIGNAL_DATA_BYTES:,} bytes",
    "content": {"application/json": {"schema": {"type": "object"}}},
}
