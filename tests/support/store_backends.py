"""The places a store can live, for the conformance suite (tests/store): each
opens store objects on its place, empties it, makes another empty place of
its kind, and builds the inspection (support/store_inspection.py) the shared
tests read the data through.

`SQLBackend` adds what only the SQL stores have, for the files named for them
(test_sql_*, test_sqlite_*, test_postgres*): raw SQL, the application's own
connection, and copying jobs between schema versions.
"""

from __future__ import annotations

import secrets
import sqlite3
from collections.abc import Callable
from contextlib import closing
from functools import cached_property
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from psycopg import sql

from chit.store.base import Store
from chit.store.postgres import PostgresStore
from chit.store.sqlite import SQLiteStore
from support.invariants import BROKEN_INVARIANTS, redis_index_faults
from support.store_inspection import (
    PostgresInspection,
    RedisInspection,
    SQLiteInspection,
    StoreInspection,
)


class Backend:
    """One place a store lives."""

    name: str
    store_class: type[Store]  # what `open` opens: the capabilities it declares

    def __init__(self) -> None:
        self._opened: list[Store] = []

    @property
    def database_url(self) -> str:
        """CHIT_DATABASE_URL for this place, for tests that open it as an app does."""
        raise NotImplementedError

    @cached_property
    def inspect(self) -> StoreInspection:
        return self._inspection()

    def _inspection(self) -> StoreInspection:
        raise NotImplementedError

    def open(self, **options: Any) -> Store:
        """A new store object on the same place (its own connections)."""
        store = self._open(**options)
        self._opened.append(store)
        return store

    def _open(self, **options: Any) -> Store:
        raise NotImplementedError

    def fresh(self) -> Backend:
        """Another, empty place of the same kind (not migrated)."""
        raise NotImplementedError

    def reset(self) -> None:
        """Delete every job, attempt and result; keep the schema."""
        raise NotImplementedError

    def close(self) -> None:
        for store in self._opened:
            store.close()
        self._opened.clear()


class SQLBackend(Backend):
    """A place an SQL store lives."""

    def connect(self) -> Any:
        """A connection of the application's own, in its driver's default
        (transactional) mode, for enqueue inside the application's transaction."""
        raise NotImplementedError

    def execute(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Raw SQL outside the store. Placeholders are `?` (translated for PostgreSQL)."""
        raise NotImplementedError

    def copy_jobs_from(self, source: Backend) -> None:
        """Every job and attempt of `source` (a place of the same kind,
        migrated further) into this one, in the columns this one has: the jobs
        a store of an older schema would have written, made by today's code."""
        raise NotImplementedError


class SQLiteBackend(SQLBackend):
    name = "sqlite"
    store_class = SQLiteStore

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    @property
    def database_url(self) -> str:
        return f"sqlite:///{self.path}"

    def _inspection(self) -> StoreInspection:
        return SQLiteInspection(self.path, SQLiteStore.__module__)

    def _open(self, **options: Any) -> Store:
        return SQLiteStore(self.path, **options)

    def fresh(self) -> Backend:
        return SQLiteBackend(self.path.with_name(f"fresh-{secrets.token_hex(4)}.db"))

    def reset(self) -> None:
        if self.path.exists():
            self.execute("DELETE FROM chit_jobs")  # attempts, results and steps cascade

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


class PostgresBackend(SQLBackend):
    name = "postgres"
    store_class = PostgresStore

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

    @property
    def database_url(self) -> str:
        return self.url

    def _inspection(self) -> StoreInspection:
        return PostgresInspection(self.url, self.execute, PostgresStore.__module__)

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
        if self.schema is None:  # the session database, migrated to the latest version
            broken = self.execute(BROKEN_INVARIANTS)
            assert not broken, f"jobs that break the state machine's invariants: {broken}"
        else:
            self.admin.execute(
                sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(self.schema))
            )
            self.admin.close()


class RedisBackend(Backend):
    """Keys under one prefix on the session's own redis-server; another place
    is another prefix on it."""

    name = "redis"

    def __init__(self, url: str, prefix: str = "{chit}") -> None:
        from chit.store.redis import RedisStore

        super().__init__()
        self.url = url
        self.prefix = prefix
        self.store_class = RedisStore

    @property
    def database_url(self) -> str:
        if self.prefix == "{chit}":
            return self.url
        return f"{self.url}?prefix={quote(self.prefix)}"

    def _inspection(self) -> StoreInspection:
        return RedisInspection(self.url, self.prefix, "chit.store.redis.core")

    def _open(self, **options: Any) -> Store:
        return self.store_class(self.url, prefix=self.prefix, **options)

    def fresh(self) -> Backend:
        return RedisBackend(self.url, "{chit-" + secrets.token_hex(4) + "}")

    def reset(self) -> None:
        import redis

        with closing(redis.Redis.from_url(self.url)) as client:
            keys = list(client.scan_iter(match=f"{self.prefix}:*", count=1000))
            for start in range(0, len(keys), 1000):
                client.unlink(*keys[start : start + 1000])

    def close(self) -> None:
        import redis

        with closing(redis.Redis.from_url(self.url, decode_responses=True)) as client:
            faults = redis_index_faults(client, self.prefix)
        super().close()
        if self.prefix != "{chit}":
            self.reset()
        assert not faults, "indexes that disagree with the jobs:\n" + "\n".join(faults)


def needs(*capabilities: type) -> pytest.MarkDecorator:
    """Mark a store test as needing these capabilities beyond the core contract:
    skipped on a backend whose store does not declare one (tests/store/conftest.py)."""
    return pytest.mark.needs.with_args(*capabilities)
