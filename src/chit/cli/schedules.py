"""`chit schedules` (list), `chit schedules add NAME`, `chit schedules
pause|resume|remove NAME`: schedules (DESIGN.md, "Time") on the database.
Values are checked by `Queue.check_schedule`, as in code and the API: a bad one
gets the same message, exit 2, and nothing is stored. With `--app` (CHIT_APP)
the kind must be one of the app's tasks and the payload is checked against it."""

from __future__ import annotations

import argparse
import json
from typing import Any

from chit.api.schemas import ScheduleOut, SchedulesOut
from chit.cli import output
from chit.cli.loading import Setup
from chit.errors import InvalidRequest
from chit.schedules import StoredSchedule, check_name


def schedules(args: argparse.Namespace, setup: Setup) -> int:
    action = args.schedules_command
    if action == "add":
        return _add(args, setup)
    if action in ("pause", "resume"):
        return _pausing(args, setup, action == "pause")
    if action == "remove":
        return _remove(args, setup)
    store = setup.queue().store
    listed = store.list_schedules()
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
            output.when(s.next_at),
            None if s.last_slot is None else output.when(s.last_slot),
            s.last_job_state,
        )
        for s in listed
    ]
    headers = ["name", "kind", "rule", "tz", "paused", "next run", "last slot", "last job"]
    return output.table(headers, rows)


def _add(args: argparse.Namespace, setup: Setup) -> int:
    queue = setup.queue()
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
    schedule = queue.check_schedule(
        args.name,
        args.kind,
        payload,
        cron=args.cron,
        every=every,
        tz=args.tz,
        catch_up=args.catch_up,
    )
    stored = queue.store.declare_schedule(schedule, source="operator")
    if args.json:
        output.print_json(ScheduleOut.of(stored).model_dump(mode="json"))
    else:
        print(f"{stored.name}: {stored.rule}, kind {stored.kind}; next run {_next(stored)}")
    return 0


def _pausing(args: argparse.Namespace, setup: Setup, pausing: bool) -> int:
    name = check_name(args.name)
    store = setup.queue().store
    before = store.get_schedule(name)
    stored = store.pause_schedule(name, pausing)
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
    removed = setup.queue().store.remove_schedule(name)
    if args.json:
        output.print_json({"name": name, "removed": removed})
    elif removed:
        print(f"removed {name}; its jobs stay (a worker declaring it in code adds it back)")
    else:
        raise InvalidRequest(f"no schedule named {name!r}: chit schedules lists them")
    return 0


def _next(s: StoredSchedule) -> str:
    return output.when(s.next_at)


def add_parsers(command: Any, common: argparse.ArgumentParser) -> None:
    p = command(
        "schedules",
        schedules,
        "schedules with their next run and last job: chit schedules [add|pause|resume|remove]",
    )
    actions = p.add_subparsers(dest="schedules_command", metavar="ACTION")
    a = actions.add_parser(
        "add", parents=[common], help="declare or replace a schedule (cron or every)"
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
    for verb, text in (
        ("pause", "enqueue nothing for a schedule until resumed"),
        ("resume", "enqueue a paused schedule's slots again, from the next one"),
        ("remove", "delete a schedule (its jobs stay)"),
    ):
        a = actions.add_parser(verb, parents=[common], help=text)
        a.add_argument("name")
