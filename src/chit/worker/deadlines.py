"""Deadlines of calls a thread runs: one timer thread for all of them, rather
than a `threading.Timer` (a thread) per job."""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("chit.worker")


class Deadline:
    """One pending deadline; `cancel` it when the call ends first."""

    __slots__ = ("at", "cancelled", "fire")

    def __init__(self, at: float, fire: Callable[[], None]) -> None:
        self.at = at
        self.fire = fire
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Deadlines:
    """Calls `fire` once `seconds` have passed (on the monotonic clock), unless
    cancelled; the thread starts with the first deadline."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Deadline]] = []
        self._order = itertools.count()  # ties: first set, first fired
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def after(self, seconds: float, fire: Callable[[], None]) -> Deadline:
        deadline = Deadline(time.monotonic() + seconds, fire)
        with self._changed:
            heapq.heappush(self._heap, (deadline.at, next(self._order), deadline))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="chit-deadlines", daemon=True
                )
                self._thread.start()
            self._changed.notify()
        return deadline

    def run_once(self, now: float | None = None) -> float | None:
        """Fire every deadline due by `now`; returns the next one's time, if any."""
        now = time.monotonic() if now is None else now
        due = []
        with self._changed:
            while self._heap and (self._heap[0][2].cancelled or self._heap[0][0] <= now):
                _, _, deadline = heapq.heappop(self._heap)
                if not deadline.cancelled:
                    due.append(deadline)
            following = self._heap[0][0] if self._heap else None
        for deadline in due:
            try:
                deadline.fire()
            except Exception:
                log.exception("deadline error")
        return following

    def _run(self) -> None:
        while True:
            following = self.run_once()
            with self._changed:
                # A deadline set meanwhile may be sooner: it notifies.
                if not self._heap or self._heap[0][0] == following:
                    wait = None if following is None else max(0.0, following - time.monotonic())
                    self._changed.wait(wait)
