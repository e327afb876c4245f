"""What the conformance suite (tests/store) reads and arranges beside a store's
own calls, one method per fact, so its shared files hold no store's language.

Each backend of tests/store/conftest.py builds one `StoreInspection` over the
place its stores live. A new store implements these methods in its own terms
(a Redis store: keys, hashes and sorted sets; `hold_writes` as CLIENT PAUSE
WRITE); the SQL stores share `SQLInspection`, which differs only in how it
reaches the database and takes its write lock.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, closing, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest


class StoreInspection(ABC):
    """Facts about a store's data the contract does not return, and states it
    cannot be driven into by its own calls. Test-only: nothing here is public."""

    @abstractmethod
    def job_count(self) -> int:
        """Every stored job, whatever its state (waiting, queued, running or ended)."""

    @abstractmethod
    def active_jobs_holding(self, unique_key: str) -> int:
        """Jobs waiting, queued or running that hold `unique_key`."""

    @abstractmethod
    def leave_open_attempt(
        self, job_id: str, attempt: int, worker: str, started_at: datetime
    ) -> None:
        """Record attempt `attempt` of `job_id` as begun by `worker` and never
        closed, as a failure between a job's rescue and its attempt's closing
        would leave it. The job itself is not touched."""

    @abstractmethod
    def inline_result(self, job_id: str) -> Any:
        """The result kept on the job itself, as stored (None when there is none)."""

    @abstractmethod
    def external_results(self, job_id: str | None = None) -> int:
        """Results kept apart from their job: `job_id`'s, or every job's."""

    @abstractmethod
    def step_count(self) -> int:
        """Stored step results of every job."""

    @abstractmethod
    def signal_count(self) -> int:
        """Stored signals of every job."""

    @abstractmethod
    def hold_writes(self) -> AbstractContextManager[None]:
        """While the block runs, another client holds the lock a store's writes
        wait for (an enqueue waits; it is not refused)."""

    @abstractmethod
    def prune_in_batches_of(self, size: int, monkeypatch: pytest.MonkeyPatch) -> None:
        """Make `prune` delete at most `size` jobs per round, for this test."""


class SQLInspection(StoreInspection):
    """Both SQL stores: the same tables, `?` placeholders (the PostgreSQL
    backend translates them)."""

    def __init__(
        self, rows: Callable[[str, tuple[Any, ...]], list[tuple[Any, ...]]], store_module: str
    ) -> None:
        self._rows = rows
        self._store_module = store_module

    def _count(self, query: str, params: tuple[Any, ...] = ()) -> int:
        return int(self._rows(query, params)[0][0])

    def job_count(self) -> int:
        return self._count("SELECT count(*) FROM chit_jobs")

    def active_jobs_holding(self, unique_key: str) -> int:
        return self._count(
            "SELECT count(*) FROM chit_jobs WHERE unique_key = ?"
            " AND state IN ('waiting', 'queued', 'running')",
            (unique_key,),
        )

    def leave_open_attempt(
        self, job_id: str, attempt: int, worker: str, started_at: datetime
    ) -> None:
        self._rows(
            "INSERT INTO chit_attempts (job_id, attempt, worker, started_at) VALUES (?, ?, ?, ?)",
            (job_id, attempt, worker, started_at.isoformat()),
        )

    def inline_result(self, job_id: str) -> Any:
        [[result]] = self._rows("SELECT result FROM chit_jobs WHERE id = ?", (job_id,))
        return result

    def external_results(self, job_id: str | None = None) -> int:
        if job_id is None:
            return self._count("SELECT count(*) FROM chit_results")
        return self._count("SELECT count(*) FROM chit_results WHERE job_id = ?", (job_id,))

    def step_count(self) -> int:
        return self._count("SELECT count(*) FROM chit_steps")

    def signal_count(self) -> int:
        return self._count("SELECT count(*) FROM chit_signals")

    def prune_in_batches_of(self, size: int, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(sys.modules[self._store_module], "PRUNE_BATCH", size)


class SQLiteInspection(SQLInspection):
    def __init__(self, path: Path, store_module: str) -> None:
        super().__init__(self._run, store_module)
        self.path = path

    def _run(self, query: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with closing(sqlite3.connect(self.path, timeout=30)) as conn:
            conn.execute("PRAGMA foreign_keys = ON")
            with conn:
                return conn.execute(query, params).fetchall()

    @contextmanager
    def hold_writes(self) -> Iterator[None]:
        locker = sqlite3.connect(self.path, timeout=30)
        try:
            locker.isolation_level = None
            locker.execute("BEGIN IMMEDIATE")  # SQLite's one writer
            yield
            locker.execute("COMMIT")
        finally:
            locker.close()


class PostgresInspection(SQLInspection):
    def __init__(
        self,
        url: str,
        rows: Callable[[str, tuple[Any, ...]], list[tuple[Any, ...]]],
        store_module: str,
    ) -> None:
        super().__init__(rows, store_module)
        self.url = url

    @contextmanager
    def hold_writes(self) -> Iterator[None]:
        with psycopg.connect(self.url) as locker:
            locker.execute("LOCK TABLE chit_jobs IN EXCLUSIVE MODE")  # until the commit
            yield
            locker.execute("COMMIT")


class RedisInspection(StoreInspection):
    """The Redis store's keys (chit/store/redis/chit.lua lists them)."""

    def __init__(self, url: str, prefix: str, store_module: str) -> None:
        import redis

        self.url = url
        self.prefix = prefix
        self._store_module = store_module
        self._client = redis.Redis.from_url(url, decode_responses=True)

    def _keys(self, kind: str) -> list[str]:
        return list(self._client.scan_iter(match=f"{self.prefix}:{kind}:*", count=1000))

    def _jobs(self) -> list[dict[str, str]]:
        return [self._client.hgetall(key) for key in self._keys("j")]

    def job_count(self) -> int:
        return len(self._keys("j"))

    def active_jobs_holding(self, unique_key: str) -> int:
        active = ("waiting", "queued", "running")
        return sum(
            1 for j in self._jobs() if j.get("unique") == unique_key and j["state"] in active
        )

    def leave_open_attempt(
        self, job_id: str, attempt: int, worker: str, started_at: datetime
    ) -> None:
        record = {"attempt": attempt, "worker": worker, "kind": "", "ckey": ""}
        record["started_at"] = int(started_at.timestamp() * 1000)
        self._client.rpush(f"{self.prefix}:att:{job_id}", json.dumps(record))

    def inline_result(self, job_id: str) -> Any:
        return self._client.hget(f"{self.prefix}:j:{job_id}", "result")

    def external_results(self, job_id: str | None = None) -> int:
        if job_id is None:
            return len(self._keys("res"))
        return int(self._client.exists(f"{self.prefix}:res:{job_id}"))

    def step_count(self) -> int:
        return sum(int(self._client.hlen(key)) for key in self._keys("st"))

    def signal_count(self) -> int:
        return sum(int(self._client.hlen(key)) for key in self._keys("sig"))

    @contextmanager
    def hold_writes(self) -> Iterator[None]:
        # Writes wait while the server is paused for them; reads go on.
        self._client.client_pause(60_000, all=False)
        try:
            yield
        finally:
            self._client.client_unpause()

    def prune_in_batches_of(self, size: int, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(sys.modules[self._store_module], "PRUNE_BATCH", size)
