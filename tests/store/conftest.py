"""The backends the conformance suite runs on. Every test that takes `store`,
`backend` or `inspect` runs once on each entry of BACKENDS; the files named
for SQL (test_sql_*) take `sql_backend` and run on the entries that speak it;
test_sqlite_* and test_postgres* are about one store alone.

A test that needs a capability beyond the core contract says so with
`@pytest.mark.needs(Reports, ...)`; on a backend whose store does not declare
it, the test is skipped, the reason naming what the store lacks.

A new store joins by adding one entry: how to build its Backend (which opens
its stores, empties its place between tests, and builds its inspection, see
support/store_backends.py and support/store_inspection.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import psycopg
import pytest

from chit.store.base import Store
from chit.store.capabilities import Capability, FullStore
from chit.store.postgres import PostgresStore
from support.postgres import postgres_url
from support.store_backends import (
    Backend,
    PostgresBackend,
    RedisBackend,
    SQLBackend,
    SQLiteBackend,
)
from support.store_inspection import StoreInspection

B = TypeVar("B", bound=Backend)


@dataclass(frozen=True)
class Entry:
    make: Callable[[pytest.FixtureRequest], Backend]
    speaks_sql: bool


def _sqlite(request: pytest.FixtureRequest) -> SQLiteBackend:
    return SQLiteBackend(request.getfixturevalue("tmp_path") / "chit.db")


def _postgres(request: pytest.FixtureRequest) -> PostgresBackend:
    """The session database, migrated once, emptied before each test."""
    return PostgresBackend(
        request.getfixturevalue("postgres_database"),
        request.getfixturevalue("postgres_admin_connection"),
        postgres_url,
    )


def _redis(request: pytest.FixtureRequest) -> RedisBackend:
    """The session's own redis-server (support/redis.py), emptied before each test."""
    return RedisBackend(request.getfixturevalue("redis_url"))


# The test ids are these names: test_x[sqlite], test_x[postgres], test_x[redis].
BACKENDS: dict[str, Entry] = {
    "sqlite": Entry(_sqlite, speaks_sql=True),
    "postgres": Entry(_postgres, speaks_sql=True),
    "redis": Entry(_redis, speaks_sql=False),
}


@pytest.fixture(scope="session")
def postgres_admin_connection(postgres_database: str) -> Iterator[psycopg.Connection]:
    """An autocommit connection to the session database, which is migrated once here."""
    PostgresStore(postgres_database, pool_size=1).close()
    with psycopg.connect(postgres_database, autocommit=True) as conn:
        yield conn


@pytest.fixture(params=list(BACKENDS))
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    chosen = BACKENDS[request.param].make(request)
    _skip_what_the_store_lacks(request, chosen)
    yield from _managed(chosen)


def _skip_what_the_store_lacks(request: pytest.FixtureRequest, chosen: Backend) -> None:
    """Skip a test marked `needs(...)` on a backend whose store lacks one of those."""
    for marker in request.node.iter_markers("needs"):
        for capability in marker.args:
            assert issubclass(capability, Capability), capability
            if issubclass(chosen.store_class, capability):
                continue
            if capability is FullStore:
                what = "every capability, which open_store asks of the store a URL names"
            else:
                what = capability.what
            pytest.skip(f"{chosen.store_class.__name__} does not offer {what}")


@pytest.fixture(params=[name for name, entry in BACKENDS.items() if entry.speaks_sql])
def sql_backend(request: pytest.FixtureRequest) -> Iterator[SQLBackend]:
    """A backend of an SQL store, for what only they have (test_sql_*)."""
    chosen = BACKENDS[request.param].make(request)
    assert isinstance(chosen, SQLBackend)
    yield from _managed(chosen)


@pytest.fixture
def pg(request: pytest.FixtureRequest) -> Iterator[PostgresBackend]:
    """PostgreSQL alone, for tests of what only it has."""
    yield from _managed(_postgres(request))


def _managed(chosen: B) -> Iterator[B]:
    """Empty before the test; close every store and fresh place after it."""
    chosen.reset()
    fresh: list[Backend] = []
    chosen.fresh = _tracking(chosen.fresh, fresh)  # type: ignore[method-assign]
    try:
        yield chosen
    finally:
        chosen.close()
        for other in fresh:
            other.close()


def _tracking(make: Callable[[], Backend], made: list[Backend]) -> Callable[[], Backend]:
    def fresh() -> Backend:
        backend = make()
        made.append(backend)
        return backend

    return fresh


@pytest.fixture
def store(backend: Backend) -> Store:
    return backend.open()


@pytest.fixture
def inspect(backend: Backend) -> StoreInspection:
    """What the test reads or arranges beside the store's own calls."""
    return backend.inspect
