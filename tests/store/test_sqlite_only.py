"""SQLite only: what follows from how this backend runs its statements, which
PostgreSQL does differently (one statement per rescue there; a planner with
statistics). Everything else is in the shared suite (test_contract.py)."""

from __future__ import annotations

import sqlite3
import time
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

from chit.jobs import NewJob
from chit.store.sqlite import SQLiteStore


def test_sqlite_rescue_in_two_statements_closes_the_attempts_of_exactly_the_jobs_it_took_back(
    tmp_path: Path,
) -> None:
    path = tmp_path / "chit.db"
    store = SQLiteStore(path)
    first = store.enqueue(NewJob("k", {}, priority=0)).id
    second = store.enqueue(NewJob("k", {}, priority=1)).id
    assert len(store.claim("w1", ["default"], 2, 30)) == 2
    with closing(sqlite3.connect(path, isolation_level=None)) as raw:
        # The first lease is over; the second ends while the rescue is under way.
        expire = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ?)"
        raw.execute(
            f"UPDATE chit_jobs SET lease_expires_at = {expire} WHERE id = ?", ("-1 seconds", first)
        )
        raw.execute(
            f"UPDATE chit_jobs SET lease_expires_at = {expire} WHERE id = ?",
            ("+0.3 seconds", second),
        )

    def slow_disk(statement: str) -> None:
        # A busy machine between the store's statements: the second lease runs out here.
        if "UPDATE chit_jobs" in statement and "lease expired after" in statement:
            time.sleep(0.5)

    store._conn().set_trace_callback(slow_disk)
    report = store.rescue_expired()
    store._conn().set_trace_callback(None)

    # Whichever of the two it took back, a job has an open attempt if and only if
    # it is running, and the next claims work.
    assert report.requeued >= 1
    with closing(sqlite3.connect(path)) as raw:
        running = raw.execute("SELECT id FROM chit_jobs WHERE state = 'running'").fetchall()
        open_attempts = raw.execute(
            "SELECT job_id FROM chit_attempts WHERE finished_at IS NULL"
        ).fetchall()
    assert sorted(open_attempts) == sorted(running)
    later = datetime.now(UTC) + timedelta(seconds=1)
    store.rescue_expired(now=later)
    assert {j.id for j in store.claim("w2", ["default"], 2, 30, now=later)} == {first, second}
    store.close()
