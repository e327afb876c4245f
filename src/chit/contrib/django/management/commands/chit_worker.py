"""`manage.py chit_worker [--backend ALIAS] [chit worker flags]`: the same as
`chit worker --django <this project's settings>:ALIAS`, for projects that run
everything through manage.py. chit's parser reads the flags, so they and their
help (`manage.py chit_worker --help`) are chit worker's own."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Run a chit worker for this project's tasks (the flags of chit worker, and --backend)"

    def run_from_argv(self, argv: list[str]) -> None:
        # argv: [manage.py, chit_worker, flags...]
        sys.exit(_run(argv[2:]))

    def handle(self, *args: Any, **options: Any) -> None:  # call_command("chit_worker")
        code = _run(list(args))
        if code:
            sys.exit(code)


def _run(flags: list[str]) -> int:
    from chit.cli.main import main

    ours = argparse.ArgumentParser(add_help=False)
    ours.add_argument("--backend", default="default")
    # Django's own, applied by manage.py before the command runs.
    ours.add_argument("--settings")
    ours.add_argument("--pythonpath")
    known, rest = ours.parse_known_args(flags)
    return main(["worker", "--django", f"{settings.SETTINGS_MODULE}:{known.backend}", *rest])
