"""Enqueue inside the application's own transaction (`connection=`), which the
SQL stores join: the jobs exist only if the application commits. On each SQL
backend of conftest.py, with the application's own tables beside chit's."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

import chit
from chit.errors import InvalidPayload
from chit.jobs import State
from chit.store.base import Store
from store.test_contract import LARGE, new
from support.store_backends import SQLBackend
from support.store_queue import report_queue


@pytest.fixture
def backend(sql_backend: SQLBackend) -> SQLBackend:
    """The SQL backends alone; `store` opens on this one."""
    return sql_backend


@pytest.fixture
async def queue(backend: SQLBackend) -> AsyncIterator[chit.Queue]:
    q = report_queue(backend.database_url)
    yield q
    await q.aclose()


def test_enqueue_on_the_applications_connection_exists_only_if_it_commits(
    backend: SQLBackend,
) -> None:
    store = backend.open()
    app = backend.connect()
    try:
        app.execute("CREATE TABLE IF NOT EXISTS orders (id integer PRIMARY KEY)")
        app.execute("DELETE FROM orders")
        app.commit()

        app.execute("INSERT INTO orders (id) VALUES (1)")
        rolled_back = store.enqueue_many([new(payload={"order": 1})], connection=app)[0]
        app.rollback()
        assert store.get(rolled_back.id) is None

        app.execute("INSERT INTO orders (id) VALUES (2)")
        committed = store.enqueue_many([new(payload={"order": 2})], connection=app)[0]
        assert store.get(committed.id) is None  # not visible before the commit
        app.commit()
        got = store.get(committed.id)
        assert got is not None and got.payload == {"order": 2}
        assert backend.execute("SELECT id FROM orders") == [(2,)]
    finally:
        app.close()


def test_a_large_enqueue_on_the_applications_connection_exists_only_if_it_commits(
    backend: SQLBackend,
) -> None:
    store = backend.open()
    app = backend.connect()
    try:
        jobs = [new(payload={"i": i}) for i in range(LARGE)] + [new(idempotency_key="k")]
        rolled_back = store.enqueue_many(jobs, connection=app)
        app.rollback()
        assert store.get_many([r.id for r in rolled_back]) == []
        committed = store.enqueue_many(jobs, connection=app)
        assert store.get_many([r.id for r in committed]) == []  # not visible before the commit
        app.commit()
        assert len(store.get_many([r.id for r in committed])) == LARGE + 1
    finally:
        app.close()


def test_a_graph_in_the_applications_transaction_exists_only_if_it_commits(
    backend: SQLBackend, store: Store
) -> None:
    conn = backend.connect()
    try:
        store.enqueue_many([new("a", ref="a"), new("b", depends_on=("a",))], connection=conn)
        conn.rollback()
    finally:
        conn.close()
    assert backend.inspect.job_count() == 0


@pytest.mark.anyio
async def test_aenqueue_on_the_applications_connection_exists_only_if_it_commits(
    backend: SQLBackend, queue: chit.Queue
) -> None:
    queue.store.migrate()  # opened before the application's transaction holds the file
    if backend.name == "postgres":
        app: Any = await psycopg.AsyncConnection.connect(backend.database_url)
        execute, commit, rollback, close = app.execute, app.commit, app.rollback, app.close
    else:
        # Used from the store's enqueue thread: sqlite3 must allow it.
        app = sqlite3.connect(backend.path, check_same_thread=False)  # type: ignore[attr-defined]

        async def execute(query: str) -> None:
            app.execute(query)

        async def commit() -> None:
            app.commit()

        async def rollback() -> None:
            app.rollback()

        async def close() -> None:
            app.close()

    try:
        await execute("CREATE TABLE IF NOT EXISTS orders (id integer PRIMARY KEY)")
        await execute("DELETE FROM orders")
        await commit()

        await execute("INSERT INTO orders (id) VALUES (1)")
        rolled_back = await queue.aenqueue("free", {"order": 1}, connection=app)
        await rollback()
        assert queue.store.get(rolled_back.id) is None

        await execute("INSERT INTO orders (id) VALUES (2)")
        committed = await queue.aenqueue("free", {"order": 2}, connection=app)
        graph = await queue.aenqueue_many(
            [chit.JobRequest("free", {}, ref="a"), chit.JobRequest("free", {}, depends_on=["a"])],
            connection=app,
        )
        assert queue.store.get(committed.id) is None  # not visible before the commit
        with pytest.raises(InvalidPayload):  # refused before it reaches the transaction
            await queue.aenqueue("report", {"year": "x"}, connection=app)
        await commit()
        assert queue.get(committed.id).payload == {"order": 2}
        assert queue.get(graph[1].id).state is State.WAITING
        assert backend.execute("SELECT id FROM orders") == [(2,)]
    finally:
        await close()
