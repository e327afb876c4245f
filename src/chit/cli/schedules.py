"""`chit schedules` (list), `chit schedules add NAME`, `chit schedules
pause|resume|remove NAME`: schedules (DESIGN.md, "Time") on the database, or
through the HTTP API with `--url` (`RemoteSchedules`), with the
same output and exit codes. Values are checked by `Queue.check_schedule`, as in
code and the API: a bad one gets the same message, exit 2, and nothing is
stored. With `--app` (CHIT_APP) the kind must be one of the app's tasks and the
payload is checked against it; with `--url` the server checks them, with its app."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

from chit.api.schemas.schedules import ScheduleOut, SchedulesOut
from chit.cli import output
from chit.cli.flags import api_key, remote_flags
from chit.cli.loading import Setup
from chit.errors import InvalidRequest, JobNotFound
from chit.queue import Queue
from chit.schedules import Rule, StoredSchedule, check_catch_up, check_name

if TYPE_CHECKING:
    from chit.client import Client


class Schedules(Protocol):
    """What the commands call: the database's (LocalSchedules) or RemoteSchedules."""

    def list_schedules(self) -> list[StoredSchedule]: ...
    def get_schedule(self, name: str) -> StoredSchedule | None: ...
    def add_schedule(
        self,
        name: str,
        kind: str,
        payload: Any,
        *,
        cron: str | None,
        every: str | int | None,
        tz: str,
        catch_up: str,
    ) -> StoredSchedule: ...
    def pause_schedule(self, name: str, paused: bool) -> StoredSchedule | None: ...
    def remove_schedule(self, name: str) -> bool: ...


class LocalSchedules:
    """The store's schedule calls, and an operator's schedule checked by the
    queue (its tasks, when it has an app) before it is stored."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self.store = queue.store

    def list_schedules(self) -> list[StoredSchedule]:
        return self.store.list_schedules()

    def get_schedule(self, name: str) -> StoredSchedule | None:
        return self.store.get_schedule(name)

    def add_schedule(
        self,
        name: str,
        kind: str,
        payload: Any,
        *,
        cron: str | None,
        every: str | int | None,
        tz: str,
        catch_up: str,
    ) -> StoredSchedule:
        schedule = self.queue.check_schedule(
            name, kind, payload, cron=cron, every=every, tz=tz, catch_up=catch_up
        )
        return self.store.declare_schedule(schedule, source="operator")

    def pause_schedule(self, name: str, paused: bool) -> StoredSchedule | None:
        return self.store.pause_schedule(name, paused)

    def remove_schedule(self, name: str) -> bool:
        return self.store.remove_schedule(name)


@contextmanager
def schedules_of(args: argparse.Namespace, setup: Setup) -> Iterator[Schedules]:
    if not args.url:
        yield LocalSchedules(setup.queue())
        return
    from chit.client import Client  # an extra: loaded for --url only

    with Client(args.url, api_key(args)) as client:
        yield RemoteSchedules(client)


def schedules(args: argparse.Namespace, setup: Setup) -> int:
    action = args.schedules_command
    if action == "add":
        return _add(args, setup)
    if action in ("pause", "resume"):
        return _pausing(args, setup, action == "pause")
    if action == "remove":
        return _remove(args, setup)
    with schedules_of(args, setup) as found:
        listed = found.list_schedules()
    if args.json:
        output.print_json(
            SchedulesOut(schedules=[ScheduleOut.of(s) for s in listed]).model_dump(mode="json")
        )
        return 0
    if not listed:
        print(
            "no schedules: declare them with queue.schedule(NAME, KIND, cron=... | every=...) "
            "or chit schedules add NAME --kind KIND --every 30s"
        )
        return 0
    print(table(listed))
    return 0


def table(listed: list[StoredSchedule]) -> str:
    rows = [
        (
            s.name,
            s.kind,
            s.rule.cron if s.rule.cron is not None else str(s.rule),
            s.rule.tz,
            "paused" if s.paused else "no",
            output.when_in(s.next_at, s.rule.tz),
            None if s.last_slot is None else output.when_in(s.last_slot, s.rule.tz),
            s.last_job_state,
        )
        for s in listed
    ]
    headers = ["name", "kind", "rule", "tz", "paused", "next run", "last slot", "last job"]
    return output.table(headers, rows)


def _add(args: argparse.Namespace, setup: Setup) -> int:
    with schedules_of(args, setup) as found:
        payload: Any = None
        if args.payload is not None:
            try:
                payload = json.loads(args.payload)
            except ValueError as e:
                raise InvalidRequest(f"--payload is not JSON: {e}") from None
        if args.every is not None and args.every.strip().isdigit():
            every: Any = int(args.every)
        else:
            every = args.every
        stored = found.add_schedule(
            # Checked here too: the name --url sends is then one path segment, refused as here.
            check_name(args.name),
            args.kind,
            payload,
            cron=args.cron,
            every=every,
            tz=args.tz,
            catch_up=args.catch_up,
        )
    if args.json:
        output.print_json(ScheduleOut.of(stored).model_dump(mode="json"))
    else:
        print(f"{stored.name}: {stored.rule}, kind {stored.kind}; next run {_next(stored)}")
    return 0


def _pausing(args: argparse.Namespace, setup: Setup, pausing: bool) -> int:
    name = check_name(args.name)
    with schedules_of(args, setup) as found:
        before = found.get_schedule(name)
        stored = found.pause_schedule(name, pausing)
    if stored is None or before is None:
        raise InvalidRequest(f"no schedule named {name!r}: chit schedules lists them")
    if args.json:
        output.print_json(ScheduleOut.of(stored).model_dump(mode="json"))
    elif before.paused == pausing:
        print(f"{name} was {'paused' if pausing else 'not paused'} already")
    elif pausing:
        print(f"paused {name}: no job is enqueued until chit schedules resume {name}")
    else:
        print(f"resumed {name}: next run {_next(stored)} (the paused slots are skipped)")
    return 0


def _remove(args: argparse.Namespace, setup: Setup) -> int:
    name = check_name(args.name)
    with schedules_of(args, setup) as found:
        removed = found.remove_schedule(name)
    if args.json:
        output.print_json({"name": name, "removed": removed})
    elif removed:
        print(f"removed {name}; its jobs stay (a worker declaring it in code adds it back)")
    else:
        raise InvalidRequest(f"no schedule named {name!r}: chit schedules lists them")
    return 0


def _next(s: StoredSchedule) -> str:
    """The next run in the schedule's own zone, named: 08:00 CET, as the rule says."""
    shown = output.when_in(s.next_at, s.rule.tz)
    return shown if s.rule.tz == "UTC" else f"{shown} ({s.rule.tz})"


