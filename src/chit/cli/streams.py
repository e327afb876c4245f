"""`chit output`: a job's output (`JobContext.emit`), read from the database,
one JSON line a value; `--follow` waits for more until the job finishes."""

from __future__ import annotations

import argparse
import json
import sys

from chit.cli.flags import AddCommand
from chit.cli.loading import Setup
from chit.jobs import OutputItem


def add_parsers(command: AddCommand) -> None:
    p = command("output", output, "print the values a job emitted, one JSON line each")
    p.add_argument("id")
    p.add_argument("--after", type=int, default=0, help="only values with a seq above this")
    p.add_argument(
        "--follow", action="store_true", help="print values as they come, until the job finishes"
    )


def output(args: argparse.Namespace, setup: Setup) -> int:
    queue = setup.stored_queue()
    if args.after < 0:
        print("chit: --after is a seq, 0 or more", file=sys.stderr)
        return 2
    if args.follow:
        for item in queue.follow_output(args.id, args.after):
            _print(item, args.json)
        return 0
    after = args.after
    while items := queue.output(args.id, after):
        for item in items:
            _print(item, args.json)
        after = items[-1].seq
    return 0


def _print(item: OutputItem, as_json: bool) -> None:
    """`--json`: each value with its seq, attempt and time; otherwise the value alone."""
    if as_json:
        line = {"seq": item.seq, "attempt": item.attempt, "data": item.data}
        line["at"] = item.at.isoformat()
        print(json.dumps(line, ensure_ascii=False), flush=True)
    else:
        print(json.dumps(item.data, ensure_ascii=False), flush=True)
