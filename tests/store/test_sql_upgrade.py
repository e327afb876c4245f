"""A database in use is upgraded in place: the newest migration is applied to a
database of the version before it that holds jobs in every state, and those
jobs go on to their ends on the upgraded schema, read back by every list and
count as before."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from chit.jobs import Failed, JobFilter, NewJob, State, Succeeded
from chit.store import queries
from chit.store.base import Store

if TYPE_CHECKING:
    from support.store_backends import SQLBackend


@pytest.fixture
def backend(sql_backend: SQLBackend) -> SQLBackend:
    """The SQL backends alone: a place of an older schema version takes the jobs."""
    return sql_backend


def test_the_newest_migration_upgrades_a_database_holding_jobs_in_every_state(
    backend: SQLBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    every = queries.migrations(backend.name)
    # Today's code makes the jobs, on today's schema; they are copied into a
    # location of the version before, as that version's code would have left
    # them (a migration may add columns today's statements need).
    made = backend.fresh()
    store = made.open()
    ids = {
        name: store.enqueue(NewJob("k", {"n": name}, max_attempts=1)).id
        for name in ("succeeded", "failed", "running")
    }
    done, failed = store.claim("w", ["default"], 2, 30)
    assert [done.id, failed.id] == [ids["succeeded"], ids["failed"]]
    store.finish([Succeeded(done.id, done.lease_token, {"ok": 1})])
    store.finish([Failed(failed.id, failed.lease_token, "Boom: for good")])
    (running,) = store.claim("w", ["default"], 1, 30)
    assert running.id == ids["running"]
    ids["cancelled"] = store.enqueue(NewJob("k", {})).id
    store.cancel(ids["cancelled"])
    ids["queued"] = store.enqueue(NewJob("k", {})).id
    ids["waiting"] = store.enqueue(NewJob("k", {}, depends_on=(running.id,))).id
    before = {s: _listed(store, s) for s in State}

    location = backend.fresh()
    with monkeypatch.context() as old:
        old.setattr(queries, "migrations", lambda name: every[:-1])
        older = location.open()
        assert older.schema_version() == len(every) - 1
    location.copy_jobs_from(made)

    assert older.migrate() == len(every)
    upgraded = location.open()
    assert upgraded.schema_version() == len(every)
    # Every job is where it was, found by state (and by kind and tenant), and counted.
    assert {s: _listed(upgraded, s) for s in State} == before
    for state in State:
        found = upgraded.list(JobFilter(state=state, kind="k", tenant=""), limit=10).jobs
        assert [j.id for j in found] == before[state], state
    assert _counts(upgraded) == {s: len(before[s]) for s in State if before[s]}
    assert all(len(before[s]) == 1 for s in State), before

    # ...and goes on: the held leases are still good, the waiting job is released.
    assert upgraded.finish([Succeeded(running.id, running.lease_token)]) == [True]
    assert upgraded.get(ids["waiting"]).state == State.QUEUED
    rest = upgraded.claim("w2", ["default"], 10, 30)
    assert {j.id for j in rest} == {ids["queued"], ids["waiting"]}
    upgraded.finish([Succeeded(j.id, j.lease_token) for j in rest])
    states = {name: upgraded.get(job_id).state for name, job_id in ids.items()}
    assert states == {
        "succeeded": State.SUCCEEDED,
        "failed": State.FAILED,
        "cancelled": State.CANCELLED,
        "running": State.SUCCEEDED,
        "queued": State.SUCCEEDED,
        "waiting": State.SUCCEEDED,
    }
    assert _counts(upgraded) == {State.SUCCEEDED: 4, State.FAILED: 1, State.CANCELLED: 1}
    assert [a.outcome for a in upgraded.attempts(ids["running"])] == ["succeeded"]


def _listed(store: Store, state: State) -> list[str]:
    return [j.id for j in store.list(JobFilter(state=state), limit=10).jobs]


def _counts(store: Store) -> dict[State, int]:
    return {c.state: c.count for c in store.count_jobs()}
