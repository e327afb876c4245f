"""Dashboard benchmark: each page's server time with 1,000,000 jobs in the table,
on SQLite and on PostgreSQL.

Not a test: prints timings. The jobs are seeded with one INSERT ... SELECT per
table (a recursive CTE on SQLite, generate_series on PostgreSQL), spread over
three days as a busy system would leave them: 93 % succeeded, 3 % failed (20
distinct errors), 1 % cancelled, a backlog of 10,000 queued and 100 running (10
with a stale lease), 8 kinds, 5 % of them another tenant's, one idempotency key
in ten, one attempt record per claimed job. PostgreSQL is then vacuumed, as
autovacuum would; SQLite is left without ANALYZE, as chit leaves it.

Each page is requested in-process (the real app through httpx's ASGI
transport: routing, authentication, store calls, rendering) `--runs` times;
the median and the slowest are printed, for an operator's key (every tenant),
a bare key (the default tenant) and a tenant's read key.

    .venv/bin/python bench/dashboard_bench.py [--jobs 1000000] [--backend sqlite|postgres]
        [--plans] [--keep]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
from psycopg import sql

import chit
from chit.api import create_app
from chit.settings import Settings

ROOT_KEY = "bench-root-0123456789"  # every tenant
BARE_KEY = "bench-bare-0123456789"  # the default tenant
ACME_KEY = "bench-acme-0123456789"  # tenant acme, read
KEYS = (f"*:admin:{ROOT_KEY}", BARE_KEY, f"acme:read:{ACME_KEY}")
ADMIN_URL = os.environ.get("CHIT_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
PG_DATABASE = "chit_dashboard_bench"
SPAN_SECONDS = 3 * 86400
QUEUED, RUNNING = 10_000, 100

SQLITE_SEED = """
WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < :jobs),
j AS (
    SELECT n,
           printf('%026d', n) AS id,
           'kind_' || (n % 8) AS kind,
           CASE WHEN n % 8 = 1 THEN 'reports' ELSE 'default' END AS queue,
           CASE WHEN n % 20 = 0 THEN 'acme' ELSE '' END AS tenant,
           CASE WHEN n % 10 = 0 THEN 'key-' || n END AS idempotency_key,
           CASE WHEN n > :jobs - :queued THEN 'queued'
                WHEN n > :jobs - :queued - :running THEN 'running'
                WHEN n % 100 < 3 THEN 'failed'
                WHEN n % 100 = 3 THEN 'cancelled'
                ELSE 'succeeded' END AS state,
           strftime('%Y-%m-%dT%H:%M:%fZ', 'now',
                    '-' || ((:jobs - n) * :step) || ' seconds') AS created_at
    FROM c
)
INSERT INTO chit_jobs (
    id, kind, queue, priority, payload, tenant, idempotency_key, state, attempts,
    max_attempts, run_at, lease_expires_at, lease_token, worker, result, error,
    created_at, updated_at, started_at, finished_at
)
SELECT id, kind, queue, 0, '{"n":' || n || '}', tenant, idempotency_key, state,
       CASE WHEN state = 'queued' THEN 0 ELSE 1 END, 5, created_at,
       CASE WHEN state = 'running' THEN strftime('%Y-%m-%dT%H:%M:%fZ', 'now',
            CASE WHEN n % 10 = 0 THEN '-60 seconds' ELSE '+600 seconds' END) END,
       CASE WHEN state = 'running' THEN 'token' END,
       CASE WHEN state <> 'queued' THEN 'bench:' || (n % 4) END,
       CASE WHEN state = 'succeeded' THEN '{"ok":true}' END,
       CASE WHEN state = 'failed' THEN 'ValueError: bad input ' || (n % 20) || char(10)
            || 'Traceback (most recent call last):' || char(10) || '  File "app.py", line '
            || (n % 20) END,
       created_at, created_at,
       CASE WHEN state <> 'queued' THEN created_at END,
       CASE WHEN state IN ('succeeded', 'failed', 'cancelled')
            THEN strftime('%Y-%m-%dT%H:%M:%fZ', created_at, '+1 seconds') END
FROM j
"""
SQLITE_ATTEMPTS = """
INSERT INTO chit_attempts (job_id, attempt, worker, started_at, finished_at, outcome, error)
SELECT id, 1, worker, started_at, finished_at,
       CASE state WHEN 'running' THEN NULL WHEN 'cancelled' THEN 'cancelled' ELSE state END,
       error
