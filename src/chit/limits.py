"""Flow control as plain data: a kind's limits, how they read and print, and
what `chit limits` shows (see DESIGN.md, "Flow control").

`Rate.parse` and `Limits.checked` are the one place a limit is validated:
`@queue.task`, the CLI and the HTTP API refuse the same values with the same
message."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from typing import Any

from chit.bounds import CONCURRENCY_MAX, COST_MAX, RATE_MAX

PERIODS = {"s": 1.0, "m": 60.0, "h": 3600.0}
_UNIT = {seconds: unit for unit, seconds in PERIODS.items()}
# Leading zeros are read as nothing (the schema's pattern allows them).
_RATE = re.compile(r"\s*0*(\d{1,13})\s*/\s*(s|m|h)\s*")


class LimitError(ValueError):
    """A limit that cannot be: the message says what is wrong and what would do."""


@dataclass(frozen=True, slots=True)
class Rate:
    """At most `count` starts in any window of `seconds` (1, 60 or 3600)."""

    count: int
    seconds: float

    @classmethod
    def parse(cls, text: str, most: int = RATE_MAX) -> Rate:
        """`most`: the largest count (COST_MAX for a cost_rate, whose count is
        cost, not starts)."""
        if not isinstance(text, str):
            raise LimitError(f"a rate is text like '10/s', '600/m' or '1000/h', not {text!r}")
        match = _RATE.fullmatch(text)
        if match is None:
            raise LimitError(
                f"rate {text[:50]!r} is not N/s, N/m or N/h (for example 10/s, 600/m, 1000/h)"
            )
        return cls(int(match.group(1)), PERIODS[match.group(2)]).checked(most)

    def checked(self, most: int = RATE_MAX) -> Rate:
        if type(self.count) is not int or not 1 <= self.count <= most:
            what = "starts" if most == RATE_MAX else "cost"
            raise LimitError(f"a rate allows 1 to {most:,} {what} per period, not {self.count}")
        if self.seconds not in _UNIT:
            raise LimitError(f"a rate's period is 1 s, 1 m or 1 h, not {self.seconds} seconds")
        return self

    def __str__(self) -> str:
        return f"{self.count}/{_UNIT[self.seconds]}"


def _concurrency(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if type(value) is float and value.is_integer():  # JSON Schema's integer: 3.0 is 3
        value = int(value)
    if type(value) is not int or not 1 <= value <= CONCURRENCY_MAX:
        raise LimitError(
            f"{name} is a whole number from 1 to {CONCURRENCY_MAX:,}, not {value!r}"
            " (to stop a kind, pause it: chit pause --kind KIND)"
        )
    return value


def _rate(value: Any, most: int = RATE_MAX) -> Rate | None:
    if value is None or isinstance(value, Rate):
        return None if value is None else value.checked(most)
    return Rate.parse(value, most)


@dataclass(frozen=True, slots=True)
class Limits:
    """A kind's limits; None means no limit of that sort. `key_*` bound each
    concurrency key of the kind on its own."""

    concurrency: int | None = None
    rate: Rate | None = None
    key_concurrency: int | None = None
    key_rate: Rate | None = None
    # Budgets: the sum of the `cost` of the attempts started in any window, of
    # the kind and of each key of it (DESIGN.md, "Long AI tasks").
    cost_rate: Rate | None = None
    key_cost_rate: Rate | None = None

    @classmethod
    def checked(
        cls,
        concurrency: Any = None,
        rate: Any = None,
        key_concurrency: Any = None,
        key_rate: Any = None,
        cost_rate: Any = None,
        key_cost_rate: Any = None,
    ) -> Limits:
        """Limits from what a caller wrote (rates as text or Rate), or LimitError."""
        try:
            cost = _rate(cost_rate, COST_MAX), _rate(key_cost_rate, COST_MAX)
        except LimitError as e:
            raise LimitError(f"cost_rate: {e}") from None
        return cls(
            _concurrency("concurrency", concurrency),
            _rate(rate),
            _concurrency("key_concurrency", key_concurrency),
            _rate(key_rate),
            *cost,
        )

    def most_cost(self) -> int | None:
        """The largest cost one job of the kind may have: a costlier one could never start."""
        counts = [r.count for r in (self.cost_rate, self.key_cost_rate) if r is not None]
        return min(counts, default=None)

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) is not None for f in fields(self))

    def over(self, base: Limits) -> Limits:
        """These limits where set, `base`'s elsewhere: an operator's over the code's."""
        mine = {f.name: getattr(self, f.name) for f in fields(self)}
        return replace(base, **{name: v for name, v in mine.items() if v is not None})

    def as_dict(self) -> dict[str, Any]:
        """As JSON shows it: rates as text."""
        return {
            f.name: (str(v) if isinstance(v, Rate) else v)
            for f in fields(self)
            for v in [getattr(self, f.name)]
        }


@dataclass(frozen=True, slots=True)
class KindLimits:
    """One kind's limits as `chit limits` and GET /limits show them."""

    kind: str
    declared: Limits = field(default_factory=Limits)  # by code, when a worker started
    override: Limits = field(default_factory=Limits)  # by an operator, until cleared
    running: int = 0  # jobs of the kind running now (held-ahead ones included)
    waiting: int = 0  # queued and due, not running
    updated_at: datetime | None = None

    @property
    def effective(self) -> Limits:
        return self.override.over(self.declared)


@dataclass(frozen=True, slots=True)
class Paused:
    """A paused queue (`kind=None`) or kind (`queue=None`)."""

    queue: str | None
    kind: str | None
    paused_at: datetime
