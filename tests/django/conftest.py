"""A real Django project (tests/django_project) on a SQLite file and on a
PostgreSQL database of its own, both made once for the session; Django is set
up in this process on them, and `chit worker --django` processes started by
the tests read the same settings.

Every test runs on both: `alias` is the task backend (and database) of the
run. Jobs of different tests share the databases, so each test reads back only
the jobs it enqueued, and workers serve the queues "default" and "emails"
(tests that claim jobs themselves use "ordered")."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from psycopg import sql

import chit
from support.django_workers import SETTINGS, start_worker
from support.postgres import drop_database, postgres_admin, postgres_skipped, postgres_url
from support.processes import Proc

pytest.importorskip("django", reason="chit[django] is not installed")

ALIASES = {"sqlite": "default", "postgres": "pg"}


@pytest.fixture(scope="session")
def django_databases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Django set up on a new SQLite file and (unless PostgreSQL is skipped on
    purpose) a new PostgreSQL database; yields the variables the settings read."""
    import django

    sqlite = tmp_path_factory.mktemp("django") / "project.sqlite3"
    name = f"chit_django_{os.getpid()}_{secrets.token_hex(4)}"
    env = {
        "DJANGO_SETTINGS_MODULE": SETTINGS,
        "CHIT_TEST_DJANGO_SQLITE": str(sqlite),
        "CHIT_TEST_DJANGO_PG": postgres_url(name),
    }
    created = False
    if not postgres_skipped():
        with postgres_admin() as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        created = True
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        django.setup()
        yield env
    finally:
        from django.db import connections

        connections.close_all()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if created:
            with postgres_admin() as admin:
                drop_database(admin, name)


@pytest.fixture(params=list(ALIASES))
def alias(request: pytest.FixtureRequest, django_databases: dict[str, str]) -> str:
    if request.param == "postgres" and postgres_skipped():
        pytest.skip("CHIT_TEST_SKIP_POSTGRES=1")
    return ALIASES[request.param]


@pytest.fixture
def backend(alias: str) -> object:
    from chit.contrib.django import framework

    return framework.task_backends[alias]


@pytest.fixture
def chit_queue(backend: object) -> chit.Queue:
    """The backend's own chit Queue: what the tests read jobs through."""
    queue = backend.queue  # type: ignore[attr-defined]
    assert isinstance(queue, chit.Queue)
    return queue


@pytest.fixture
def django_worker(tmp_path: Path, alias: str, django_databases: dict[str, str]) -> Iterator[Proc]:
    """A worker on the run's backend, serving "default" and "emails"."""
    procs, proc = start_worker(tmp_path, django_databases, alias, "default,emails")
    try:
        yield proc
    finally:
        procs.cleanup()
