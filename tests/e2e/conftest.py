"""Real worker processes, and the means to hurt them. Every test runs three
times: on a temporary SQLite file, on a PostgreSQL database created for the
test (and dropped after it) on the test server, and on the test process's own
redis-server, emptied. `procs` and `queue` (tests/conftest.py)
start workers on that database and read its jobs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from support.postgres import new_database
from support.processes import Database
from support.redis import emptied_redis


@pytest.fixture(params=["sqlite", "postgres", "redis"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    if request.param == "sqlite":
        path = tmp_path / "chit.db"
        yield Database("sqlite", f"sqlite:///{path}", path)
        return
    if request.param == "redis":
        yield Database("redis", emptied_redis(request.getfixturevalue("redis_url")))
        return
    with new_database(request) as url:
        yield Database("postgres", url)


@pytest.fixture
def db_url(database: Database) -> str:
    return database.url
