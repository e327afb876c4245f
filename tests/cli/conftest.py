"""The `chit` command against a temporary SQLite file with the tasks in
support/cli_app.py.

`cli` runs `chit.cli.main.main` in this process (fast, for the many small
cases); `run_cli` (support/cli.py) runs the real command in a child process.
Both see the same CHIT_* environment, set afresh for each test."""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import chit
from chit.cli.main import main
from support import TESTS
from support.cli import APP, CHIT_VARS, Result, forget_app
from support.processes import child_env


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "chit.db"


@pytest.fixture(autouse=True)
def cli_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, db_path: Path) -> Iterator[None]:
    # Set then delete, so each variable is restored even when `chit --flag` sets it.
    for name in CHIT_VARS:
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setenv("CHIT_DATABASE_URL", f"sqlite:///{db_path}")
    monkeypatch.setenv("CHIT_APP", f"{APP}:queue")
    monkeypatch.setenv("CHIT_BACKOFF_BASE", "0.001")
    monkeypatch.setenv("CHIT_BACKOFF_MAX", "0.002")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(TESTS))  # also restores what load_queue adds to sys.path
    # cli_app builds its Queue from the environment when imported: import it afresh.
    forget_app()
    yield
    forget_app()


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., Result]:
    def run(*args: str) -> Result:
        capsys.readouterr()
        try:
            code = main(list(args))
        except SystemExit as e:  # argparse refusing the arguments
            code = e.code if isinstance(e.code, int) else 1
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return run


@pytest.fixture
def app() -> chit.Queue:
    """cli_app's queue, on this test's database (the one `cli` commands use)."""
    return importlib.import_module(APP).queue


@pytest.fixture
def worker_process(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start `chit worker` child processes; all are stopped at teardown."""
    started: list[tuple[subprocess.Popen[bytes], Any]] = []

    def start(*flags: str) -> subprocess.Popen[bytes]:
        err = open(tmp_path / f"worker{len(started)}.stderr", "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            [sys.executable, "-m", "chit", "worker", *flags],
            env=child_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        started.append((proc, err))
        return proc

    yield start
    for proc, _ in started:
        if proc.poll() is None:
            proc.terminate()
    for proc, err in started:
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        err.close()
