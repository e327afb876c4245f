"""What the dashboard says about flow control: the overview's Limits panel,
the paused badges, and why a queued job is not running yet.

Limits and pauses belong to kinds and queues, which the app's code names for
every tenant, so every session sees them. Running and waiting counts are
another matter: `store.limits()` counts across tenants (a limit holds across
them all), and another tenant's activity is not a tenant-bound key's to see.
So only a session that sees every tenant (`*` keys, an open API) gets those
counts; a tenant-bound one gets its own tenant's running and queued jobs from
the overview's counts, and a job page that says a slot is taken without
saying by how many.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import datetime

from chit.jobs import Job, State
from chit.limits import KindLimits, Limits, Paused, Rate

LABELS = {
    "concurrency": "concurrency",
    "rate": "rate",
    "key_concurrency": "per-key concurrency",
    "key_rate": "per-key rate",
    "cost_rate": "cost rate",
    "key_cost_rate": "per-key cost rate",
}


@dataclass(frozen=True, slots=True)
class Setting:
    """One limit of a kind as the panel shows it: the value in force, and
    whether an operator set it over the code's (shown beside it)."""

    value: int | Rate | None
    by_operator: bool
    code_value: int | Rate | None

    def __str__(self) -> str:
        return "" if self.value is None else str(self.value)


@dataclass(frozen=True, slots=True)
class LimitRow:
    kind: str
    settings: dict[str, Setting]  # by Limits field name
    running: int | None  # None: not this session's to see (see the module docstring)
    waiting: int | None
    paused: bool

    @property
    def overridden(self) -> bool:
        return any(s.by_operator for s in self.settings.values())


def limit_rows(
    limits: Sequence[KindLimits], pauses: Sequence[Paused], every_tenant: bool
) -> list[LimitRow]:
    paused_kinds = {p.kind for p in pauses if p.kind is not None}
    rows = []
    for k in limits:
        settings = {
            f.name: Setting(
                getattr(k.effective, f.name),
                getattr(k.override, f.name) is not None,
                getattr(k.declared, f.name),
            )
            for f in fields(Limits)
        }
        rows.append(
            LimitRow(
                k.kind,
                settings,
                k.running if every_tenant else None,
                k.waiting if every_tenant else None,
                k.kind in paused_kinds,
            )
        )
    return rows


def applying(limits: Limits) -> str:
    """The limits in force, in words: "concurrency 3, rate 10/s"."""
    return ", ".join(
        f"{LABELS[f.name]} {value}"
        for f in fields(Limits)
        if (value := getattr(limits, f.name)) is not None
    )


def waiting_on(
    job: Job,
    limits: Sequence[KindLimits],
    pauses: Sequence[Paused],
    now: datetime,
    every_tenant: bool,
) -> list[str]:
    """Why a queued, due job is held back, as far as the store's figures say:
    a pause of its queue or kind, or its kind's concurrency all taken. Empty
    for any other job, and when nothing holds it (a worker will take it). A
    rate or a per-key limit may hold it too; the job page lists those as the
    limits that apply, since `limits()` counts neither starts nor keys."""
    if job.state is not State.QUEUED or job.run_at > now:
        return []
    reasons = [
        f"waiting: queue {p.queue} is paused"
        if p.queue is not None
        else f"waiting: kind {p.kind} is paused"
        for p in pauses
        if (p.queue is not None and p.queue == job.queue)
        or (p.kind is not None and p.kind == job.kind)
    ]
    mine = next((k for k in limits if k.kind == job.kind), None)
    cap = None if mine is None else mine.effective.concurrency
    if mine is not None and cap is not None and mine.running >= cap:
        taken = f"{mine.running:,} running" if every_tenant else "every slot taken"
        reasons.append(f"waiting on a limit: concurrency {cap:,}, {taken}")
    return reasons