FROM chit_jobs WHERE state <> 'queued'
"""
PG_SEED = """
INSERT INTO chit_jobs (
    id, kind, queue, priority, payload, tenant, idempotency_key, state, attempts,
    max_attempts, run_at, lease_expires_at, lease_token, worker, result, error,
    created_at, updated_at, started_at, finished_at
)
SELECT id, kind, queue, 0, jsonb_build_object('n', n), tenant, idempotency_key, state,
       CASE WHEN state = 'queued' THEN 0 ELSE 1 END, 5, created_at,
       CASE WHEN state = 'running' THEN now() + CASE WHEN n %% 10 = 0
            THEN interval '-60 seconds' ELSE interval '600 seconds' END END,
       CASE WHEN state = 'running' THEN 'token' END,
       CASE WHEN state <> 'queued' THEN 'bench:' || (n %% 4) END,
       CASE WHEN state = 'succeeded' THEN '{"ok": true}'::jsonb END,
       CASE WHEN state = 'failed' THEN 'ValueError: bad input ' || (n %% 20) || E'\\n'
            || E'Traceback (most recent call last):\\n  File "app.py", line ' || (n %% 20) END,
       created_at, created_at,
       CASE WHEN state <> 'queued' THEN created_at END,
       CASE WHEN state IN ('succeeded', 'failed', 'cancelled')
            THEN created_at + interval '1 second' END
FROM (
    SELECT n,
           lpad(n::text, 26, '0') AS id,
           'kind_' || (n %% 8) AS kind,
           CASE WHEN n %% 8 = 1 THEN 'reports' ELSE 'default' END AS queue,
           CASE WHEN n %% 20 = 0 THEN 'acme' ELSE '' END AS tenant,
           CASE WHEN n %% 10 = 0 THEN 'key-' || n END AS idempotency_key,
           CASE WHEN n > %(jobs)s - %(queued)s THEN 'queued'
                WHEN n > %(jobs)s - %(queued)s - %(running)s THEN 'running'
                WHEN n %% 100 < 3 THEN 'failed'
                WHEN n %% 100 = 3 THEN 'cancelled'
                ELSE 'succeeded' END AS state,
           now() - (%(jobs)s - n) * %(step)s * interval '1 second' AS created_at
    FROM generate_series(1, %(jobs)s) AS n
) AS j
"""
PG_ATTEMPTS = """
INSERT INTO chit_attempts (job_id, attempt, worker, started_at, finished_at, outcome, error)
SELECT id, 1, worker, started_at, finished_at,
       CASE state WHEN 'running' THEN NULL WHEN 'cancelled' THEN 'cancelled' ELSE state END,
       error
