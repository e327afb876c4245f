"""Real worker processes, and the means to hurt them. Every test runs twice:
on a temporary SQLite file, and on a PostgreSQL database created for the test
(and dropped after it) on the test server.

Every process started through `procs` is killed at teardown, even when the test
failed: stopped processes are continued first so SIGKILL can reap them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_support import Database, Procs, app_queue, postgres_database, running_procs

import chit


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    if request.param == "sqlite":
        path = tmp_path / "chit.db"
        yield Database("sqlite", f"sqlite:///{path}", path)
        return
    with postgres_database(request) as url:
        yield Database("postgres", url)


@pytest.fixture
def db_url(database: Database) -> str:
    return database.url


@pytest.fixture
def procs(tmp_path: Path, db_url: str) -> Iterator[Procs]:
    with running_procs(tmp_path, db_url) as p:
        yield p


@pytest.fixture
def queue(db_url: str) -> Iterator[chit.Queue]:
    """The test app's tasks on this test's database, to enqueue and to read jobs."""
    with app_queue(db_url) as q:
        yield q
