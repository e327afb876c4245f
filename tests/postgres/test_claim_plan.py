"""The claim walks the partial index of claimable rows, so its cost does not grow
with finished jobs: the plan of the claim query on 1,000,000 finished and 100,000
queued rows, on both backends. Timings are printed beside a small table's, not
asserted (this machine is shared); the plan is asserted.

PostgreSQL plans from statistics ANALYZE gathers on the rows, so it gets the
rows. SQLite plans from sqlite_stat1 alone (this build has no STAT4 samples):
without it (the store never runs ANALYZE) the plan does not depend on the rows
at all, and with it only on the counts, so it gets the statistics ANALYZE writes
on a table that size instead of the rows (seeding them took most of a minute).
With those statistics the claim before 0c58095 skip-scanned and sorted every
due job ("USE TEMP B-TREE FOR ORDER BY").
"""

from __future__ import annotations

import re
import sqlite3
import statistics
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from chit.store import queries
from chit.store.base import Store
from chit.store.postgres import PostgresStore
from chit.store.sql import kinds_term
from chit.store.sqlite import SQLiteStore

pytestmark = pytest.mark.slow

FINISHED = 1_000_000
QUEUED = 100_000
# The claim's {held} as a worker runs it (the kinds it has code for) while
# another kind has a limit: the plan must not change.
HELD = kinds_term(["limited-kind"], frozenset({"noop", "other-kind", "limited-kind"}))


class Seeded:
    """A store of one backend, and raw SQL beside it to fill it fast and explain."""

    store: Store

    def seed(self, prefix: str, finished: int, queued: int) -> None:
        raise NotImplementedError

    def grow(self, finished: int, queued: int) -> None:
        """The table as the planner sees it with this many rows more."""
        self.seed("b", finished, queued)

    def plan(self) -> str:
        raise NotImplementedError

    def close(self) -> None:
        self.store.close()


class SQLiteSeeded(Seeded):
    def __init__(self, path: Path) -> None:
        self.path = path
        self.store = SQLiteStore(path)

    def seed(self, prefix: str, finished: int, queued: int) -> None:
        conn = sqlite3.connect(self.path, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            for state, count in (("succeeded", finished), ("queued", queued)):
                done = "'2020-01-01T00:00:00.000Z'" if state == "succeeded" else "NULL"
                conn.execute(
                    f"""
                    WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ?)
                    INSERT INTO chit_jobs (id, kind, queue, priority, payload, state, attempts,
                        max_attempts, run_at, created_at, updated_at, started_at, finished_at)
                    SELECT ? || printf('%09d', n), 'noop', 'default', 0, '{{}}', ?,
                        ? = 'succeeded', 5, '2020-01-01T00:00:00.000Z',
                        '2020-01-01T00:00:00.000Z', '2020-01-01T00:00:00.000Z', {done}, {done}
                    FROM g
                    """,
                    (count, f"{prefix}{state[0]}", state, state),
                )
            conn.execute("COMMIT")
        finally:
            conn.close()

    # The grown table in the same proportions, at 1 / SCALE of its rows.
    SCALE = 100

    def grow(self, finished: int, queued: int) -> None:
        """What SQLite's planner would know of `finished` and `queued` more rows:
        the plan workers get (no statistics) is taken first; then 1 / SCALE of the
        rows, ANALYZE, and its statistics scaled up to what ANALYZE writes on the
        whole table: every row count times SCALE, except that a key prefix that
        matches one row (unique) still matches one."""
        self.without_statistics = self._plan()
        self.seed("b", finished // self.SCALE, queued // self.SCALE)
        with closing(sqlite3.connect(self.path)) as conn:
            conn.execute("ANALYZE chit_jobs")
            stats = conn.execute(
                "SELECT idx, stat FROM sqlite_stat1 WHERE tbl = 'chit_jobs'"
            ).fetchall()
            assert stats, "ANALYZE wrote no statistics"
            scaled = [
                (
                    idx,
                    " ".join(str(n if n == 1 else n * self.SCALE) for n in map(int, stat.split())),
                )
                for idx, stat in stats
            ]
            conn.executemany(
                "UPDATE sqlite_stat1 SET stat = ? WHERE tbl = 'chit_jobs' AND idx IS ?",
                [(stat, idx) for idx, stat in scaled],
            )
            conn.commit()
        self.statistics = dict(scaled)

    def _plan(self) -> str:
        # A new connection reads sqlite_stat1 as it opens the schema.
        with closing(sqlite3.connect(self.path)) as conn:
            params = {"queue": "default", "worker": "w", "limit": 10, "lease": "+30 seconds"}
            claim = queries.load("sqlite")["claim"].replace("{held}", HELD)
            rows = conn.execute("EXPLAIN QUERY PLAN " + claim, params | {"now": "now"}).fetchall()
        return "\n".join(row[-1] for row in rows)

    def plan(self) -> str:
        return (
            self.without_statistics
            + "\n--- with the statistics of the grown table ---\n"
            + self._plan()
        )


class PostgresSeeded(Seeded):
    def __init__(self, url: str) -> None:
        self.url = url
        self.store = PostgresStore(url, pool_size=2)
        self.conn = psycopg.connect(url, autocommit=True)

    def seed(self, prefix: str, finished: int, queued: int) -> None:
        # A million rows load faster into the table alone, its indexes built after
        # (the same definitions, read back from the catalog), than through them.
        indexes = self.conn.execute(
            """
            SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid)
            FROM pg_index i
            WHERE i.indrelid = 'chit_jobs'::regclass
              AND NOT EXISTS (SELECT FROM pg_constraint c WHERE c.conindid = i.indexrelid)
            """
        ).fetchall()
        for name, _ in indexes:
            self.conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(name)))
        for state, count in (("succeeded", finished), ("queued", queued)):
            done = "now()" if state == "succeeded" else "NULL"
            self.conn.execute(
                f"""
                INSERT INTO chit_jobs (id, kind, queue, priority, payload, state, attempts,
                    max_attempts, run_at, created_at, updated_at, started_at, finished_at)
                SELECT %(prefix)s || lpad(g::text, 9, '0'), 'noop', 'default', 0, '{{}}',
                    %(state)s, CASE WHEN %(state)s = 'succeeded' THEN 1 ELSE 0 END, 5,
                    now() - interval '1 day', now() - interval '1 day', now(), {done}, {done}
                FROM generate_series(1, %(count)s) AS g
                """,
                {"prefix": f"{prefix}{state[0]}", "state": state, "count": count},
            )
        for _, definition in indexes:
            self.conn.execute(definition)
        # Each finished job's attempt, closed: what the claim's look for an
        # attempt left open (by job, chit_attempts_job) walks past.
        self.conn.execute(
            """
            INSERT INTO chit_attempts (job_id, attempt, worker, started_at, finished_at,
                outcome, kind)
            SELECT id, 1, 'w', started_at, finished_at, 'succeeded', kind FROM chit_jobs
            WHERE id LIKE %(prefix)s
            """,
            {"prefix": f"{prefix}s%"},
        )
        # What autovacuum does soon after a bulk load, here at once.
        self.conn.execute("ANALYZE chit_jobs")
        self.conn.execute("ANALYZE chit_attempts")

    def plan(self) -> str:
        """The plan of the claim as workers run it: a custom plan for the first
        executions, then, as a prepared statement, possibly a generic one; both
        must walk the index."""
        params: dict[str, Any] = {
            "queue": "default",
            "worker": "w",
            "limit": 10,
            "lease": "30 seconds",
            "now": None,
        }
        claim = queries.load("postgres")["claim"].replace("{held}", HELD)
        custom = self.conn.execute("EXPLAIN " + claim, params).fetchall()
        names: list[str] = []

        def positional(match: re.Match[str]) -> str:
            if match.group(1) not in names:
                names.append(match.group(1))
            return f"${names.index(match.group(1)) + 1}"

        prepared = re.sub(r"%\((\w+)\)s", positional, claim)
        self.conn.execute("PREPARE chit_claim_plan AS " + prepared)
        self.conn.execute("SET plan_cache_mode = force_generic_plan")
        args = sql.SQL(", ").join(sql.Literal(params[n]) for n in names)
        generic = self.conn.execute(
            sql.SQL("EXPLAIN EXECUTE chit_claim_plan({})").format(args)
        ).fetchall()
        self.conn.execute("DEALLOCATE chit_claim_plan")
        self.conn.execute("RESET plan_cache_mode")
        return (
            "\n".join(r[0] for r in custom)
            + "\n--- generic ---\n"
            + "\n".join(r[0] for r in generic)
        )

    def close(self) -> None:
        super().close()
        self.conn.close()


