"""Schedules (DESIGN.md, "Time"): a rule's slots, and which of them a tick enqueues.

A slot is an instant in UTC, whole seconds. Its job's idempotency key is
`schedule:{name}:{slot}` with the slot written `YYYY-MM-DDTHH:MM:SSZ`: every
worker computes the same slots from the same rule, so however many of them
enqueue one, the key makes it one job.

- `cron="m h dom mon dow"` (5 fields, parsed by cronsim) in the schedule's time
  zone. Daylight-saving changes follow cronsim (as cronie and Debian's cron do):
  a time the clocks skip runs once, at the moment of the change (02:30 on a
  spring-forward day runs at 03:00); a time they repeat runs once, at its first
  occurrence, unless the hour field is `*` (then each hour of the wall clock
  runs, both 02:00 included).
- `every=` a whole number of seconds (at least 1): slots are the multiples of it
  counted from 1970-01-01T00:00:00Z, so `every="15m"` runs at :00, :15, :30
  and :45 of each hour. The time zone must stay UTC.

Nothing here reads a clock or the database: the scheduler gives the time.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from chit.durations import MAX_DURATION_SECONDS, duration
from chit.errors import InvalidRequest

CatchUp = Literal["latest", "all", "none"]
CATCH_UPS: tuple[str, ...] = ("latest", "all", "none")
# A schedule's name: it goes in job keys and in /schedules/{name}.
NAME_MAX = 200
NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9_.:-]*"
_NAME = re.compile(NAME_PATTERN)
# A slot this late is missed (a worker down, or none running): catch_up decides.
# Less late, it is on time, whatever the policy: a tick a little late (a busy
# worker, a slow write) still enqueues it.
ON_TIME_SECONDS = 10.0
# catch_up="all": slots one tick enqueues for one schedule at most; the rest
# follow on the next ticks, a second apart.
CATCH_UP_MAX = 1000
# Walking a cron rule forward further than this to find the latest slot: ask
# cronsim for it backwards instead (a year of a minutely rule is 525,600 slots).
_WALK_MAX = 2 * CATCH_UP_MAX
_SECOND = timedelta(seconds=1)
# Slots of the repeated hour cronsim may give before the start (a minutely rule: 60).
_FOLD_STEPS = 200


def slot_text(slot: datetime) -> str:
    return slot.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def slot_key(name: str, slot: datetime) -> str:
    """The idempotency key of a slot's job."""
    return f"schedule:{name}:{slot_text(slot)}"


def key_prefix(name: str) -> str:
    """What every key of the schedule's jobs starts with."""
    return f"schedule:{name}:"


