"""Schedules on both backends (DESIGN.md, "Time"): declared, listed, paused,
removed; the scheduler's ticks at given times (`now=`) enqueue each slot once,
however many schedulers run, with each catch-up policy after downtime, and
across daylight-saving changes in Europe/Paris; bad input stores nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pydantic
import pytest

import chit
from chit.errors import ConfigError, InvalidRequest, UnknownKind
from chit.jobs import JobFilter
from chit.schedules import Rule, plan, slot_key
from chit.store import FullStore
from chit.worker.scheduler import Scheduler

T0 = datetime(2026, 3, 2, 12, 0, 0, tzinfo=UTC)


def _queue(store: Any) -> chit.Queue:
    queue = chit.Queue(settings=chit.Settings(database_url="sqlite:///unused.db"))
    queue.use_store(store)

    @queue.task("digest")
    def digest(job: chit.JobContext, body: dict[str, Any]) -> None: ...

    return queue


@pytest.fixture
def store(backend: Any) -> FullStore:
    opened: FullStore = backend.open()
    return opened


def _slots(store: FullStore, name: str) -> list[str]:
    """The slots of the schedule's jobs, read from their keys."""
    rows = store.list(JobFilter(kind="digest"), limit=10_000).jobs
    prefix = f"schedule:{name}:"
    return sorted(
        j.idempotency_key.removeprefix(prefix)
        for j in rows
        if j.idempotency_key and j.idempotency_key.startswith(prefix)
    )


def _declare(queue: chit.Queue, name: str, now: datetime, **rule: Any) -> None:
    schedule = queue.check_schedule(name, "digest", {"list": "all"}, **rule)
    queue.store.declare_schedule(schedule, now=now)


def test_a_schedule_is_declared_listed_paused_resumed_and_removed(store: FullStore) -> None:
    queue = _queue(store)
    _declare(queue, "nightly", T0 + timedelta(seconds=30), cron="0 8 * * *", tz="Europe/Paris")
    stored = store.get_schedule("nightly")
    assert stored is not None
    assert (stored.kind, stored.payload, stored.catch_up, stored.paused) == (
        "digest",
        {"list": "all"},
        "latest",
        False,
    )
    assert stored.rule == Rule(cron="0 8 * * *", tz="Europe/Paris")
    assert stored.next_at == datetime(2026, 3, 3, 7, 0, tzinfo=UTC)  # 08:00 CET
    assert stored.last_slot is None and stored.last_job_state is None
    assert [s.name for s in store.list_schedules()] == ["nightly"]

    paused = store.pause_schedule("nightly", True)
    assert paused is not None and paused.paused
    resumed = store.pause_schedule("nightly", False, now=T0 + timedelta(days=3))
    assert resumed is not None and not resumed.paused
    # Resumed from the next slot: the pause's slots are not caught up.
    assert resumed.next_at == datetime(2026, 3, 6, 7, 0, tzinfo=UTC)
    assert store.pause_schedule("unknown", True) is None

    assert store.remove_schedule("nightly") is True
    assert store.remove_schedule("nightly") is False
    assert store.get_schedule("nightly") is None and store.list_schedules() == []


def test_declaring_again_keeps_the_next_slot_unless_the_rule_changed(store: FullStore) -> None:
    queue = _queue(store)
    _declare(queue, "s", T0, every="1m")
    _declare(queue, "s", T0 + timedelta(minutes=10), every="1m")  # a worker restarted
    stored = store.get_schedule("s")
    assert stored is not None and stored.next_at == T0  # the missed slots stay due
    _declare(queue, "s", T0 + timedelta(minutes=10, seconds=5), every="2m")
    stored = store.get_schedule("s")
    assert stored is not None and stored.next_at == T0 + timedelta(minutes=12)
    assert stored.rule == Rule(every=120)


