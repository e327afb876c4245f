"""Fixtures shared by every test directory: the PostgreSQL server the suite uses.

`CHIT_TEST_POSTGRES_URL` (default postgresql://postgres@127.0.0.1:5432/test)
names a server, and a database on it to connect to for administration. The
suite creates a database of its own there once per session
(`chit_test_<pid>_<random>`) and drops it at the end.

A test that needs PostgreSQL fails when the server cannot be reached: a silent
skip would let a broken PostgreSQL store pass. Set `CHIT_TEST_SKIP_POSTGRES=1`
to skip those tests on purpose.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator
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
        "Start it (e.g. .ci/run does), point CHIT_TEST_POSTGRES_URL at a server, or set "
        "CHIT_TEST_SKIP_POSTGRES=1 to skip the PostgreSQL tests on purpose.",
        pytrace=False,
    )


@pytest.fixture(scope="session")
def postgres_url_for() -> Callable[..., str]:
    """`postgres_url` as a fixture, for conftest files below this one."""
    return postgres_url


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
            # FORCE: a test that failed half way may have left a connection open.
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
