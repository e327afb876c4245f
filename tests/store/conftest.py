"""The backends the store suite runs on: every test that takes `store` or
`backend` runs once on SQLite (a temporary file) and once on PostgreSQL (the
session database, emptied before each test)."""

from __future__ import annotations

import secrets
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest
from psycopg import sql

from chit.store.base import Store
from chit.store.postgres import PostgresStore
from chit.store.sqlite import SQLiteStore
from support.postgres import postgres_url

B = TypeVar("B", bound="Backend")


class Backend:
    """One place a store lives: opens store objects on it, empties it, runs raw SQL."""

    name: str

    def __init__(self) -> None:
        self._opened: list[Store] = []

    def open(self, **options: Any) -> Store:
        """A new store object on the same database (its own connections)."""
        store = self._open(**options)
        self._opened.append(store)
        return store

    def _open(self, **options: Any) -> Store:
        raise NotImplementedError

    def fresh(self) -> Backend:
        """Another, empty location of the same kind (not migrated)."""
        raise NotImplementedError

    def reset(self) -> None:
        """Delete every job, attempt and result; keep the schema."""
        raise NotImplementedError

    def connect(self) -> Any:
        """A connection of the application's own, in its driver's default
        (transactional) mode, for enqueue inside the application's transaction."""
        raise NotImplementedError

    def execute(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Raw SQL outside the store, for checks the contract does not expose.
        Placeholders are `?` (translated for PostgreSQL)."""
        raise NotImplementedError

    def copy_jobs_from(self, source: Backend) -> None:
        """Every job and attempt of `source` (a location of the same kind,
        migrated further) into this one, in the columns this one has: the jobs
        a store of an older schema would have written, made by today's code."""
        raise NotImplementedError

    def close(self) -> None:
        for store in self._opened:
            store.close()
        self._opened.clear()


class SQLiteBackend(Backend):
    name = "sqlite"

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    def _open(self, **options: Any) -> Store:
        return SQLiteStore(self.path, **options)

    def fresh(self) -> Backend:
        return SQLiteBackend(self.path.with_name(f"fresh-{secrets.token_hex(4)}.db"))

    def reset(self) -> None:
        if self.path.exists():
            self.execute("DELETE FROM chit_jobs")  # attempts and results cascade

    def connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30)

    def copy_jobs_from(self, source: Backend) -> None:
        assert isinstance(source, SQLiteBackend)
        with closing(sqlite3.connect(self.path, timeout=30)) as conn, conn:
            conn.execute("ATTACH DATABASE ? AS source", (str(source.path),))
            for table in ("chit_jobs", "chit_edges", "chit_attempts", "chit_results"):
                names = [r[1] for r in conn.execute(f"PRAGMA main.table_info({table})")]
                columns = ", ".join(names)
                conn.execute(
                    f"INSERT INTO main.{table} ({columns}) SELECT {columns} FROM source.{table}"
                )

    def execute(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with closing(sqlite3.connect(self.path, timeout=30)) as conn:
            conn.execute("PRAGMA foreign_keys = ON")
            with conn:
                return conn.execute(query, params).fetchall()


class PostgresBackend(Backend):
    name = "postgres"

    def __init__(
        self,
        url: str,
        admin: psycopg.Connection,
        url_for: Callable[..., str],
        schema: str | None = None,
    ) -> None:
        super().__init__()
        self.url = url
        self.url_for = url_for
        self.admin = admin  # autocommit, on the same database and search_path
        self.schema = schema

    def _open(self, **options: Any) -> Store:
        options.setdefault("pool_size", 4)
        return PostgresStore(self.url, **options)

    def fresh(self) -> Backend:
        """An empty schema in the session database, dropped at teardown."""
        schema = f"fresh_{secrets.token_hex(4)}"
        self.admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        database = self.admin.info.dbname
        url = self.url_for(database, search_path=schema)
        return PostgresBackend(url, psycopg.connect(url, autocommit=True), self.url_for, schema)

    def reset(self) -> None:
        tables = [
            r[0]
            for r in self.admin.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
                " AND tablename LIKE 'chit%%' AND tablename <> 'chit_schema_migrations'"
            )
        ]
        if tables:
            self.admin.execute(
                sql.SQL("TRUNCATE {} CASCADE").format(
                    sql.SQL(", ").join(sql.Identifier(t) for t in tables)
                )
            )

    def connect(self) -> psycopg.Connection:
        return psycopg.connect(self.url)

    def copy_jobs_from(self, source: Backend) -> None:
        assert isinstance(source, PostgresBackend) and source.schema and self.schema
        for table in ("chit_jobs", "chit_attempts", "chit_results"):
            names = [
                r[0]
                for r in self.admin.execute(
                    "SELECT column_name FROM information_schema.columns"
                    " WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
                    (self.schema, table),
                )
            ]
            columns = sql.SQL(", ").join(sql.Identifier(n) for n in names)
            self.admin.execute(
                sql.SQL(
                    "INSERT INTO {}.{} ({}) OVERRIDING SYSTEM VALUE SELECT {} FROM {}.{}"
                ).format(
                    sql.Identifier(self.schema),
                    sql.Identifier(table),
                    columns,
                    columns,
                    sql.Identifier(source.schema),
                    sql.Identifier(table),
                )
            )

    def execute(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        cursor = self.admin.execute(query.replace("?", "%s"), params)
        return cursor.fetchall() if cursor.description else []

    def close(self) -> None:
        super().close()
        if self.schema is not None:
            self.admin.execute(
                sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(self.schema))
            )
            self.admin.close()


@pytest.fixture(scope="session")
def postgres_admin_connection(postgres_database: str) -> Iterator[psycopg.Connection]:
    """An autocommit connection to the session database, which is migrated once here."""
    PostgresStore(postgres_database, pool_size=1).close()
    with psycopg.connect(postgres_database, autocommit=True) as conn:
        yield conn


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    chosen: Backend
    if request.param == "sqlite":
        chosen = SQLiteBackend(tmp_path / "chit.db")
    else:
        chosen = _postgres_backend(request)
    yield from _managed(chosen)


@pytest.fixture
def pg(request: pytest.FixtureRequest) -> Iterator[PostgresBackend]:
    """PostgreSQL alone, for tests of what only it has."""
    backend = _postgres_backend(request)
    yield from _managed(backend)


def _postgres_backend(request: pytest.FixtureRequest) -> PostgresBackend:
    return PostgresBackend(
        request.getfixturevalue("postgres_database"),
        request.getfixturevalue("postgres_admin_connection"),
        postgres_url,
    )


def _managed(chosen: B) -> Iterator[B]:
    """Empty before the test; close every store and fresh location after it."""
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
