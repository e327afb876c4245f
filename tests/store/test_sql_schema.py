"""What the SQL schema holds for itself, on each SQL backend: its CHECKs and
cascades refuse or tidy what a hand-written statement would leave, and its
migrations apply once, counted, however many processes race to apply them."""

from __future__ import annotations

import threading

import pytest

from chit.jobs import Failed, State
from chit.store import queries
from chit.store.base import Store
from store.test_contract import LEASE, enqueue_and_claim, new
from support.store_backends import SQLBackend


@pytest.fixture
def backend(sql_backend: SQLBackend) -> SQLBackend:
    """The SQL backends alone."""
    return sql_backend


def test_invariant4_the_schema_refuses_a_failed_job_without_an_error(backend: SQLBackend) -> None:
    store = backend.open()
    job_id = store.enqueue(new()).id
    failed_without_error = "UPDATE chit_jobs SET state = 'failed', error = NULL WHERE id = ?"
    with pytest.raises(Exception, match=r"(?i)check"):
        backend.execute(failed_without_error, (job_id,))
    with pytest.raises(Exception, match=r"(?i)check"):
        backend.execute("UPDATE chit_jobs SET state = 'running' WHERE id = ?", (job_id,))
    assert store.get(job_id).state is State.QUEUED  # type: ignore[union-attr]


def test_deleting_jobs_by_hand_in_sql_deletes_their_attempts(backend: SQLBackend) -> None:
    store = backend.open()
    gone = enqueue_and_claim(store)
    store.finish([Failed(gone.id, gone.lease_token, "x", retry_in=0.0)])
    store.claim("w1", ["default"], 1, LEASE)
    kept = enqueue_and_claim(store)
    assert len(store.attempts(gone.id)) == 2
    backend.execute("DELETE FROM chit_jobs WHERE id = ?", (gone.id,))
    backend.execute("DELETE FROM chit_jobs WHERE id = ?", ("no-such-job",))
    assert backend.execute("SELECT count(*) FROM chit_attempts WHERE job_id = ?", (gone.id,)) == [
        (0,)
    ]
    assert len(store.attempts(kept.id)) == 1


# Migrations


def test_migrate_is_idempotent_and_the_version_counts_the_migrations(
    backend: SQLBackend,
) -> None:
    backend_name = backend.name
    expected = len(queries.migrations(backend_name))
    store = backend.open()
    assert store.schema_version() == expected
    assert store.migrate() == expected
    assert store.migrate() == expected
    assert store.schema_version() == expected
    assert backend.execute("SELECT count(*) FROM chit_schema_migrations") == [(expected,)]

    empty = backend.fresh().open(migrate=False)
    assert empty.schema_version() == 0
    assert empty.migrate() == expected
    assert empty.schema_version() == expected


def test_migrations_racing_from_several_processes_apply_once(backend: SQLBackend) -> None:
    location = backend.fresh()
    stores = [location.open(migrate=False) for _ in range(4)]
    start = threading.Barrier(len(stores))
    versions: list[int] = []
    errors: list[BaseException] = []

    def migrate(store: Store) -> None:
        start.wait()
        try:
            versions.append(store.migrate())
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=migrate, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    expected = len(queries.migrations(backend.name))
    assert errors == [] and versions == [expected] * len(stores)
    assert location.execute("SELECT count(*) FROM chit_schema_migrations") == [(expected,)]
    assert stores[0].enqueue(new()).created
