"""Reads that walk a long index on Redis (failures, search) take it over several
calls, each reading a bounded number of entries: one call would hold the
server, and every worker waiting on it, for the whole walk."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from datetime import UTC, datetime, timedelta

import pytest
import redis

from chit.jobs import Failed, NewJob
from chit.store.redis import RedisStore, reports
from support.redis import own_store, recorded_calls


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    with closing(redis.Redis.from_url(redis_url, decode_responses=True)) as c:
        yield c


def fail(store: RedisStore, n: int, kind: str, error: str, at: datetime) -> list[str]:
    """`n` jobs of `kind` failed with `error`, all finished at `at`: their ids."""
    store.enqueue_many([NewJob(kind, {}, max_attempts=1)] * n)
    claimed = store.claim("w", ["default"], n, 30)
    assert len(claimed) == n
    outcomes = [Failed(j.id, j.lease_token, error) for j in claimed]
    assert store.finish(outcomes, now=at) == [True] * n
    return [j.id for j in claimed]


def test_failures_are_read_a_page_at_a_time_through_jobs_of_one_finish_time(
    redis_url: str, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Seven jobs of one finish time span three pages of three. Each page goes
    # on after the last job read, found again even once that job has left the
    # set (retried), not at a count of jobs into that time (which would skip).
    at = datetime(2026, 1, 1, tzinfo=UTC)
    with own_store(redis_url, client, "{chit-failures-paged}") as store:
        first = fail(store, 7, "mail", "Boom\nat line 3", at)
        fail(store, 2, "mail", "Boom", at + timedelta(seconds=1))
        fail(store, 3, "sms", "Timeout", at + timedelta(seconds=2))
        fail(store, 1, "mail", "Boom", at + timedelta(seconds=2))
        whole = store.failures()
        assert [(g.kind, g.error, g.count) for g in whole] == [
            ("mail", "Boom", 10),
            ("sms", "Timeout", 3),
        ]
        assert whole[0].first_seen == at and whole[0].last_seen == at + timedelta(seconds=2)

        monkeypatch.setattr(reports, "FAILURE_READS", 3)
        calls = recorded_calls(monkeypatch, store, "fcall_ro")
        assert store.failures() == whole
        assert [c[0] for c in calls] == ["chit_failures"] * 5  # 13 jobs, 3 a call
        assert store.failures(tenant="") == whole  # the tenant's own set, the same way

        last_read = sorted(first)[2]  # the first page's last job: by finish time, then id
        fcall_ro = store.redis.fcall_ro

        def retrying_after_the_first_page(function: str, *args: object) -> object:
            out = fcall_ro(function, *args)
            if args[1] == "":
                assert store.retry(last_read)
            return out

        monkeypatch.setattr(store.redis, "fcall_ro", retrying_after_the_first_page)
        assert store.failures() == whole


def test_a_search_of_every_tenants_idempotency_keys_scans_them_a_step_a_call(
    redis_url: str, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    with own_store(redis_url, client, "{chit-search-keys}") as store:
        keyed = [
            NewJob("k", {}, idempotency_key=f"key-{n}", tenant=f"t{n % 3}") for n in range(3000)
        ]
        ids = [e.id for e in store.enqueue_many(keyed)]
        calls = recorded_calls(monkeypatch, store, "fcall_ro")
        assert [j.id for j in store.search("key-1234")] == [ids[1234]]
        assert calls.count(("chit_search_keys", "", "", "key-1234", "0")) == 1
        assert len([c for c in calls if c[0] == "chit_search_keys"]) >= 3  # 1,000 a step
        calls.clear()
        assert [j.id for j in store.search("key-1234", tenant="t1")] == [ids[1234]]
        assert store.search("key-1234", tenant="t0") == []
        assert [c[0] for c in calls] == ["chit_search_keys"] * 2  # a tenant's: one HGET
        assert store.search("key-*") == [] and store.search("nothing") == []


def test_a_search_by_id_prefix_reads_others_ids_over_several_calls(
    redis_url: str, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A short prefix over millions of other tenants' jobs held the server for
    # the whole walk to find a tenant's few.
    with own_store(redis_url, client, "{chit-search-ids}") as store:
        others = [e.id for e in store.enqueue_many([NewJob("k", {}, tenant="other")] * 11_000)]
        mine = [store.enqueue(NewJob("k", {"n": n}, tenant="mine")).id for n in range(3)]
        # The first and last ids' common prefix: every id between shares it.
        shared = next(n for n, (a, b) in enumerate(zip(others[0], mine[-1], strict=True)) if a != b)
        prefix = mine[-1][:shared]
        calls = recorded_calls(monkeypatch, store, "fcall_ro")
        assert [j.id for j in store.search(prefix, tenant="mine", limit=5)] == mine[::-1]
        assert [c[0] for c in calls].count("chit_search_ids") == 3  # 5,000 ids a call
        assert [j.id for j in store.search(prefix, tenant="mine", limit=2)] == mine[:0:-1]
        everyone = store.search(prefix, limit=4)
        assert [j.id for j in everyone] == [*mine[::-1], others[-1]]