@pytest.fixture(params=["sqlite", "postgres"])
def seeded(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Seeded]:
    chosen: Seeded
    if request.param == "sqlite":
        chosen = SQLiteSeeded(tmp_path / "chit.db")
    else:
        chosen = PostgresSeeded(request.getfixturevalue("pg_database_url"))
    try:
        yield chosen
    finally:
        chosen.close()


def claim_ms(store: Store) -> float:
    """Median wall time of a claim of 10 jobs, in milliseconds."""
    times = []
    for _ in range(7):
        started = time.perf_counter()
        claimed = store.claim("plan-test", ("default",), 10, 30.0)
        times.append((time.perf_counter() - started) * 1000)
        assert len(claimed) == 10
    return statistics.median(times)


@pytest.mark.timeout(120)
def test_claim_walks_the_partial_index_with_a_million_finished_rows(seeded: Seeded) -> None:
    seeded.seed("a", 1_000, 1_000)
    small = claim_ms(seeded.store)
    started = time.monotonic()
    seeded.grow(FINISHED, QUEUED)
    loaded = time.monotonic() - started
    plan = seeded.plan()
    large = claim_ms(seeded.store)
    grown = (
        f"{FINISHED:,} finished and {QUEUED:,} queued more"
        if isinstance(seeded, PostgresSeeded)
        else f"the statistics of {FINISHED:,} finished and {QUEUED:,} queued more"
    )
    print(
        f"\n{type(seeded).__name__}: claim of 10 jobs, median of 7: {small:.2f} ms with 2,000 "
        f"rows, {large:.2f} ms with {grown} (loaded in {loaded:.1f}s)\n{plan}"
    )
    if isinstance(seeded, SQLiteSeeded):
        for one in plan.split("--- with the statistics of the grown table ---"):
            assert "USING INDEX chit_jobs_claimable" in one
            # No full scan of the table ("SCAN chit_jobs"); lookups by key are SEARCHes.
            assert not re.search(r"\bSCAN chit_jobs\b", one)
            # Walked in the index's order up to the limit, not every due job sorted.
            assert "TEMP B-TREE" not in one
    else:
        custom, generic = plan.split("--- generic ---")
        for one in (custom, generic):
            assert "Index Scan using chit_jobs_claimable on chit_jobs" in one
            assert "Seq Scan" not in one
