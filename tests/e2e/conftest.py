"""Real worker processes, and the means to hurt them. Every test runs twice:
on a temporary SQLite file, and on a PostgreSQL database created for the test
(and dropped after it) on the test server.

Every process started through `procs` is killed at teardown, even when the test
failed: stopped processes are continued first so SIGKILL can reap them."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_support import HERE, Database, Procs, postgres_database

import chit
from chit.settings import Settings


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
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHIT_")}
    env |= {
        "CHIT_DATABASE_URL": db_url,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")])),
        "PYTHONUNBUFFERED": "1",
        # Retries in these tests are about leases, not backoff.
        "CHIT_BACKOFF_BASE": "0.05",
        "CHIT_BACKOFF_MAX": "0.1",
        # An idle worker looks for work at least this often.
        "CHIT_POLL_INTERVAL": "0.2",
    }
    p = Procs(tmp_path, env)
    try:
        yield p
    finally:
        p.cleanup()


@pytest.fixture
def queue(db_url: str) -> Iterator[chit.Queue]:
    """The test app's tasks on this test's database, to enqueue and to read jobs."""
    import e2e_app

    q = chit.Queue(settings=Settings(database_url=db_url))
    q.tasks.update(e2e_app.queue.tasks)
    q.store.migrate()
    yield q
    q.close()