def test_every_second_enqueues_each_slot_once_with_several_schedulers(store: FullStore) -> None:
    queues = [_queue(store) for _ in range(3)]
    _declare(queues[0], "tick", T0, every="1s")
    schedulers = [Scheduler(store, q) for q in queues]
    for step in range(8):
        at = T0 + timedelta(seconds=step, milliseconds=20)
        for scheduler in schedulers:  # each worker ticks at the same instant
            scheduler.run_once(at)
    assert _slots(store, "tick") == [
        (T0 + timedelta(seconds=n)).strftime("%Y-%m-%dT%H:%M:%SZ") for n in range(8)
    ]
    stored = store.get_schedule("tick")
    assert stored is not None and stored.last_slot == T0 + timedelta(seconds=7)
    assert stored.last_job_state == "queued"
    assert stored.next_at == T0 + timedelta(seconds=8)


def test_an_idle_tick_enqueues_nothing_and_says_when_to_look(store: FullStore) -> None:
    queue = _queue(store)
    _declare(queue, "s", T0, every="1m")
    tick = Scheduler(store, queue).run_once(T0 - timedelta(milliseconds=400))
    assert (tick.enqueued, tick.schedules) == (0, 0)
    assert 0.4 <= tick.wait <= 0.41
    assert _slots(store, "s") == []


@pytest.mark.parametrize(
    ("catch_up", "expected"),
    [
        ("latest", ["12:00", "12:05", "12:06"]),
        ("all", ["12:00", "12:01", "12:02", "12:03", "12:04", "12:05", "12:06"]),
        ("none", ["12:00", "12:06"]),
    ],
)
def test_a_worker_down_five_minutes_catches_up_per_policy(
    store: FullStore, catch_up: str, expected: list[str]
) -> None:
    queue = _queue(store)
    _declare(queue, "minutely", T0 - timedelta(seconds=30), cron="* * * * *", catch_up=catch_up)
    scheduler = Scheduler(store, queue)
    scheduler.run_once(T0 + timedelta(seconds=1))  # 12:00 on time
    # Down from 12:00:30 to 12:05:30: 12:01 to 12:05 were missed.
    scheduler.run_once(T0 + timedelta(minutes=5, seconds=30))
    scheduler.run_once(T0 + timedelta(minutes=6, seconds=2))  # back on time
    assert [s[11:16] for s in _slots(store, "minutely")] == expected


def test_catch_up_all_is_bounded_per_tick_and_resumes(store: FullStore) -> None:
    queue = _queue(store)
    _declare(queue, "s", T0, every="1s", catch_up="all")
    scheduler = Scheduler(store, queue)
    later = T0 + timedelta(seconds=1500)
    first = scheduler.run_once(later)
    assert first.enqueued == 1000
    second = scheduler.run_once(later)
    assert second.enqueued == 501
    assert len(_slots(store, "s")) == 1501


def test_a_long_downtime_of_a_minutely_rule_catches_up_latest_cheaply(store: FullStore) -> None:
    queue = _queue(store)
    _declare(queue, "s", T0, cron="*/5 * * * *")
    Scheduler(store, queue).run_once(T0 + timedelta(days=365, minutes=7))
    assert _slots(store, "s") == ["2027-03-02T12:05:00Z"]


def _paris_slots(cron: str, start: datetime, end: datetime) -> list[str]:
    rule = Rule(cron=cron, tz="Europe/Paris")
    slots, slot = [], rule.first_from(start)
    while slot < end:
        slots.append(slot.strftime("%m-%dT%H:%MZ"))
        slot = rule.after(slot)
    return slots


