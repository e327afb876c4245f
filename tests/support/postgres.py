"""The PostgreSQL server the suite uses, and databases of one's own on it.

`CHIT_TEST_POSTGRES_URL` (default postgresql://postgres@127.0.0.1:5432/test)
names a server, and a database on it to connect to for administration. A test
that needs PostgreSQL fails when the server cannot be reached: a silent skip
would let a broken PostgreSQL store pass. `CHIT_TEST_SKIP_POSTGRES=1` skips
those tests on purpose.
"""

from __future__ import annotations

import os
import secrets
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

POSTGRES_ADMIN_URL = os.environ.get(
    "CHIT_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)


def postgres_skipped() -> bool:
    return os.environ.get("CHIT_TEST_SKIP_POSTGRES", "") == "1"


def postgres_url(database: str, *, search_path: str | None = None) -> str:
    """The admin URL pointed at another database (and, optionally, schema)."""
    parts = urlsplit(POSTGRES_ADMIN_URL)
    query = parts.query
    if search_path is not None:
        option = quote(f"-csearch_path={search_path}")
        query = f"{query}&options={option}" if query else f"options={option}"
    return urlunsplit((parts.scheme, parts.netloc, f"/{database}", query, parts.fragment))


def postgres_admin() -> psycopg.Connection:
    """An autocommit connection to the admin database; fails the test if unreachable."""
    if postgres_skipped():
        pytest.skip("CHIT_TEST_SKIP_POSTGRES=1")
    try:
        return psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as e:
        error = e
    pytest.fail(
        f"PostgreSQL is unreachable at CHIT_TEST_POSTGRES_URL={POSTGRES_ADMIN_URL!r}: {error}\n"
        "Start it (`make test` does: scripts/test-deps.sh), point CHIT_TEST_POSTGRES_URL at "
        "a server, or set CHIT_TEST_SKIP_POSTGRES=1 to skip the PostgreSQL tests on purpose.",
        pytrace=False,
    )


# Databases whose drop ran out of time, with the server's DSN: dropped again
# when the test process ends (`drop_left_databases`, conftest's sessionfinish).
_left: list[tuple[str, str]] = []


def drop_database(admin: psycopg.Connection, name: str, timeout: str = "2s") -> None:
    """Drop `name` (FORCE: a test that failed half way, or a frozen process,
    may still be connected). PostgreSQL 15's DROP DATABASE then waits until
    every backend of the server, in every database, has closed its files (a
    ProcSignalBarrier); a backend blocked sending to a client that does not
    read, such as another test process's frozen worker, holds that wait up for
    as long as it is blocked. Past `timeout` the drop is left for the end of
    the session and the test goes on: its database is no use to anyone else."""
    admin.execute("SELECT set_config('statement_timeout', %s, false)", (timeout,))
    drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
    try:
        admin.execute(drop)
    except psycopg.errors.QueryCanceled:
        _left.append((admin.info.dsn, name))


def drop_left_databases() -> None:
    """Drop what `drop_database` left; a server that is gone (a test's private
    cluster) took its databases with it."""
    left = list(_left)
    _left.clear()
    for dsn, name in left:
        try:
            with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as admin:
                drop_database(admin, name, timeout="120s")
        except psycopg.OperationalError:
            continue
    for _, name in _left:  # out of time again
        sys.stderr.write(f"\nchit tests: could not drop database {name}; drop it by hand\n")


@contextmanager
def new_database(request: pytest.FixtureRequest, prefix: str = "chit_e2e") -> Iterator[str]:
    """A new, empty database on the test PostgreSQL server, dropped afterwards:
    worker processes of one test never see another test's rows or
    notifications. Yields its URL."""
    # The session database fixture checks the server is there (or skips on purpose).
    session_url: str = request.getfixturevalue("postgres_database")
    name = f"{prefix}_{secrets.token_hex(4)}"
    with psycopg.connect(session_url, autocommit=True) as admin:
        create = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        deadline = time.monotonic() + 10
        while True:
            try:
                admin.execute(create)
                break
            except psycopg.errors.ObjectInUse:
                # The template is copied only while nobody else is connected to
                # it; another session on the shared server may be, for a moment.
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    try:
        yield postgres_url(name)
    finally:
        with psycopg.connect(session_url, autocommit=True) as admin:
            drop_database(admin, name)


def sqlite_or_emptied_postgres(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """For a fixture parametrized ["sqlite", "postgres"]: a temporary SQLite file,
    or the session's PostgreSQL database with every job, key, limit, pause,
    schedule and worker deleted."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'chit.db'}"
    url: str = request.getfixturevalue("postgres_database")
    with psycopg.connect(url, autocommit=True) as conn:
        if conn.execute("SELECT to_regclass('chit_jobs')").fetchone() != (None,):
            conn.execute(
                "TRUNCATE chit_jobs, chit_attempts, chit_results, chit_api_keys, chit_limits, "
                "chit_pauses, chit_sessions, chit_schedules, chit_workers, chit_signals"
            )
    return url
