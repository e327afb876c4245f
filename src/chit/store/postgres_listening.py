"""An idle worker's wait on PostgreSQL: LISTEN on a connection of its thread's
own (enqueues NOTIFY the queue's name), in short slices so a worker told to
stop is not held; a poll when LISTEN is not possible."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any, ClassVar

from chit.extras import needs

with needs("postgres", "a postgresql:// database needs psycopg"):
    import psycopg

# How soon an idle worker's wait for a notification sees that it was told to stop.
_STOP_CHECK_SECONDS = 0.05


class Listening:
    """`wait_for_jobs` for PostgresStore, which makes these attributes."""

    url: str
    Q: ClassVar[Any]
    _lock: threading.Lock
    _listeners: threading.local
    _all_listeners: list[psycopg.Connection[Any]]

    def wait_for_jobs(
        self, queues: Sequence[str], timeout: float, stop: threading.Event | None = None
    ) -> None:
        deadline = time.monotonic() + timeout
        wanted = set(queues)
        conn = self._listener(timeout)
        if conn is None:
            # LISTEN is not possible (server down, a pooler that drops it): poll.
            _rest(deadline, stop)
            return
        try:
            # Notifications that arrived while this thread was busy come first:
            # drain them all, so a burst of enqueues wakes the worker once, not
            # once per job on every later call.
            woken = False
            while pending := [n.payload for n in conn.notifies(timeout=0)]:
                woken = woken or not wanted.isdisjoint(pending)
            if woken:
                return
            # In slices, so a worker told to stop is not held for the whole wait.
            while (remaining := deadline - time.monotonic()) > 0:
                if stop is not None and stop.is_set():
                    return
                for n in conn.notifies(timeout=min(remaining, _STOP_CHECK_SECONDS)):
                    if n.payload in wanted:
                        return
        except psycopg.Error:
            # The server went away: forget this connection (the next call
            # reconnects) and wait out the rest, as a poll would.
            self._listeners.conn = None
            with self._lock:
                if conn in self._all_listeners:
                    self._all_listeners.remove(conn)
            conn.close()
            _rest(deadline, stop)

    def _listener(self, timeout: float) -> psycopg.Connection[Any] | None:
        """This thread's LISTENing connection, made on first use."""
        conn: psycopg.Connection[Any] | None = getattr(self._listeners, "conn", None)
        if conn is not None and not conn.closed:
            return conn
        try:
            # libpq counts whole seconds, at least 2.
            limit = max(2, min(5, round(timeout)))
            conn = psycopg.Connection.connect(self.url, autocommit=True, connect_timeout=limit)
        except psycopg.Error:
            return None
        try:
            conn.execute(self.Q["listen"])
        except psycopg.Error:
            conn.close()
            return None
        self._listeners.conn = conn
        with self._lock:
            self._all_listeners.append(conn)
        return conn


def _rest(deadline: float, stop: threading.Event | None) -> None:
    """Wait until the monotonic `deadline`, or until `stop` is set."""
    left = max(0.0, deadline - time.monotonic())
    if stop is None:
        time.sleep(left)
    else:
        stop.wait(left)