def test_daylight_saving_changes_in_paris_give_the_expected_slots(store: FullStore) -> None:
    # Spring forward, 29 March 2026: 02:00 CET becomes 03:00 CEST.
    spring = datetime(2026, 3, 28, 12, tzinfo=UTC), datetime(2026, 3, 31, 12, tzinfo=UTC)
    # 02:30 does not exist that day: it runs once, at the change (03:00 CEST, 01:00Z).
    assert _paris_slots("30 2 * * *", *spring) == ["03-29T01:00Z", "03-30T00:30Z", "03-31T00:30Z"]
    # Fall back, 25 October 2026: 03:00 CEST becomes 02:00 CET; 02:30 happens twice.
    autumn = datetime(2026, 10, 24, 12, tzinfo=UTC), datetime(2026, 10, 27, 12, tzinfo=UTC)
    assert _paris_slots("30 2 * * *", *autumn) == ["10-25T00:30Z", "10-26T01:30Z", "10-27T01:30Z"]
    # An hourly rule runs every hour of the wall clock: the repeated 02:00 twice,
    # the skipped one not at all; every slot an hour apart in UTC.
    night = datetime(2026, 10, 24, 23, tzinfo=UTC), datetime(2026, 10, 25, 3, tzinfo=UTC)
    assert _paris_slots("0 * * * *", *night) == [
        "10-24T23:00Z",
        "10-25T00:00Z",
        "10-25T01:00Z",
        "10-25T02:00Z",
    ]
    spring_night = datetime(2026, 3, 28, 23, tzinfo=UTC), datetime(2026, 3, 29, 3, tzinfo=UTC)
    assert _paris_slots("0 * * * *", *spring_night) == [
        "03-28T23:00Z",
        "03-29T00:00Z",
        "03-29T01:00Z",
        "03-29T02:00Z",
    ]

    # The scheduler enqueues exactly those, ticking every 10 minutes through both nights.
    queue = _queue(store)
    for name, (start, end) in {"spring": spring, "autumn": autumn}.items():
        _declare(queue, name, start, cron="30 2 * * *", tz="Europe/Paris")
        scheduler = Scheduler(store, queue)
        at = start
        while at < end:
            scheduler.run_once(at)
            at += timedelta(minutes=10)
        store.remove_schedule(name)  # its jobs stay
    assert _slots(store, "spring") == [
        "2026-03-29T01:00:00Z",
        "2026-03-30T00:30:00Z",
        "2026-03-31T00:30:00Z",
    ]
    assert _slots(store, "autumn") == [
        "2026-10-25T00:30:00Z",
        "2026-10-26T01:30:00Z",
        "2026-10-27T01:30:00Z",
    ]


def test_a_paused_schedule_enqueues_nothing(store: FullStore) -> None:
    queue = _queue(store)
    _declare(queue, "s", T0, every="1s")
    store.pause_schedule("s", True)
    Scheduler(store, queue).run_once(T0 + timedelta(seconds=5))
    assert _slots(store, "s") == []


def test_a_worker_without_the_kind_leaves_the_schedule_to_others(store: FullStore) -> None:
    queue = _queue(store)
    _declare(queue, "s", T0, every="1s")
    other = chit.Queue(settings=chit.Settings(database_url="sqlite:///unused.db"))
    other.use_store(store)

    @other.task("else")
    def handler(job: chit.JobContext, body: dict[str, Any]) -> None: ...

    assert Scheduler(store, other).run_once(T0 + timedelta(seconds=5)).schedules == 0
    assert _slots(store, "s") == []
    assert Scheduler(store, queue).run_once(T0 + timedelta(seconds=5)).enqueued == 1


def test_the_slot_key_and_plan_are_the_same_everywhere() -> None:
    assert slot_key("n", T0) == "schedule:n:2026-03-02T12:00:00Z"
    rule = Rule(every=900)  # counted from 1970: :00, :15, :30, :45
    assert rule.first_from(T0 + timedelta(minutes=1)) == T0 + timedelta(minutes=15)
    assert plan(rule, T0, T0 - timedelta(seconds=1), "all").slots == []


def test_queue_schedule_declares_in_code_and_the_worker_writes_it(store: FullStore) -> None:
    queue = _queue(store)
    queue.schedule("heartbeat", "digest", {"list": "x"}, every="30s")
    assert store.list_schedules() == []  # nothing written at declaration
    [stored] = queue.declare_schedules()
    assert (stored.name, stored.source, stored.rule) == ("heartbeat", "code", Rule(every=30))
    with pytest.raises(ConfigError, match="declared twice"):
        queue.schedule("heartbeat", "digest", every="30s")


