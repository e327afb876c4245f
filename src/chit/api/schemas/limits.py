"""Limits and pauses (chit/api/limits.py; DESIGN.md, "Flow control")."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from chit import bounds
from chit.limits import KindLimits, Limits, Paused

_CONCURRENCY_SCHEMA: dict[str, Any] = {
    "type": "integer",
    "minimum": 1,
    "maximum": bounds.CONCURRENCY_MAX,
}
# 1 to 1,000,000 (RATE_MAX) starts a period, as `Limits.checked` allows.
_RATE_SCHEMA: dict[str, Any] = {
    "type": "string",
    "pattern": r"^\s*0*([1-9][0-9]{0,5}|1000000)\s*/\s*(s|m|h)\s*$",
}
# Typed for the schema, checked by `Limits.checked`: the API refuses a bad value
# with the message `@queue.task` and the CLI give.
_ConcurrencyIn = Annotated[Any, WithJsonSchema({"anyOf": [_CONCURRENCY_SCHEMA, {"type": "null"}]})]
_RateIn = Annotated[Any, WithJsonSchema({"anyOf": [_RATE_SCHEMA, {"type": "null"}]})]
# 1 to 10^12 (COST_MAX) cost a period.
_COST_RATE_SCHEMA: dict[str, Any] = {
    "type": "string",
    "pattern": r"^\s*0*([1-9][0-9]{0,11}|1000000000000)\s*/\s*(s|m|h)\s*$",
}
_CostRateIn = Annotated[Any, WithJsonSchema({"anyOf": [_COST_RATE_SCHEMA, {"type": "null"}]})]


class SetLimits(BaseModel):
    """`PUT /limits/{kind}`: the operator's override of the limits given (at
    least one); the others stay as they were. Rates are "N/s", "N/m" or "N/h"."""

    # At least one given, not null: `{}` is refused with 422 and the schema says so.
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "anyOf": [
                {"required": [name], "properties": {name: dict(schema)}}
                for name, schema in (
                    ("concurrency", _CONCURRENCY_SCHEMA),
                    ("rate", _RATE_SCHEMA),
                    ("key_concurrency", _CONCURRENCY_SCHEMA),
                    ("key_rate", _RATE_SCHEMA),
                    ("cost_rate", _COST_RATE_SCHEMA),
                    ("key_cost_rate", _COST_RATE_SCHEMA),
                )
            ]
        },
    )

    concurrency: _ConcurrencyIn = Field(default=None, description="at most this many running")
    rate: _RateIn = Field(default=None, description='at most N starts per period, e.g. "10/s"')
    key_concurrency: _ConcurrencyIn = Field(default=None, description="the same, per key")
    key_rate: _RateIn = Field(default=None, description="the same, per key")
    cost_rate: _CostRateIn = Field(
        default=None,
        description='at most N cost (the jobs\' `cost`) started per period, e.g. "90000/m"',
    )
    key_cost_rate: _CostRateIn = Field(default=None, description="the same, per key")

    def checked(self) -> Limits:
        """The limits, or LimitError (answered 422 with its message)."""
        return Limits.checked(**{name: getattr(self, name) for name in type(self).model_fields})


class LimitValues(BaseModel):
    concurrency: int | None = None
    rate: str | None = Field(default=None, description='"N/s", "N/m" or "N/h"')
    key_concurrency: int | None = None
    key_rate: str | None = None
    cost_rate: str | None = None
    key_cost_rate: str | None = None

    @classmethod
    def of(cls, limits: Limits) -> LimitValues:
        return cls.model_validate(limits.as_dict())


class LimitOut(BaseModel):
    """A kind's limits in force (the operator's where set, else the code's),
    what each side set, and the kind's jobs now."""

    kind: str
    concurrency: int | None = None
    rate: str | None = None
    key_concurrency: int | None = None
    key_rate: str | None = None
    cost_rate: str | None = None
    key_cost_rate: str | None = None
    declared: LimitValues = Field(description="by the code, when a worker started")
    override: LimitValues = Field(description="by an operator, until cleared")
    running: int
    waiting: int = Field(description="queued and due, not running")
    updated_at: datetime | None = None

    @classmethod
    def of(cls, kind: KindLimits) -> LimitOut:
        return cls(
            kind=kind.kind,
            **kind.effective.as_dict(),
            declared=LimitValues.of(kind.declared),
            override=LimitValues.of(kind.override),
            running=kind.running,
            waiting=kind.waiting,
            updated_at=kind.updated_at,
        )


class PausedOut(BaseModel):
    """A paused queue (`kind` null) or kind (`queue` null)."""

    queue: str | None
    kind: str | None
    paused_at: datetime

    @classmethod
    def of(cls, paused: Paused) -> PausedOut:
        return cls(queue=paused.queue, kind=paused.kind, paused_at=paused.paused_at)


class LimitsOut(BaseModel):
    """`GET /limits`, and `chit limits --json`."""

    limits: list[LimitOut]
    paused: list[PausedOut]

    @classmethod
    def of(cls, limits: Sequence[KindLimits], pauses: Sequence[Paused]) -> LimitsOut:
        return cls(
            limits=[LimitOut.of(k) for k in limits], paused=[PausedOut.of(p) for p in pauses]
        )


class Cleared(BaseModel):
    kind: str
    cleared: bool = Field(description="false: the kind had no operator override")


class QueuePause(BaseModel):
    queue: str
    paused: bool
    changed: bool = Field(description="false: it was paused (or running) already")


class KindPause(BaseModel):
    kind: str
    paused: bool
    changed: bool = Field(description="false: it was paused (or running) already")
