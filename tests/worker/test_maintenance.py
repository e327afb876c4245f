"""The maintenance loop's retention: CHIT_RETENTION makes workers delete
finished jobs older than it, now and then; without it nothing is deleted."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import chit
from chit.errors import ConfigError
from chit.jobs import Failed, NewJob, Succeeded
from chit.settings import Settings
from chit.worker.maintenance import Maintenance


def _finish(queue: chit.Queue, error: str | None = None) -> str:
    store = queue.store
    job_id = store.enqueue(NewJob("k", {})).id
    [claimed] = store.claim("w", ["default"], 1, 30)
    outcome = (
        Succeeded(job_id, claimed.lease_token)
        if error is None
        else Failed(job_id, claimed.lease_token, error)
    )
    assert store.finish([outcome]) == [True]
    return job_id


def test_retention_prunes_finished_jobs_older_than_it_at_most_every_period(
    queue: chit.Queue,
) -> None:
    done, failed = _finish(queue), _finish(queue, "boom")
    waiting = queue.store.enqueue(NewJob("k", {}, run_at=datetime.now(UTC))).id
    maintenance = Maintenance(queue.store, 1.0, retention_seconds=3600, prune_every=300)

    maintenance.run_once()  # both finished a moment ago: kept
    assert queue.store.get(done) is not None and queue.store.get(failed) is not None

    later = datetime.now(UTC) + timedelta(hours=2)
    maintenance.run_once(now=later)  # pruned less than prune_every ago: not yet
    assert queue.store.get(done) is not None
    maintenance._last_prune = None  # the period has passed
    maintenance.run_once(now=later)
    assert queue.store.get(done) is None and queue.store.get(failed) is None
    assert queue.store.get(waiting) is not None  # never a job that has not finished


def test_without_retention_nothing_is_pruned(queue: chit.Queue) -> None:
    done = _finish(queue)
    Maintenance(queue.store, 1.0).run_once(now=datetime.now(UTC) + timedelta(days=365))
    assert queue.store.get(done) is not None


def test_chit_retention_is_read_and_checked_at_start(queue: chit.Queue) -> None:
    assert Settings.from_env({"CHIT_RETENTION": "7d"}).retention_seconds == 7 * 86400
    assert Settings.from_env({}).retention_seconds is None
    for bad in ("soon", "0", "-1d"):
        with pytest.raises(ConfigError, match="CHIT_RETENTION has value"):
            Settings.from_env({"CHIT_RETENTION": bad})
    kept = chit.Queue(settings=queue.settings.replace(retention="12h"))
    try:
        assert chit.Worker(kept).maintenance.retention_seconds == 12 * 3600
    finally:
        kept.close()
