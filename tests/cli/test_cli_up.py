"""`chit up` supervises its children, with real processes and real signals: a
worker killed with -9 is started again and the job it held finishes; the API
dying ends `chit up` with a non-zero status; a port already taken is refused
in one line; and no way out (SIGTERM, the API's death, a broken output pipe,
even a kill -9 of `chit up` itself) leaves a child running."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import chit
from chit.jobs import State
from support.processes import E2E_APP, WORKER_STARTED, child_env, free_port
from support.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def children(pid: int) -> list[int]:
    """The live child processes of `pid` (Linux's /proc)."""
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except FileNotFoundError:
        return []
    return [int(p) for p in text.split() if alive(int(p))]


def alive(pid: int) -> bool:
    """Running, or stopped: not gone and not a zombie waiting to be reaped."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except FileNotFoundError:
        return False
    return fields[0] not in ("Z", "X")


def cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


class Up:
    """`chit up --workers 2` on the e2e app, its stderr (the children's too) in a file."""

    def __init__(self, tmp_path: Path, port: int, stdout: int | None, stderr: int | None) -> None:
        self.err_path = tmp_path / "up.stderr"
        self.port = port
        err = open(self.err_path, "wb") if stderr is None else None  # noqa: SIM115
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "chit", "up", "--workers", "2", "--port", str(port)],
            env=child_env(CHIT_APP=E2E_APP, CHIT_LEASE_SECONDS="2"),
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=err if err is not None else stderr,
        )
        if err is not None:
            err.close()
        self.seen: set[int] = set()

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace") if self.err_path.exists() else ""

    def children(self) -> list[int]:
        found = children(self.popen.pid)
        self.seen.update(found)
        return found

    def wait_children(self, count: int = 3) -> list[int]:
        return list(
            wait_until(
                lambda: len(self.children()) == count and self.children(),
                60,
                what=f"{count} children of chit up",
            )
        )

    def api_pid(self) -> int:
        """Once it listens (before its exec, a child's command line is chit up's)."""
        wait_until(self._listening, 60, what="the API to listen")
        (pid,) = [p for p in self.children() if "chit serve" in cmdline(p)]
        return pid

    def _listening(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
        except OSError:
            return False
        return True

    def assert_no_child_left(self) -> None:
        # Children of a parent that died early are waited for by PID 1 or linger
        # as zombies: either way they must not be running.
        wait_until(
            lambda: not any(alive(p) for p in self.seen),
            60,
            what=f"every child of chit up to exit ({sorted(self.seen)})",
        )


@pytest.fixture
def up_factory(tmp_path: Path) -> Iterator[list[Up]]:
    started: list[Up] = []
    yield started
    for up in started:
        up.seen.update(up.children())
        if up.popen.poll() is None:
            up.popen.kill()
            up.popen.wait(10)
        for pid in up.seen:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def start(
    factory: list[Up],
    tmp_path: Path,
    stdout: int | None = subprocess.DEVNULL,
    stderr: int | None = None,
) -> Up:
    up = Up(tmp_path, free_port(), stdout, stderr)
    factory.append(up)
    return up


def test_a_killed_worker_is_started_again_and_the_job_it_held_finishes(
    tmp_path: Path, db_path: Path, up_factory: list[Up]
) -> None:
    up = start(up_factory, tmp_path)
    first = set(up.wait_children())
    wait_until(lambda: up.stderr().count(WORKER_STARTED) == 2, 60, what="both workers")
    queue = chit.Queue(f"sqlite:///{db_path}")
    queue.task("stall_first")(lambda job, body: None)  # so it enqueues; chit up's workers run it
    try:
        job_id = queue.enqueue("stall_first", {"seconds": 300}).id
        job = wait_until(
            lambda: (j := queue.store.get(job_id)).state == State.RUNNING and j, 30, what="claim"
        )
        assert job.worker is not None
        victim = int(job.worker.split(":")[1])
        assert victim in first
        os.kill(victim, signal.SIGKILL)

        wait_until(
            lambda: (
                f"(pid {victim}) was killed by SIGKILL; starting it again in 1 s" in up.stderr()
            ),
            30,
            what="chit up to log the worker's death",
        )
        done = wait_until(
            lambda: (j := queue.store.get(job_id)).state.terminal and j, 60, what="the job"
        )
        assert (done.state, done.result["attempt"]) == (State.SUCCEEDED, 2), done
        wait_until(lambda: "started again (pid " in up.stderr(), 30, what="the restart")
        now = set(up.wait_children())
        assert victim not in now and len(now - first) == 1
    finally:
        queue.close()

    up.popen.send_signal(signal.SIGTERM)
    assert up.popen.wait(60) == 0
    up.assert_no_child_left()
    assert "Traceback" not in up.stderr()


def test_the_api_dying_stops_everything_with_a_non_zero_status(
    tmp_path: Path, up_factory: list[Up]
) -> None:
    up = start(up_factory, tmp_path)
    up.wait_children()
    api = up.api_pid()
    os.kill(api, signal.SIGKILL)
    assert up.popen.wait(60) == 1
    assert f"HTTP API (pid {api}) was killed by SIGKILL; stopping the rest" in up.stderr()
    up.assert_no_child_left()


def test_a_port_already_taken_is_refused_in_one_line(tmp_path: Path, up_factory: list[Up]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        up = Up(tmp_path, port, subprocess.DEVNULL, None)
        up_factory.append(up)
        assert up.popen.wait(30) == 2
    err = up.stderr().strip()
    assert err == (
        f"chit: error: port {port} on 127.0.0.1 is already in use (another chit up or "
        "chit serve?); stop it or choose another with --port or CHIT_PORT"
    )
    assert up.seen == set()


def test_a_closed_output_pipe_stops_every_child(tmp_path: Path, up_factory: list[Up]) -> None:
    """`chit up | head -1`: the reader goes after one line."""
    up = start(up_factory, tmp_path, stdout=subprocess.PIPE)
    assert up.popen.stdout is not None
    assert up.popen.stdout.readline().startswith(b"chit up: 2 worker process(es)")
    up.wait_children()
    up.popen.stdout.close()
    assert up.popen.wait(60) != 0
    up.assert_no_child_left()


def test_ctrl_c_under_tee_stops_every_child(tmp_path: Path, up_factory: list[Up]) -> None:
    """`chit up 2>&1 | tee log`, then Ctrl-C: tee dies with it, so every line
    chit up writes next meets a broken pipe."""
    up = start(up_factory, tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert up.popen.stdout is not None
    assert up.popen.stdout.readline().startswith(b"chit up: 2 worker process(es)")
    up.wait_children()
    up.popen.stdout.close()
    up.popen.send_signal(signal.SIGINT)
    up.popen.wait(60)
    up.assert_no_child_left()


def test_a_kill_9_of_chit_up_leaves_no_child_running(tmp_path: Path, up_factory: list[Up]) -> None:
    up = start(up_factory, tmp_path)
    up.wait_children()
    wait_until(lambda: up.stderr().count(WORKER_STARTED) == 2, 60, what="both workers")
    up.popen.kill()
    up.popen.wait(10)
    up.assert_no_child_left()