def add_parsers(command: Any, action_common: argparse.ArgumentParser) -> None:
    """`chit schedules` and its actions; `action_common` is main's
    `common_flags(action=True)`."""

    p = command(
        "schedules",
        schedules,
        "schedules with their next run and last job: chit schedules [add|pause|resume|remove]",
    )
    remote_flags(p)
    actions = p.add_subparsers(dest="schedules_command", metavar="ACTION")
    a = actions.add_parser(
        "add", parents=[action_common], help="declare or replace a schedule (cron or every)"
    )
    a.add_argument("name")
    a.add_argument("--kind", required=True, help="the task kind each slot's job runs")
    a.add_argument("--cron", help="a 5-field cron rule, e.g. '0 8 * * *'")
    a.add_argument("--every", help="a period, e.g. 30s, 15m, 1h (at least 1s)")
    a.add_argument("--tz", default="UTC", help="time zone of a cron rule (default UTC)")
    a.add_argument("--payload", help="the jobs' payload as JSON (default {})")
    a.add_argument(
        "--catch-up",
        default="latest",
        help="after downtime: latest (the last missed slot, default), all, or none",
    )
    remote_flags(a, action=True)
    for verb, text in (
        ("pause", "enqueue nothing for a schedule until resumed"),
        ("resume", "enqueue a paused schedule's slots again, from the next one"),
        ("remove", "delete a schedule (its jobs stay)"),
    ):
        a = actions.add_parser(verb, parents=[action_common], help=text)
        a.add_argument("name")
        remote_flags(a, action=True)


class RemoteSchedules:
    """The schedule calls `chit schedules` makes (chit.cli.schedules.Schedules),
    through the HTTP API. An unknown name answers as the store does (None,
    False), so the command says what it says on the database; the server checks
    what is added, with its app."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def list_schedules(self) -> list[StoredSchedule]:
        return [_stored(s) for s in self.client.schedules().schedules]

    def get_schedule(self, name: str) -> StoredSchedule | None:
        try:
            return _stored(self.client.get_schedule(name))
        except JobNotFound as e:  # the client's APINotFound
            _raise_unless_unknown(e)
            return None

    def add_schedule(
        self,
        name: str,
        kind: str,
        payload: Any,
        *,
        cron: str | None,
        every: str | int | None,
        tz: str,
        catch_up: str,
    ) -> StoredSchedule:
        put = self.client.put_schedule(
            name, kind, payload, cron=cron, every=every, tz=tz, catch_up=catch_up
        )
        return _stored(put)

    def pause_schedule(self, name: str, paused: bool) -> StoredSchedule | None:
        act = self.client.pause_schedule if paused else self.client.resume_schedule
        try:
            return _stored(act(name))
        except JobNotFound as e:  # the client's APINotFound
            _raise_unless_unknown(e)
            return None

    def remove_schedule(self, name: str) -> bool:
        try:
            return self.client.remove_schedule(name).removed
        except JobNotFound as e:  # the client's APINotFound
            _raise_unless_unknown(e)
            return False


def _raise_unless_unknown(error: JobNotFound) -> None:
    """The server's 404 for a schedule it does not have is the store's None;
    another 404 (a URL that is no chit API, say) is an error."""
    if getattr(error, "code", None) != "schedule_not_found":
        raise error


def _stored(s: ScheduleOut) -> StoredSchedule:
    return StoredSchedule(
        name=s.name,
        kind=s.kind,
        payload=s.payload,
        rule=Rule(cron=s.cron, every=s.every, tz=s.tz),
        catch_up=check_catch_up(s.catch_up),
        paused=s.paused,
        next_at=s.next_at,
        last_slot=s.last_slot,
        last_job_id=s.last_job_id,
        last_job_state=None if s.last_job_state is None else s.last_job_state.value,
        source=s.source,
        created_at=s.created_at,
        updated_at=s.updated_at,
    )
