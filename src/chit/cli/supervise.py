"""`chit up`'s supervisor: runs the worker and API child processes and makes
sure none outlives it.

- A worker that dies is started again after a backoff (1 s, doubling to 30 s
  while it keeps dying young) and the death is logged with its exit status,
  so the other workers' rescue of its leases is what `make up` shows.
- The API dying is fatal: the rest are stopped and `chit up` exits 1.
- Every way out stops every child: Ctrl-C, SIGTERM or SIGHUP (gracefully;
  the same signal again kills), an exception, and the output pipe breaking
  (`chit up | tee log` whose tee died with the Ctrl-C, `| head -1`). On Linux a
  child also gets SIGTERM if this process is killed outright.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import select
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import IO

from chit import logs

# A worker that ran this long before dying starts again after the first delay.
HEALTHY_SECONDS = 30.0
FIRST_DELAY = 1.0
MAX_DELAY = 30.0
# How long the children get after SIGTERM before they are killed, when the
# stop is not one the operator can repeat (an exception, a broken pipe).
STOP_GRACE = 40.0
TICK = 0.2

EXIT_CHILD_DIED = 1
EXIT_BROKEN_OUTPUT = 1


@dataclasses.dataclass
class Child:
    name: str
    argv: list[str]
    fatal: bool  # the API: its death ends `chit up`
    popen: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    failures: int = 0  # deaths in a row of a child that died young
    restart_at: float | None = None

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def backoff(failures: int) -> float:
    return min(FIRST_DELAY * 2 ** max(failures - 1, 0), MAX_DELAY)


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the parent dies (Linux), so even
    a `kill -9` of `chit up` leaves no worker running under PID 1."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class Supervisor:
    def __init__(
        self,
        children: list[Child],
        env: dict[str, str],
        *,
        out: IO[str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        json_lines: bool = False,
    ) -> None:
        self.json_lines = json_lines  # CHIT_LOG_FORMAT=json: say() writes JSON log lines
        self.children = children
        self.env = env
        self.out = out if out is not None else sys.stderr
        self.clock = clock
        self.signals = 0  # stop requests by signal
        self.stopping = False
        self.output_broken = False
        self.exit_code = 0

    # Output never raises: a broken pipe is a reason to stop, not a crash that
    # would skip stopping the children.
    def say(self, text: str) -> None:
        try:
            line = logs.json_line("up.message", text) if self.json_lines else f"chit up: {text}"
            print(line, file=self.out, flush=True)
        except (OSError, ValueError):
            self.output_broken = True

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signals += 1  # acted on by the loop; nothing here can fail

    def start(self, child: Child) -> None:
        child.popen = subprocess.Popen(
            child.argv,
            env=self.env,
            # Own sessions: a Ctrl-C reaches only this process, which stops
            # the children once, gently.
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
        child.started = self.clock()
        child.restart_at = None

    def run(self, after_start: Callable[[], None] | None = None) -> int:
        previous = {
            s: signal.signal(s, self._on_signal)
            for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        }
        try:
            for child in self.children:
                self.start(child)
            if after_start is not None:
                after_start()
            while not self.tick():
                time.sleep(TICK)
            return self.exit_code
        finally:
            # Whatever brought us here (an exception included), no child stays.
            self.stop_all(kill_after=STOP_GRACE)
            for s, handler in previous.items():
                signal.signal(s, handler)

    def tick(self) -> bool:
        """One look at the children and the signals; True once all is stopped."""
        if self._pipe_broken():
            self.output_broken = True
        if self.signals and not self.stopping:
            self.begin_stop("stopping (again to force)")
        elif self.signals > 1:
            self._signal_all(signal.SIGKILL)
        elif self.output_broken and not self.stopping:
            self.exit_code = EXIT_BROKEN_OUTPUT
            self.begin_stop("output closed; stopping")
        if self.stopping:
            return not any(c.running() for c in self.children)
        now = self.clock()
        for child in self.children:
            self._look_after(child, now)
        return False

    def _look_after(self, child: Child, now: float) -> None:
        if child.popen is None:
            return
        code = child.popen.poll()
        if code is None:
            return
        if child.restart_at is not None:
            if now >= child.restart_at:
                self.start(child)
                self.say(f"{child.name} started again (pid {child.popen.pid})")
            return
        if child.fatal:
            self.exit_code = EXIT_CHILD_DIED
            self.begin_stop(
                f"{child.name} (pid {child.popen.pid}) {describe_exit(code)}; stopping the rest"
            )
            return
        lived = now - child.started
        child.failures = 1 if lived >= HEALTHY_SECONDS else child.failures + 1
        delay = backoff(child.failures)
        child.restart_at = now + delay
        self.say(
            f"{child.name} (pid {child.popen.pid}) {describe_exit(code)}; "
            f"starting it again in {delay:.0f} s"
        )

    def begin_stop(self, why: str) -> None:
        self.stopping = True
        self._signal_all(signal.SIGTERM)  # before saying so: the saying may fail
        self.say(why)

    def stop_all(self, kill_after: float) -> None:
        """SIGTERM what still runs and wait; kill it after `kill_after` seconds
        or at one more signal."""
        self.stopping = True
        self._signal_all(signal.SIGTERM)
        signals = self.signals
        deadline = self.clock() + kill_after
        while any(c.running() for c in self.children):
            if self.clock() >= deadline or self.signals > signals:
                self._signal_all(signal.SIGKILL)
            time.sleep(TICK / 4)
        for child in self.children:
            if child.popen is not None:
                child.popen.wait()

    def _signal_all(self, signum: int) -> None:
        for child in self.children:
            if child.running():
                assert child.popen is not None
                child.popen.send_signal(signum)

    def _pipe_broken(self) -> bool:
        """A pipe whose reader is gone: Linux's poll says POLLERR on the writing
        end, so `chit up | head -1` notices without having to write."""
        for fd in (1, 2):
            try:
                if not stat.S_ISFIFO(os.fstat(fd).st_mode):
                    continue
                poller = select.poll()
                poller.register(fd, 0)  # POLLERR and POLLHUP are always reported
                if any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0)):
                    return True
            except OSError:
                continue
        return False
