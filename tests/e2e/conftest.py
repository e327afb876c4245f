"""Real worker processes, and the means to hurt them. Every test runs twice:
on a temporary SQLite file, and on a PostgreSQL database created for the test
(and dropped after it) on the test server. `procs` and `queue` (tests/conftest.py)
start workers on that database and read its jobs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from support.postgres import new_database
from support.processes import Database


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    if request.param == "sqlite":
        path = tmp_path / "chit.db"
        yield Database("sqlite", f"sqlite:///{path}", path)
        return
    with new_database(request) as url:
        yield Database("postgres", url)


@pytest.fixture
def db_url(database: Database) -> str:
    return database.url