def test_a_schedule_of_a_kind_without_a_task_is_refused(store: FullStore) -> None:
    queue = _queue(store)
    with pytest.raises(UnknownKind):
        queue.schedule("s", "nope", every="1m")
    # Declared before its task: refused when the worker writes it.
    early = chit.Queue(settings=chit.Settings(database_url="sqlite:///unused.db"))
    early.use_store(store)
    early.schedule("later", "digest", every="1m")
    with pytest.raises(ConfigError, match="no task in this app"):
        early.declare_schedules()
    with pytest.raises(ConfigError, match="no task in this app"):
        chit.Worker(early, store=store)
    assert store.list_schedules() == []


class Body(pydantic.BaseModel):
    n: int


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"cron": "61 * * * *"}, "does not parse"),
        ({"cron": "0 8 * *"}, "expected 5 fields"),
        ({"cron": "0 0 30 2 *"}, "does not parse"),
        ({"cron": "* * * * * *"}, "expected 5 fields"),
        ({"every": "0s"}, "at least 1s"),
        ({"every": "1.5s"}, "whole number"),
        ({"every": "soon"}, "not a duration"),
        ({"every": 0}, "at least 1s"),
        ({}, "exactly one of cron= and every="),
        ({"cron": "* * * * *", "every": "1m"}, "exactly one"),
        ({"cron": "* * * * *", "tz": "Mars/Olympus"}, "unknown time zone"),
        ({"cron": "* * * * *", "tz": "../etc/passwd"}, "unknown time zone"),
        ({"every": "1m", "tz": "Europe/Paris"}, "periods are counted in UTC"),
        ({"every": "1m", "catch_up": "some"}, "catch_up must be"),
        ({"every": "1m", "name": "x" * 201}, "1 to 200 characters"),
        ({"every": "1m", "name": "a/b"}, "letters, digits"),
        ({"every": "1m", "name": ""}, "1 to 200"),
        ({"every": "1m", "payload": {"n": "many"}}, "Input should be a valid integer"),
        ({"every": "1m", "payload": [1]}, "Input should be a valid dictionary"),
    ],
)
def test_bad_schedules_are_refused_and_nothing_is_stored(
    store: FullStore, arguments: dict[str, Any], message: str
) -> None:
    queue = chit.Queue(settings=chit.Settings(database_url="sqlite:///unused.db"))
    queue.use_store(store)

    @queue.task("typed", payload=Body)
    def typed(job: chit.JobContext, body: Body) -> None: ...

    arguments = dict(arguments)  # the parameters are shared by both backends
    name = arguments.pop("name", "s")
    payload = arguments.pop("payload", {"n": 1})
    with pytest.raises(InvalidRequest, match=message):
        queue.schedule(name, "typed", payload, **arguments)
    assert queue.schedules == {}
    queue.declare_schedules()
    assert store.list_schedules() == []


BEFORE_1970 = datetime(1969, 12, 31, 23, 0, tzinfo=UTC)


def test_a_next_slot_before_1970_is_a_slot_not_none(store: FullStore) -> None:
    # Redis read a negative time as its "no schedule" mark: the scheduler
    # then saw nothing to do and never fired it.
    queue = _queue(store)
    stored = store.declare_schedule(
        queue.check_schedule("early", "digest", {}, every="60s"), now=BEFORE_1970
    )
    assert stored.next_at < datetime(1970, 1, 1, tzinfo=UTC)
    assert store.schedule_clock(["digest"], now=BEFORE_1970)[1] == stored.next_at
    tick = Scheduler(store, queue).run_once(BEFORE_1970 + timedelta(minutes=5, seconds=1))
    assert tick.enqueued == 1


def test_a_kind_named_twice_finds_its_due_schedules_once(store: FullStore) -> None:
    queue = _queue(store)
    store.declare_schedule(queue.check_schedule("a", "digest", {}, every="60s"), now=T0)
    due = store.due_schedules(["digest", "digest"], 10, now=T0 + timedelta(minutes=5))
    assert [schedule.name for schedule, _ in due] == ["a"]
