"""chit on PostgreSQL: `chit worker` processes running noop_app."""

from __future__ import annotations

import psycopg

from systems import CONCURRENCY, env, kind_limits
from systems.chit_sqlite import PREFETCH
from systems.chit_sqlite import Bench as SQLiteBench


class Bench(SQLiteBench):
    def settings(self) -> str:
        return (
            f"`chit worker --concurrency {CONCURRENCY}` per process (threads; "
            f"`--prefetch {PREFETCH}`, the default){kind_limits()}"
        )

    def attempt_starts(self) -> list[float]:
        with psycopg.connect(env("CHIT_DATABASE_URL")) as conn:
            rows = conn.execute(
                "SELECT extract(epoch FROM started_at)::float8 FROM chit_attempts ORDER BY 1"
            ).fetchall()
        return [float(row[0]) for row in rows]

    def seed(self, finished: int, queued: int, analyze: bool = False) -> None:
        # Ids of digits only: valid job ids that sort before every real one.
        with psycopg.connect(env("CHIT_DATABASE_URL"), autocommit=True) as conn:
            with conn.transaction():
                conn.execute(SEED_JOBS, {"first": 0, "n": finished})
                conn.execute(SEED_ATTEMPTS)
                conn.execute(SEED_QUEUED, {"first": finished, "n": queued})
            # Autovacuum would get there on its own; do it now so every run starts
            # from the same state.
            conn.execute("VACUUM ANALYZE chit_jobs")
            conn.execute("VACUUM ANALYZE chit_attempts")
            # And from the same point of the checkpoint cycle. Seeding a million
            # rows writes enough WAL to start a checkpoint that would run through
            # the timed jobs, so that every page they touch first costs a full-page
            # image in the WAL, while a small seed starts none: the comparison
            # would measure the seed's own writes, not the claim.
            conn.execute("CHECKPOINT")


_T = "now() - interval '1 day'"

SEED_JOBS = f"""
INSERT INTO chit_jobs (id, kind, queue, priority, payload, state, attempts, max_attempts,
    run_at, created_at, updated_at, started_at, finished_at, result)
SELECT lpad(x::text, 26, '0'), 'noop', 'default', 0, jsonb_build_object('i', -1 - x, 't', 0),
    'succeeded', 1, 5, {_T}, {_T}, {_T}, {_T}, {_T}, 'null'::jsonb
FROM generate_series(%(first)s, %(first)s + %(n)s - 1) AS x
"""

SEED_ATTEMPTS = f"""
INSERT INTO chit_attempts (job_id, attempt, worker, started_at, finished_at, outcome)
SELECT id, 1, 'seed', {_T}, {_T}, 'succeeded' FROM chit_jobs WHERE state = 'succeeded'
"""

SEED_QUEUED = f"""
INSERT INTO chit_jobs (id, kind, queue, priority, payload, state, attempts, max_attempts,
    run_at, created_at, updated_at)
SELECT lpad(x::text, 26, '0'), 'noop', 'default', 0,
    jsonb_build_object('i', x - %(first)s, 't', 0), 'queued', 0, 5, {_T}, {_T}, {_T}
FROM generate_series(%(first)s, %(first)s + %(n)s - 1) AS x
"""
