"""PostgreSQL under real conditions: worker processes through server restarts,
skewed clocks, sixteen processes and SIGKILL, connection counts, query plans.

Every module gives the tests a `db_url`: a database of their own on the test
server (`pg_database_url`), or on a private server the module starts
(`cluster`, see pg_cluster.py) when a test restarts the server or needs more
connections than the shared one should give. The worker processes run the
end-to-end tests' app (tests/e2e/e2e_app.py) through their helpers.
"""

from __future__ import annotations

import secrets
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

# The process helpers and the app of the end-to-end tests (tests/e2e).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "e2e"))

from e2e_support import Procs, app_queue, postgres_database, running_procs
from pg_cluster import Cluster

import chit


@pytest.fixture
def pg_database_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A new database on the test server (CHIT_TEST_POSTGRES_URL), dropped after the test."""
    with postgres_database(request, "chit_pg") as url:
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
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@pytest.fixture
def procs(tmp_path: Path, db_url: str) -> Iterator[Procs]:
    with running_procs(tmp_path, db_url) as p:
        yield p


@pytest.fixture
def queue(db_url: str) -> Iterator[chit.Queue]:
    """The test app's tasks on this test's database, to enqueue and to read jobs."""
    with app_queue(db_url) as q:
        yield q
