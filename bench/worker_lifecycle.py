"""How long a real `chit worker --django` process takes to start and to stop,
idle, on a SQLite file: from spawn to its "worker started" log line, and from
SIGTERM to its exit. The median of `--runs` runs (tests/django_project).

    .venv/bin/python bench/worker_lifecycle.py [--runs 10] [--plain]

`--plain`: a worker of a plain chit app (tests/support/cli_app.py) instead.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent / "tests"


def one_run(db_dir: str, plain: bool) -> tuple[float, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHIT_")}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    if plain:
        env["CHIT_DATABASE_URL"] = f"sqlite:///{db_dir}/plain.db"
        command = ["worker", "--app", "support.cli_app:queue"]
    else:
        env["CHIT_TEST_DJANGO_SQLITE"] = f"{db_dir}/project.sqlite3"
        command = ["worker", "--django", "django_project.settings:default"]
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "chit", *command],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        if "worker.started" in line or " started: queues" in line:
            break
    else:
        raise SystemExit(f"the worker exited with {proc.wait()} before it started")
    start = time.monotonic() - started
    stopping = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = proc.wait()
    stop = time.monotonic() - stopping
    proc.stderr.read()
    if code != 0:
        raise SystemExit(f"the worker exited with {code} on SIGTERM")
    return start, stop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--plain", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as db_dir:
        one_run(db_dir, args.plain)  # makes the tables: not a start to measure
        runs = [one_run(db_dir, args.plain) for _ in range(args.runs)]
    starts, stops = zip(*runs, strict=True)
    print(
        f"start: median {statistics.median(starts):.3f}s (min {min(starts):.3f}s); "
        f"stop: median {statistics.median(stops):.3f}s (min {min(stops):.3f}s)"
    )


if __name__ == "__main__":
    main()
