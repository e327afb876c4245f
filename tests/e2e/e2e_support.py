"""Helpers for the end-to-end tests: the database a test runs on, child
processes, polling, reading results."""

from __future__ import annotations

import os
import secrets
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import IO, Any

import psycopg
import pytest
from psycopg import sql

import chit
from chit.jobs import Job
from chit.settings import Settings

HERE = Path(__file__).resolve().parent
APP = "e2e_app:queue"


class Database:
    """Where one test's jobs live: a SQLite file, or a PostgreSQL database of its own."""

    def __init__(self, backend: str, url: str, path: Path | None = None) -> None:
        self.backend = backend
        self.url = url
        self.path = path  # the SQLite file

    def writes_idle(self) -> bool:
        """True when no client holds a write lock or an open transaction, so a
        process frozen now blocks nobody else's writes."""
        if self.path is not None:
            return write_lock_free(self.path)
        with closing(psycopg.connect(self.url, autocommit=True)) as conn:
            busy = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid() AND state <> 'idle'"
            ).fetchone()
        return busy == (0,)


@contextmanager
def postgres_database(request: pytest.FixtureRequest, prefix: str = "chit_e2e") -> Iterator[str]:
    """A new, empty database on the test PostgreSQL server (CHIT_TEST_POSTGRES_URL),
    dropped afterwards: worker processes of one test never see another test's
    rows or notifications. Yields its URL."""
    # The session database fixture checks the server is there (or skips on purpose).
    session_url: str = request.getfixturevalue("postgres_database")
    url_for: Callable[..., str] = request.getfixturevalue("postgres_url_for")
    name = f"{prefix}_{secrets.token_hex(4)}"
    with psycopg.connect(session_url, autocommit=True) as admin:
        create = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        deadline = time.monotonic() + 10
        while True:
            try:
                admin.execute(create)
                break
            except psycopg.errors.ObjectInUse:
                # The template is copied only while nobody else is connected to
                # it; another session on the shared server may be, for a moment.
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    try:
        yield url_for(name)
    finally:
        with psycopg.connect(session_url, autocommit=True) as admin:
            # FORCE: a process the test left frozen may still be connected.
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def wait_until(
    predicate: Callable[[], Any], timeout: float, interval: float = 0.05, what: str = ""
) -> Any:
    """Poll `predicate` until it returns something truthy; fail the test after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(interval)


class Proc:
    """A child process whose stderr goes to a file (a pipe could fill and block it)."""

    def __init__(self, name: str, popen: subprocess.Popen[bytes], stderr_path: Path) -> None:
        self.name = name
        self.popen = popen
        self.stderr_path = stderr_path
        self.stopped = False

    @property
    def pid(self) -> int:
        return self.popen.pid

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def signal(self, signum: int) -> None:
        self.popen.send_signal(signum)
        if signum == signal.SIGSTOP:
            self.stopped = True
        elif signum == signal.SIGCONT:
            self.stopped = False

    def alive(self) -> bool:
        return self.popen.poll() is None

    def wait(self, timeout: float) -> int:
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(
                f"{self.name} (pid {self.pid}) still running after {timeout}s:\n"
                + self.stderr()[-3000:]
            )

    def wait_started(self, timeout: float = 30) -> None:
        """Until the worker has logged that it is running (its loops have started)."""
        wait_until(
            lambda: " started: queues " in self.stderr() or not self.alive(),
            timeout,
            what=f"{self.name} to start",
        )
        assert self.alive(), f"{self.name} exited early:\n{self.stderr()}"


class Procs:
    def __init__(self, tmp_path: Path, env: dict[str, str]) -> None:
        self.tmp_path = tmp_path
        self.env = env
        self.all: list[Proc] = []
        self._files: list[IO[bytes]] = []

    def start(
        self,
        argv: list[str],
        name: str,
        stdout: int | None = subprocess.DEVNULL,
        extra_env: dict[str, str] | None = None,
    ) -> Proc:
        stderr_path = self.tmp_path / f"{name}.stderr"
        err = open(stderr_path, "wb")  # noqa: SIM115 - closed at teardown
        self._files.append(err)
        popen = subprocess.Popen(
            [sys.executable, *argv],
            cwd=self.tmp_path,
            env=self.env | (extra_env or {}),
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=err,
        )
        proc = Proc(name, popen, stderr_path)
        self.all.append(proc)
        return proc

    def worker(self, *flags: str, name: str | None = None) -> Proc:
        name = name or f"worker{len(self.all)}"
        return self.start(["-m", "chit", "worker", "--app", APP, *flags], name)

    def cleanup(self) -> None:
        for proc in self.all:
            if proc.alive():
                if proc.stopped:
                    proc.popen.send_signal(signal.SIGCONT)
                proc.popen.kill()
        for proc in self.all:
            proc.popen.wait(10)
            if proc.popen.stdout is not None:
                proc.popen.stdout.close()
        for f in self._files:
            f.close()


@contextmanager
def running_procs(tmp_path: Path, db_url: str) -> Iterator[Procs]:
    """Start processes on `db_url` with the test app importable; kill them all at the end."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHIT_")}
    env |= {
        "CHIT_DATABASE_URL": db_url,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")])),
        "PYTHONUNBUFFERED": "1",
        # Retries in these tests are about leases, not backoff.
        "CHIT_BACKOFF_BASE": "0.05",
        "CHIT_BACKOFF_MAX": "0.1",
        # An idle worker looks for work at least this often.
        "CHIT_POLL_INTERVAL": "0.2",
    }
    p = Procs(tmp_path, env)
    try:
        yield p
    finally:
        p.cleanup()


@contextmanager
def app_queue(db_url: str) -> Iterator[chit.Queue]:
    """The test app's tasks on `db_url` (migrated), to enqueue and to read jobs."""
    import e2e_app

    q = chit.Queue(settings=Settings(database_url=db_url))
    q.tasks.update(e2e_app.queue.tasks)
    q.store.migrate()
    try:
        yield q
    finally:
        q.close()


def get(q: chit.Queue, job_id: str) -> Job:
    job = q.store.get(job_id)
    assert job is not None, job_id
    return job


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def write_lock_free(db_path: Path) -> bool:
    """True when no process holds the SQLite write lock (a stopped process might)."""
    conn = sqlite3.connect(db_path, timeout=0.2, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        conn.close()


def wait_terminal(q: chit.Queue, job_id: str, timeout: float) -> Job:
    return wait_until(
        lambda: (job := get(q, job_id)).state.terminal and job,
        timeout,
        what=f"job {job_id} to finish",
    )


def stop_outside_write(proc: Proc, database: Database) -> None:
    """SIGSTOP `proc` at a moment it holds no write lock (SQLite) or open
    transaction (PostgreSQL): a process frozen inside one would block other
    writers, which is a different fault from the one under test."""
    for _ in range(100):
        proc.signal(signal.SIGSTOP)
        wait_until(lambda: _proc_state(proc.pid) == "T", 5, 0.005, what="SIGSTOP")
        if database.writes_idle():
            return
        proc.signal(signal.SIGCONT)
        time.sleep(0.01)
    pytest.fail(f"{proc.name} held the write lock every time it was stopped")


def _proc_state(pid: int) -> str:
    # /proc/PID/stat: "pid (comm) S ..."; comm may contain spaces, so split after ')'.
    text = Path(f"/proc/{pid}/stat").read_text()
    return text.rsplit(")", 1)[1].split()[0]
