"""Helpers for the CLI tests: results, child processes, running jobs, snapshots."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import chit
from chit.settings import Settings
from support.processes import child_env

APP = "support.cli_app"
CHIT_VARS = [f"CHIT_{f.name.upper()}" for f in dataclasses.fields(Settings)]


@dataclasses.dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


# What the `cli` fixture (cli/conftest.py) is: `cli("limits", "--json")` runs chit in-process.
Cli = Callable[..., Result]


def ok(result: Result) -> Result:
    """The command succeeded and wrote nothing to stderr."""
    assert result.code == 0, result
    assert result.err == "", result.err
    return result


def assert_refused(result: Result, code: int, *phrases: str) -> str:
    """The error is one line, 'chit: error: ...' (or 'chit COMMAND: error: ...'
    from argparse, which adds where to read the command's flags), and no more."""
    assert result.code == code, result
    assert "Traceback" not in result.err
    assert result.out == ""
    assert len(result.err.splitlines()) == 1, result.err
    line = result.err.splitlines()[0]
    assert line.startswith("chit") and "error: " in line, line
    for phrase in phrases:
        assert phrase in line, f"{phrase!r} not in {line!r}"
    return line


def forget_app() -> None:
    """Drop the imported cli_app, so the next command imports it with today's environment."""
    module = sys.modules.pop(APP, None)
    if module is not None:
        module.queue.close()


def run_cli(*args: str, timeout: float = 30, **env: str) -> Result:
    """The real command, `python -m chit ARGS`, in a child process."""
    proc = subprocess.run(
        [sys.executable, "-m", "chit", *args],
        capture_output=True,
        text=True,
        env=child_env(**env),
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def run_jobs(q: chit.Queue, timeout: float = 20) -> None:
    """Work in this thread until nothing is running and nothing queued is due."""
    worker = chit.Worker(q, concurrency=2)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        worker.run_until_idle(timeout)
        stats = q.store.stats()
        if stats.by_state["running"] == 0 and stats.oldest_queued_age is None:
            return
        time.sleep(0.01)
    raise TimeoutError("jobs still due after the timeout")


def snapshot(db_path: Path) -> Any:
    """Every stored row, to show that a refused command changed nothing."""
    if not db_path.exists():
        return None
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        return [
            conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()
            for table in (
                "chit_jobs",
                "chit_attempts",
                "chit_results",
                "chit_limits",
                "chit_pauses",
                "chit_schema_migrations",
            )
        ]
    finally:
        conn.close()