@dataclass(frozen=True)
class Rule:
    """A checked cron rule (with its time zone) or period."""

    cron: str | None = None
    every: int | None = None  # seconds
    tz: str = "UTC"

    def __str__(self) -> str:
        if self.cron is not None:
            return self.cron if self.tz == "UTC" else f"{self.cron} ({self.tz})"
        return f"every {_seconds_text(self.every or 0)}"

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.tz)

    def first_from(self, t: datetime) -> datetime:
        """The first slot at or after `t`."""
        if self.every is not None:
            micros = (t.astimezone(UTC) - EPOCH) // timedelta(microseconds=1)
            seconds = -(-micros // 1_000_000)  # the whole second at or after t
            return _from_epoch(-(-seconds // self.every) * self.every)
        assert self.cron is not None
        start = t.astimezone(self.zone) - timedelta(microseconds=1)
        return _first(CronSim(self.cron, start), lambda slot: slot >= t)

    def after(self, slot: datetime) -> datetime:
        """The slot following `slot` (a slot of this rule, or any time)."""
        return self.first_from(slot.replace(microsecond=0) + _SECOND)

    def latest(self, t: datetime) -> datetime:
        """The last slot at or before `t`."""
        if self.every is not None:
            return _from_epoch(_epoch(t) // self.every * self.every)
        assert self.cron is not None
        start = t.astimezone(self.zone).replace(microsecond=0) + _SECOND
        slot = _first(CronSim(self.cron, start, reverse=True), lambda slot: slot <= t)
        # Backwards through an hour the clocks repeat, cronsim may land an hour
        # early: forwards from there (it is right that way) to the last one.
        for _ in range(_FOLD_STEPS):
            following = self.after(slot)
            if following > t:
                return slot
            slot = following
        raise CronSimError("no slot found")


@dataclass(frozen=True)
class Move:
    """A schedule moved on by a tick: from the next slot it read (`seen`)."""

    name: str
    seen: datetime
    next_at: datetime
    last_slot: datetime | None = None
    last_job_id: str | None = None


@dataclass(frozen=True)
class Plan:
    """What one tick does for one due schedule: the slots to enqueue, in order,
    and the first slot after them (the schedule's next_at)."""

    slots: list[datetime]
    next_at: datetime


def plan(rule: Rule, next_at: datetime, now: datetime, catch_up: str) -> Plan:
    """The slots due at `now` of a schedule whose first unfired slot is
    `next_at`: `latest` enqueues the last of them, `all` each (at most
    CATCH_UP_MAX a tick), `none` those not yet ON_TIME_SECONDS late (missed ones
    are skipped). A schedule not due yet plans nothing."""
    if next_at > now:
        return Plan([], next_at)
    if catch_up == "all":
        slots = [next_at]
        while len(slots) < CATCH_UP_MAX:
            following = rule.after(slots[-1])
            if following > now:
                return Plan(slots, following)
            slots.append(following)
        return Plan(slots, rule.after(slots[-1]))
    last, following = _latest_since(rule, next_at, now)
    if catch_up == "none" and (now - last).total_seconds() > ON_TIME_SECONDS:
        return Plan([], following)
    return Plan([last], following)


def _latest_since(rule: Rule, next_at: datetime, now: datetime) -> tuple[datetime, datetime]:
    """The last slot in [next_at, now] (next_at is one, and <= now), and the one after it."""
    if rule.every is not None:
        last = rule.latest(now)
        return last, last + timedelta(seconds=rule.every)
    slot = next_at
    for _ in range(_WALK_MAX):
        following = rule.after(slot)
        if following > now:
            return slot, following
        slot = following
    last = max(slot, rule.latest(now))
    return last, rule.after(last)


def recent_slots(rule: Rule, last_slot: datetime | None, count: int) -> list[datetime]:
    """The last `count` slots up to `last_slot`, newest first: where a
    schedule's recent jobs are (slots a policy or a pause skipped have none)."""
    slots: list[datetime] = []
    slot = last_slot
    while slot is not None and len(slots) < count:
        slots.append(slot)
        try:
            slot = rule.latest(slot - _SECOND)
        except (CronSimError, StopIteration):
            break
        if slot < EPOCH:
            break
    return slots


# Checking what people give


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not 1 <= len(name) <= NAME_MAX or not _NAME.fullmatch(name):
        raise InvalidRequest(
            f"a schedule name must be 1 to {NAME_MAX} characters: letters, digits and _ . : -"
            ", starting with a letter or digit"
        )
    return name


def check_catch_up(value: Any) -> CatchUp:
    if value not in CATCH_UPS:
        raise InvalidRequest(f"catch_up must be 'latest', 'all' or 'none', not {value!r}")
    return value


def check_rule(cron: Any = None, every: Any = None, tz: Any = "UTC") -> Rule:
    """A Rule from exactly one of `cron` (5 fields) and `every` ("30s", "15m",
    or seconds), in the time zone `tz` (an IANA name; cron rules only)."""
    if (cron is None) == (every is None):
        raise InvalidRequest("give a schedule exactly one of cron= and every=")
    zone = _check_tz(tz)
    if every is not None:
        if zone != "UTC":
            raise InvalidRequest(
                f"tz={zone!r} with every=: periods are counted in UTC; give a cron rule "
                "to run at times of a time zone"
            )
        return Rule(every=_check_every(every))
    if not isinstance(cron, str) or len(cron.split()) != 5:
        raise InvalidRequest(
            f"cron rule {cron!r}: expected 5 fields (minute hour day-of-month month "
            "day-of-week), e.g. '0 8 * * *'"
        )
    text = " ".join(cron.split())
    try:
        rule = Rule(cron=text, tz=zone)
        rule.first_from(datetime.now(UTC))  # a rule that can never run, e.g. 30 February
    except (CronSimError, StopIteration, ValueError) as e:
        raise InvalidRequest(f"cron rule {cron!r} does not parse: {e or 'it never runs'}") from None
    return rule


def _check_tz(tz: Any) -> str:
    if not isinstance(tz, str) or not tz:
        raise InvalidRequest(f"tz must be a time zone name such as 'Europe/Paris', not {tz!r}")
    try:
        ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidRequest(
            f"unknown time zone {tz!r}: use an IANA name such as 'Europe/Paris' or 'UTC'"
        ) from None
    return tz


def _check_every(every: Any) -> int:
    if isinstance(every, str):
        try:
            seconds = duration(every)
        except ValueError as e:
            raise InvalidRequest(f"every={every!r}: {e}") from None
    elif isinstance(every, int | float) and not isinstance(every, bool):
        seconds = float(every)
    else:
        raise InvalidRequest(f"every must be a duration such as '30s' or '15m', not {every!r}")
    if not 1 <= seconds <= MAX_DURATION_SECONDS or seconds != int(seconds):
        raise InvalidRequest(
            f"every={every!r}: a schedule's period is a whole number of seconds, at least 1s"
        )
    return int(seconds)


@dataclass(frozen=True)
class Schedule:
    """A checked schedule, as code, the CLI or the API declares it."""

    name: str
    kind: str
    payload: dict[str, Any] = field(default_factory=dict)
    rule: Rule = field(default_factory=lambda: Rule(every=60))
    catch_up: CatchUp = "latest"


@dataclass(frozen=True)
class StoredSchedule:
    """A row of chit_schedules, with the state of its last job."""

    name: str
    kind: str
    payload: dict[str, Any]
    rule: Rule
    catch_up: CatchUp
    paused: bool
    next_at: datetime  # the first slot not enqueued yet
    last_slot: datetime | None
    last_job_id: str | None
    last_job_state: str | None  # None: no job yet, or pruned
    source: str  # "code" (queue.schedule) or "operator" (CLI, API)
    created_at: datetime
    updated_at: datetime


def _first(slots: CronSim, wanted: Callable[[datetime], bool]) -> datetime:
    """The first of cronsim's slots on the wanted side of the start: started
    inside an hour the clocks repeat, cronsim may first give one before it."""
    for _ in range(_FOLD_STEPS):
        slot = _utc(next(slots))
        if wanted(slot):
            return slot
    raise CronSimError("no slot found")


def _epoch(t: datetime) -> int:
    """Whole seconds since 1970 at or before `t`."""
    return int((t.astimezone(UTC) - EPOCH) // _SECOND)


def _from_epoch(seconds: int) -> datetime:
    return EPOCH + timedelta(seconds=seconds)


def _utc(t: datetime) -> datetime:
    return t.astimezone(UTC)


def _seconds_text(seconds: int) -> str:
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
