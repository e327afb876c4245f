"""Child processes for the tests that start real servers and workers: a free
port, the environment (tests/ importable), stderr in a file, waiting until a
worker has started or a server answers, a graceful stop, freezing a process
outside a write."""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager
from pathlib import Path
from typing import IO, Any

import httpx
import psycopg
import pytest

from support import TESTS
from support.waiting import wait_until

E2E_APP = "support.e2e_app:queue"
# What `chit worker` logs once its signal handlers are installed and its loops
# run (chit.worker.runner.Worker.run): before it, SIGTERM kills the process.
WORKER_STARTED = " started: queues "


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def child_env(base: dict[str, str] | None = None, **extra: str) -> dict[str, str]:
    """`base` (the environment by default) with tests/ on PYTHONPATH, so the
    child imports `support.*` apps as the tests do."""
    env = dict(os.environ if base is None else base) | extra
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")]))
    return env


def stop(processes: Sequence[subprocess.Popen[Any]], timeout: float = 10) -> None:
    """SIGTERM every process still running, then wait; kill what outlives the timeout."""
    for p in processes:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in processes:
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


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

    def wait_started(self, timeout: float = 60) -> None:
        """Until the worker has logged that it runs (signal handlers installed,
        loops started): only then does SIGTERM mean a graceful stop."""
        wait_until(
            lambda: WORKER_STARTED in self.stderr() or not self.alive(),
            timeout,
            what=f"{self.name} to start",
        )
        assert self.alive(), f"{self.name} exited early:\n{self.stderr()}"


def wait_healthy(proc: Proc, url: str, timeout: float, what: str) -> None:
    """Until GET `url`/healthz answers 200, or `proc` has exited: the caller
    asserts `proc.alive()` where an early exit should fail with its stderr."""

    def healthy() -> bool:
        try:
            return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return not proc.alive()

    wait_until(healthy, timeout, what=what)


def wait_ready(proc: Proc, get: Callable[[], httpx.Response], timeout: float, what: str) -> None:
    """Until `get()`, a GET of the server's /readyz, answers 200; fails the test
    with `proc`'s stderr as soon as it has exited."""

    def ready() -> bool:
        assert proc.alive(), proc.stderr()
        try:
            return get().status_code == 200
        except httpx.TransportError:
            return False

    wait_until(ready, timeout, what=what)


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

    def worker(self, *flags: str, name: str | None = None, app: str = E2E_APP) -> Proc:
        name = name or f"worker{len(self.all)}"
        return self.start(["-m", "chit", "worker", "--app", app, *flags], name)

    def workers(
        self, count: int, *flags: str, app: str = E2E_APP, timeout: float = 60
    ) -> list[Proc]:
        """`count` workers w0, w1, ..., returned once each has started."""
        started = [self.worker(*flags, name=f"w{i}", app=app) for i in range(count)]
        for w in started:
            w.wait_started(timeout)
        return started

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
def running_procs(tmp_path: Path, db_url: str, **env: str) -> Iterator[Procs]:
    """Start processes on `db_url` with the test apps importable; kill them all
    at the end. `env` adds CHIT_* settings to the defaults below."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CHIT_")}
    p = Procs(
        tmp_path,
        child_env(
            clean,
            CHIT_DATABASE_URL=db_url,
            PYTHONUNBUFFERED="1",
            # Retries in these tests are about leases, not backoff.
            CHIT_BACKOFF_BASE="0.05",
            CHIT_BACKOFF_MAX="0.1",
            # An idle worker looks for work at least this often.
            CHIT_POLL_INTERVAL="0.2",
        )
        | env,
    )
    try:
        yield p
    finally:
        p.cleanup()


class Database:
    """Where one test's jobs live: a SQLite file, a PostgreSQL database of its
    own, or the test process's redis-server."""

    def __init__(self, backend: str, url: str, path: Path | None = None) -> None:
        self.backend = backend
        self.url = url
        self.path = path  # the SQLite file

    def writes_idle(self) -> bool:
        """True when no client holds a write lock or an open transaction, so a
        process frozen now blocks nobody else's writes."""
        if self.path is not None:
            return write_lock_free(self.path)
        if self.backend == "redis":
            return True  # each write is one function the server runs whole: no lock to hold
        with closing(psycopg.connect(self.url, autocommit=True)) as conn:
            busy = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid() AND state <> 'idle'"
            ).fetchone()
        return busy == (0,)


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
        time.sleep(0.01)  # let it run on, out of the transaction it was in
    pytest.fail(f"{proc.name} held the write lock every time it was stopped")


def _proc_state(pid: int) -> str:
    # /proc/PID/stat: "pid (comm) S ..."; comm may contain spaces, so split after ')'.
    text = Path(f"/proc/{pid}/stat").read_text()
    return text.rsplit(")", 1)[1].split()[0]