FROM chit_jobs WHERE state <> 'queued'
"""


def seed_sqlite(path: Path, jobs: int) -> None:
    import sqlite3

    from chit.store.sqlite import SQLiteStore

    SQLiteStore(path).close()  # migrated
    with sqlite3.connect(path) as conn:
        if conn.execute("SELECT count(*) FROM chit_jobs").fetchone()[0] == jobs:
            return
        params = {"jobs": jobs, "queued": QUEUED, "running": RUNNING, "step": SPAN_SECONDS / jobs}
        conn.execute(SQLITE_SEED, params)
        conn.execute(SQLITE_ATTEMPTS)


def seed_postgres(url: str, jobs: int) -> None:
    from chit.store.postgres import PostgresStore

    PostgresStore(url, pool_size=1).close()  # migrated
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM chit_jobs").fetchone()
        if row is not None and row[0] == jobs:
            return
        conn.execute("TRUNCATE chit_jobs, chit_attempts, chit_results")
        params = {"jobs": jobs, "queued": QUEUED, "running": RUNNING, "step": SPAN_SECONDS / jobs}
        conn.execute(PG_SEED, params)
        conn.execute(PG_ATTEMPTS)
        conn.execute("VACUUM ANALYZE chit_jobs")
        conn.execute("VACUUM ANALYZE chit_attempts")


def postgres_url(database: str) -> str:
    """The admin URL pointed at another database on the same server."""
    return urlunsplit(urlsplit(ADMIN_URL)._replace(path=f"/{database}"))


@asynccontextmanager
async def client(queue: chit.Queue) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(queue)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as http:
            yield http


async def sign_in(http: httpx.AsyncClient, key: str) -> None:
    http.cookies.clear()
    page = await http.get("/ui/login")
    token = re.search(r'name="login_token" value="([^"]+)"', page.text)
    assert token is not None
    done = await http.post(
        "/ui/login", data={"login_token": token.group(1), "key": key, "next": "/ui/"}
    )
    assert done.status_code == 303, done.text


def pages(first_failed: str, jobs: int) -> list[tuple[str, str]]:
    newest = f"{jobs - QUEUED - RUNNING - 5:026d}"
    return [
        ("overview", "/ui/"),
        ("jobs", "/ui/jobs"),
        ("jobs, older page", f"/ui/jobs?cursor={newest}"),
        ("jobs, state=failed", "/ui/jobs?state=failed"),
        ("jobs, state=running", "/ui/jobs?state=running"),
        ("jobs, kind=kind_3", "/ui/jobs?kind=kind_3"),
        ("jobs, state+kind", "/ui/jobs?state=cancelled&kind=kind_3"),
        ("jobs, queue=reports", "/ui/jobs?queue=reports"),
        ("jobs, search key", f"/ui/jobs?q=key-{(jobs // 2) // 10 * 10}"),
        ("jobs, search id prefix", f"/ui/jobs?q={f'{jobs // 2:026d}'[:22]}"),
        ("job page", f"/ui/jobs/{first_failed}"),
        ("failures", "/ui/failures"),
        ("replay confirmation", "/ui/failures/replay?kind=kind_3&error=ValueError%3A+bad+input+3"),
    ]


async def measure(queue: chit.Queue, jobs: int, runs: int) -> None:
    first_failed = f"{101:026d}"  # failed (n % 100 < 3), the default tenant (n % 20 != 0)
    async with client(queue) as http:
        for label, key in (
            ("every tenant", ROOT_KEY),
            ("default tenant", BARE_KEY),
            ("tenant acme", ACME_KEY),
        ):
            await sign_in(http, key)
            print(f"\n  key: {label}")
            print(f"  {'page':<26} {'median ms':>10} {'max ms':>9}  status")
            for name, path in pages(first_failed, jobs):
                times, status = [], 0
                for _ in range(runs):
                    started = time.perf_counter()
                    response = await http.get(path)
                    times.append((time.perf_counter() - started) * 1000)
                    status = response.status_code
                print(
                    f"  {name:<26} {statistics.median(times):>10.1f} {max(times):>9.1f}  {status}"
                )
        for name, path in (("/stats (API)", "/stats"), ("/metrics (API)", "/metrics")):
            headers = {"Authorization": f"Bearer {ROOT_KEY}"}
            started = time.perf_counter()
            response = await http.get(path, headers=headers)
            took = (time.perf_counter() - started) * 1000
            print(f"  {name:<26} {took:>10.1f} {'':>9}  {response.status_code} (one run)")


def plans_sqlite(path: Path) -> None:
    import sqlite3

    from chit.store import queries

    q = queries.load("sqlite")
    cols = "id, state"
    checks = {
        "count_by_state_kind": (q["count_by_state_kind"].format(tenant="1"), {"cap": 10_000}),
        "finished_per_minute": (
            q["finished_per_minute"].format(tenant="j.tenant = :tenant"),
            {"now": "now", "tenant": ""},
        ),
        "oldest_queued": (
            q["oldest_queued"].format(columns=cols, tenant="1"),
            {"now": "now"},
        ),
        "stale_jobs": (
            q["stale_jobs"].format(columns=cols, tenant="1"),
            {"now": "now", "limit": 21},
        ),
        "failures": (q["failures"], {"tenant": None}),
    }
    with sqlite3.connect(path) as conn:
        for name, (query, params) in checks.items():
            plan = conn.execute("EXPLAIN QUERY PLAN " + query, params).fetchall()
            print(f"\n  {name}:")
            for row in plan:
                print(f"    {row[3]}")


def plans_postgres(url: str) -> None:
    from chit.store.postgres import _format, _tenant_term

    with psycopg.connect(url, autocommit=True) as conn:
        for name, params in (
            ("count_by_state_kind", {"cap": 10_000, "tenant": None}),
            ("finished_per_minute", {"now": None, "tenant": ""}),
            ("oldest_queued", {"now": None, "tenant": None}),
            ("stale_jobs", {"now": None, "tenant": None, "limit": 21}),
        ):
            query = _format(name, tenant=_tenant_term(params["tenant"]))
            print(f"\n  {name}:")
            for (line,) in conn.execute(sql.SQL("EXPLAIN ") + query, params):
                print(f"    {line}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--plans", action="store_true", help="print the query plans too")
    parser.add_argument("--keep", action="store_true", help="keep the seeded databases")
    parser.add_argument("--dir", help="where the SQLite file goes (default: a temporary folder)")
    args = parser.parse_args()
    print(f"chit dashboard benchmark: {args.jobs:,} jobs, {args.runs} runs per page")
    print(f"python {sys.version.split()[0]}, cpus {os.cpu_count()}")

    if args.backend in ("sqlite", "both"):
        folder = Path(args.dir or tempfile.mkdtemp(prefix="chit-dashboard-bench-"))
        path = folder / "bench.db"
        started = time.perf_counter()
        seed_sqlite(path, args.jobs)
        print(f"\nSQLite ({path}): seeded in {time.perf_counter() - started:.1f} s")
        queue = chit.Queue(settings=Settings(database_url=f"sqlite:///{path}", api_keys=KEYS))
        asyncio.run(measure(queue, args.jobs, args.runs))
        queue.close()
        if args.plans:
            plans_sqlite(path)
        if not args.keep:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)

    if args.backend in ("postgres", "both"):
        with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
            exists = admin.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (PG_DATABASE,)
            ).fetchone()
            if not exists:
                admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(PG_DATABASE)))
        url = postgres_url(PG_DATABASE)
        started = time.perf_counter()
        seed_postgres(url, args.jobs)
        with psycopg.connect(url) as conn:
            version = conn.execute("SHOW server_version").fetchone()
        print(
            f"\nPostgreSQL {version[0] if version else '?'}: seeded in "
            f"{time.perf_counter() - started:.1f} s"
        )
        queue = chit.Queue(settings=Settings(database_url=url, api_keys=KEYS))
        asyncio.run(measure(queue, args.jobs, args.runs))
        queue.close()
        if args.plans:
            plans_postgres(url)
        if not args.keep:
            with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
                admin.execute(
                    sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(PG_DATABASE))
                )


if __name__ == "__main__":
    main()
