"""Feeds of output writes (`OutputFeed`), one per API process, each the
cheapest honest way its database has to say "this was just written":

- PostgreSQL: LISTEN chit_output on one connection; `append_output` sends the
  job's id with NOTIFY in the transaction that writes the values, so a
  listener hears of them when they commit, never before.
- SQLite: no server to push. Workers and the API are separate processes on
  one file, and `PRAGMA data_version` (one page read, no lock) changes when
  another connection commits: the feed checks it every `CHECK_SECONDS` and
  answers "something changed" (None), and the caller reads which of its
  watched jobs have new output with one indexed query (`output_heads`).
- Redis: pub/sub (chit.store.redis.output).
"""

from __future__ import annotations

import abc
import logging
import sqlite3
import time
from typing import Any

log = logging.getLogger("chit.api")

# 20 ms: an emit reaches an SSE client well inside 100 ms at a cost of 50 page
# reads a second per API process, whatever the number of listeners.
CHECK_SECONDS = 0.02


class OutputFeed(abc.ABC):
    """What an API process listens on for output as it is written (one per
    process, fanning out to its subscribers; see chit.api.events)."""

    @abc.abstractmethod
    def wait(self, timeout: float) -> frozenset[str] | None:
        """Block up to `timeout` seconds for writes: the ids of the jobs whose
        output grew (empty: nothing within the timeout), or None when something
        changed that the feed cannot name (the caller looks at every job it
        watches). Spurious wakes are fine; a missed write is not."""

    @abc.abstractmethod
    def close(self) -> None: ...


class SQLiteFeed(OutputFeed):
    def __init__(self, path: str, every: float = CHECK_SECONDS) -> None:
        self.path = path
        self.every = every
        self._conn: sqlite3.Connection | None = None
        self._seen: int | None = None

    def _version(self) -> int:
        if self._conn is None:
            self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        return int(self._conn.execute("PRAGMA data_version").fetchone()[0])

    def wait(self, timeout: float) -> frozenset[str] | None:
        deadline = time.monotonic() + timeout
        try:
            if self._seen is None:
                self._seen = self._version()
                return None  # the first look: whatever was written before it
            while True:
                version = self._version()
                if version != self._seen:
                    self._seen = version
                    return None
                left = deadline - time.monotonic()
                if left <= 0:
                    return frozenset()
                time.sleep(min(self.every, left))
        except sqlite3.Error as e:
            log.warning("output feed: SQLite %r: %s", self.path, e)
            self.close()
            time.sleep(min(timeout, 1.0))
            return None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._seen = None


class PostgresFeed(OutputFeed):
    def __init__(self, url: str, listen: str) -> None:
        self.url = url
        self.listen = listen  # queries.sql's `listen_output`
        self._conn: Any = None

    def _listening(self) -> Any:
        import psycopg

        if self._conn is None or self._conn.closed:
            self._conn = psycopg.Connection.connect(self.url, autocommit=True, connect_timeout=5)
            self._conn.execute(self.listen)
            return None  # anything may have been written while nobody listened
        return self._conn

    def wait(self, timeout: float) -> frozenset[str] | None:
        import psycopg

        try:
            conn = self._listening()
            if conn is None:
                return None
            ids = {n.payload for n in conn.notifies(timeout=timeout, stop_after=1)}
            # Then whatever else is waiting, so a burst wakes listeners once.
            ids |= {n.payload for n in conn.notifies(timeout=0)}
            return frozenset(ids)
        except psycopg.Error as e:
            log.warning("output feed: PostgreSQL: %s", e)
            self.close()
            time.sleep(min(timeout, 1.0))
            return None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
