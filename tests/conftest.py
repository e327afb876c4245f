"""Fixtures shared by every test directory: the PostgreSQL server the suite uses
(see support/postgres.py), the database of the in-process API and dashboard
tests, and worker processes for the folders that define `db_url`.

The suite creates a database of its own on the server once per session
(`chit_test_<pid>_<random>`) and drops it at the end."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from psycopg import sql

import chit
from support.jobs import app_queue
from support.postgres import (
    drop_database,
    drop_left_databases,
    postgres_admin,
    postgres_url,
    sqlite_or_emptied_postgres,
)
from support.processes import Procs, running_procs
from support.redis import emptied_redis, redis_url  # noqa: F401  (redis_url: a fixture)


@pytest.fixture(scope="session")
def postgres_database() -> Iterator[str]:
    """URL of an empty database created for this test session."""
    name = f"chit_test_{os.getpid()}_{secrets.token_hex(4)}"
    with postgres_admin() as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield postgres_url(name)
    finally:
        with postgres_admin() as admin:
            drop_database(admin, name)


def pytest_sessionfinish() -> None:
    drop_left_databases()


# For the in-process API and dashboard tests.


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# The PostgreSQL half is left out of `make test-fast` (the stores' own tests run
# on both backends there): every test that takes it builds an app, and those
# were most of the fast loop's time.
@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.slow),
        pytest.param("redis", marks=pytest.mark.slow),
    ]
)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A temporary SQLite file, the session's PostgreSQL database emptied, or
    the session's redis-server emptied."""
    if request.param == "redis":
        return emptied_redis(request.getfixturevalue("redis_url"))
    return sqlite_or_emptied_postgres(request, tmp_path)


# For the folders that define `db_url` (e2e, postgres): real worker processes on it.


@pytest.fixture
def procs(tmp_path: Path, db_url: str) -> Iterator[Procs]:
    """Start processes on the test's database; every one is killed at teardown,
    even when the test failed (stopped processes are continued first)."""
    with running_procs(tmp_path, db_url) as p:
        yield p


@pytest.fixture
def queue(db_url: str) -> Iterator[chit.Queue]:
    """The end-to-end app's tasks on the test's database, to enqueue and to read
    jobs. (Folders without `db_url` define a `queue` of their own.)"""
    with app_queue(db_url) as q:
        yield q
