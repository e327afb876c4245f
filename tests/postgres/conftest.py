"""PostgreSQL under real conditions: worker processes through server restarts,
skewed clocks, sixteen processes and SIGKILL, connection counts, query plans.

Every module gives the tests a `db_url`: a database of their own on the test
server (`pg_database_url`), or on a private server the module starts
(`cluster`, see support/pg_cluster.py) when a test restarts the server or needs
more connections than the shared one should give. `procs` and `queue`
(tests/conftest.py) run the end-to-end tests' app (support/e2e_app.py) on it.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from support.pg_cluster import Cluster
from support.postgres import drop_database, new_database


@pytest.fixture
def pg_database_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A new database on the test server (CHIT_TEST_POSTGRES_URL), dropped after the test."""
    with new_database(request, "chit_pg") as url:
        yield url


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """A private PostgreSQL server for the module, with the module's
    `CLUSTER_SETTINGS` (postgresql.conf values); always stopped and deleted at the end."""
    # The session database fixture fails (or skips on purpose) when there is no PostgreSQL.
    request.getfixturevalue("postgres_database")
    server = Cluster(**getattr(request.module, "CLUSTER_SETTINGS", {}))
    try:
        server.start()
        yield server
    finally:
        server.destroy()


@pytest.fixture
def cluster_database_url(cluster: Cluster) -> Iterator[str]:
    """A new database on the module's private server, dropped after the test."""
    name = f"chit_{secrets.token_hex(4)}"
    with psycopg.connect(cluster.url(), autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield cluster.url(name)
    finally:
        if not cluster.running:
            cluster.start()  # a test that failed with the server down
        with psycopg.connect(cluster.url(), autocommit=True) as admin:
            drop_database(admin, name)
