"""A job's output as the API answers it (`GET /jobs/{id}/output`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from chit.jobs import OutputItem


class OutputItemOut(BaseModel):
    seq: int = Field(description="the value's place in the job's output, from 1, across attempts")
    attempt: int = Field(description="the attempt that emitted it")
    data: Any = Field(description="the JSON value the handler emitted")
    at: datetime = Field(description="when the store wrote it")

    @classmethod
    def of(cls, item: OutputItem) -> OutputItemOut:
        return cls(seq=item.seq, attempt=item.attempt, data=item.data, at=item.at)


class OutputPage(BaseModel):
    output: list[OutputItemOut] = Field(description="in seq order; [] when none came yet")
    next_after: int = Field(
        description="the `after` of the next page: the last seq here, or the `after` asked"
    )
