"""A job's output on every backend (DESIGN.md "Long AI tasks"; issue 25):
`JobContext.emit` over a real store numbers values per job across attempts,
each with its attempt; a fenced-out emit writes nothing; bad values and output
past the cap raise with nothing stored; output pages, stays another tenant's
secret, goes with its job, and wakes the store's output feed."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from chit import InvalidOutput, JobContext
from chit.jobs import Beat, ClaimedJob, NewJob, Progress, Succeeded
from chit.store.capabilities import FullStore

LEASE = 30.0


def later(seconds: float) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


def claim(store: FullStore, **kwargs: Any) -> ClaimedJob:
    claimed = store.claim("w1", ["default"], 1, LEASE, **kwargs)
    assert len(claimed) == 1, claimed
    return claimed[0]


def context(store: FullStore, job: ClaimedJob, cap: int = 1 << 20) -> JobContext:
    ctx = JobContext.of(job, store, LEASE)
    ctx.max_output_bytes = cap
    return ctx


def seen(store: FullStore, job_id: str, after: int = 0) -> list[tuple[int, int, Any]]:
    items = store.output(job_id, after)
    assert items is not None
    return [(i.seq, i.attempt, i.data) for i in items]


def test_output_is_numbered_across_attempts_and_a_fenced_out_emit_writes_nothing(
    store: FullStore,
) -> None:
    job_id = store.enqueue(NewJob("k", {}, max_attempts=3)).id
    first = context(store, claim(store))
    for token in ("a", {"b": [1, 2]}, None):
        first.emit(token)
    first.flush_output()
    assert seen(store, job_id) == [(1, 1, "a"), (2, 1, {"b": [1, 2]}), (3, 1, None)]

    # The worker dies: another attempt takes the job; the dead one's output stays.
    store.rescue_expired(now=later(LEASE * 3))
    second = context(store, claim(store, now=later(LEASE * 3)))
    second.emit("c")
    second.flush_output()
    first.emit("late")  # fenced out: nothing stored, and the context knows it
    first.flush_output()
    assert first.lease_lost
    assert seen(store, job_id) == [(1, 1, "a"), (2, 1, {"b": [1, 2]}), (3, 1, None), (4, 2, "c")]
    assert seen(store, job_id, after=2) == [(3, 1, None), (4, 2, "c")]
    assert [i.seq for i in store.output(job_id, 1, limit=2) or []] == [2, 3]
    assert store.output_used(job_id)[0] == 4
    assert store.append_output(job_id, first.lease_token, ['"x"'], 3) is None
    assert store.output_heads([job_id, "nope"]) == {job_id: 4}


def test_bad_values_and_output_past_the_cap_raise_and_store_nothing(store: FullStore) -> None:
    job_id = store.enqueue(NewJob("k", {})).id
    ctx = context(store, claim(store), cap=20)
    for bad in ({1, 2}, math.nan, "nul\x00", object()):
        with pytest.raises(InvalidOutput, match="not JSON"):
            ctx.emit(bad)
    ctx.emit("0123456789")  # 12 bytes of JSON
    with pytest.raises(InvalidOutput, match="CHIT_MAX_OUTPUT_BYTES"):
        ctx.emit("0123456789")
    ctx.emit("é")  # 4 bytes: still fits
    ctx.flush_output()
    assert seen(store, job_id) == [(1, 1, "0123456789"), (2, 1, "é")]
    assert store.output_used(job_id) == (2, 16)


def test_output_of_unknown_and_other_tenants_jobs_is_none_and_goes_with_its_job(
    store: FullStore,
) -> None:
    job_id = store.enqueue(NewJob("k", {}, tenant="t1")).id
    job = claim(store)
    ctx = context(store, job)
    ctx.emit(1)
    ctx.flush_output()
    assert store.output("01NOSUCHJOB") is None
    assert store.output(job_id, tenant="t2") is None
    assert seen(store, job_id) == [(1, 1, 1)]
    assert store.output(job_id, tenant="t1") is not None
    assert store.output(job_id, after=1) == []
    assert store.finish([Succeeded(job.id, job.lease_token)]) == [True]
    assert store.prune(60, now=later(3600)) == 1
    assert store.output(job_id) is None
    assert store.output_used(job_id) == (0, 0)


def test_a_write_and_the_outcome_of_a_job_with_output_wake_the_output_feed(
    store: FullStore,
) -> None:
    job_id = store.enqueue(NewJob("k", {})).id
    job = claim(store)
    feed = store.output_feed()
    try:
        assert feed.wait(0.1) is None  # the first look: anything may have been written
        assert feed.wait(0.05) == frozenset()
        assert store.append_output(job_id, job.lease_token, ["1", "2"], 2) == 2
        woke = feed.wait(5)
        assert woke is None or job_id in woke  # SQLite cannot name the job
        assert feed.wait(0.05) == frozenset()
        # The outcome of a job with output wakes its listeners too.
        assert store.finish([Succeeded(job_id, job.lease_token, None)]) == [True]
        woke = feed.wait(5)
        assert woke is None or job_id in woke
    finally:
        feed.close()


def test_a_progress_message_travels_with_the_numbers(store: FullStore) -> None:
    job_id = store.enqueue(NewJob("k", {})).id
    job = claim(store)
    store.heartbeat([Beat(job_id, job.lease_token, Progress(1, 3, "reading page 1"))], LEASE)
    got = store.get(job_id)
    assert got is not None and got.progress == Progress(1, 3, "reading page 1")
    store.heartbeat([Beat(job_id, job.lease_token)], LEASE)  # a lease only: kept
    assert (got := store.get(job_id)) is not None and got.progress.message == "reading page 1"
    store.checkpoint(job_id, job.lease_token, {"page": 2}, Progress(2, 3, "écrit ✓"), LEASE)
    assert (got := store.get(job_id)) is not None and got.progress.message == "écrit ✓"
    store.heartbeat([Beat(job_id, job.lease_token, Progress(2, 3))], LEASE)  # none now
    assert (got := store.get(job_id)) is not None and got.progress == Progress(2, 3)
    done = Progress(3, 3, "done")
    assert store.finish([Succeeded(job_id, job.lease_token, None, done)]) == [True]
    assert (got := store.get(job_id)) is not None and got.progress == done


def test_a_bad_progress_message_raises_in_the_handler(store: FullStore) -> None:
    store.enqueue(NewJob("k", {}))
    ctx = context(store, claim(store))
    with pytest.raises(TypeError, match="text"):
        ctx.progress(1, 2, message=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at most 1000"):
        ctx.progress(1, 2, message="x" * 1001)
    ctx.progress(1, 2, message="nul\x00")
    assert ctx.take_progress() == Progress(1, 2, "nul\ufffd")


def test_a_listened_jobs_claim_and_outcome_wake_the_feed_and_no_other_jobs_do(
    store: FullStore,
) -> None:
    quiet = store.enqueue(NewJob("k", {}, priority=0)).id
    followed = store.enqueue(NewJob("k", {}, priority=1)).id
    store.listen_to([followed, "01NOSUCHJOB"])
    feed = store.output_feed()
    try:
        assert feed.wait(0.1) is None  # the first look
        [job] = store.claim("w1", ["default"], 1, LEASE)
        assert job.id == quiet
        assert store.finish([Succeeded(quiet, job.lease_token, None)]) == [True]
        woke = feed.wait(0.2)
        assert woke is None or woke == frozenset()  # SQLite wakes for any commit
        [job] = store.claim("w1", ["default"], 1, LEASE)
        assert job.id == followed
        woke = feed.wait(5)
        assert woke is None or followed in woke
        assert store.finish([Succeeded(followed, job.lease_token, None)]) == [True]
        woke = feed.wait(5)
        assert woke is None or followed in woke
    finally:
        feed.close()


def test_a_read_of_no_items_or_from_before_the_first_reads_as_sql_does(store: FullStore) -> None:
    # Redis read `limit` 0 as the whole list, and a negative `after` from the end.
    job_id = store.enqueue(NewJob("k", {})).id
    [job] = store.claim("w1", ["default"], 1, LEASE)
    assert store.append_output(job_id, job.lease_token, ['"a"', '"b"'], 6) == 2
    assert store.output(job_id, 0, 0) == []
    assert [item.seq for item in store.output(job_id, -3, 10)] == [1, 2]


def test_an_empty_batch_of_output_leaves_no_head(store: FullStore) -> None:
    job_id = store.enqueue(NewJob("k", {})).id
    [job] = store.claim("w1", ["default"], 1, LEASE)
    assert store.append_output(job_id, job.lease_token, [], 0) == 0
    assert store.output_heads([job_id]) == {}
