"""The Redis store on a Redis Cluster of three primaries: `redis+cluster://`
names any node, the cluster client finds the primary that owns the prefix's
slot, every function runs there, and two prefixes on two primaries are two
independent stores. A real `chit worker` runs jobs on it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis

from chit.errors import DatabaseRefused, StoreError
from chit.jobs import NewJob, State, Succeeded
from chit.limits import Limits
from chit.store.redis import RedisStore
from support.jobs import app_queue, wait_terminal
from support.processes import running_procs
from support.redis import redis_cluster

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster() -> Iterator[list[str]]:
    with redis_cluster() as urls:
        yield urls


def owner(url: str, prefix: str) -> str:
    """The node (host:port) that owns `prefix`'s slot."""
    client = redis.RedisCluster.from_url(url.replace("redis+cluster", "redis"))
    try:
        return str(client.get_node_from_key(prefix).name)
    finally:
        client.close()


def test_two_prefixes_on_two_primaries_are_two_stores(cluster: list[str]) -> None:
    # {chit} and {b} hash to slots the three-way split gives to different primaries.
    assert owner(cluster[0], "{chit}") != owner(cluster[0], "{b}")
    first = RedisStore(cluster[1])  # any node will do
    second = RedisStore(f"{cluster[2]}?prefix=%7Bb%7D")
    try:
        for store in (first, second):
            store.migrate()
            assert store.schema_version() > 0
        ids = [e.id for e in first.enqueue_many([NewJob("k", {"i": i}) for i in range(5)])]
        other = second.enqueue(NewJob("k", {})).id
        claimed = first.claim("w", ["default"], 10, 30)
        assert sorted(c.id for c in claimed) == sorted(ids)
        stale = Succeeded(claimed[0].id, "not-the-token", {})
        assert first.finish([stale]) == [False]  # fenced, as on one server
        assert (
            first.finish([Succeeded(c.id, c.lease_token, {"ok": 1}) for c in claimed]) == [True] * 5
        )
        assert first.stats().by_state["succeeded"] == 5
        assert first.get(other) is None
        # Flow control reads the server's clock and pipelines its reads.
        first.set_limits("limited", Limits(concurrency=1))
        first.enqueue_many([NewJob("limited", {}) for _ in range(3)])
        assert len(first.claim("w", ["default"], 10, 30)) == 1
        clock, _ = first.schedule_clock(["limited"])
        assert abs((clock - datetime.now(UTC)).total_seconds()) < 60
        got = second.get(other)
        assert got is not None and got.state is State.QUEUED
    finally:
        first.close()
        second.close()


def test_a_call_whose_reply_timed_out_is_not_sent_again(cluster: list[str]) -> None:
    # The server may have run a call whose reply never came: the store says it
    # failed, as on one server, where redis-py's cluster client would send it
    # again (and a claim run twice starts jobs that nobody runs). It would
    # keep trying for about 10 s, so a call of its went through after the
    # 5 s pause; this one fails at its first 0.5 s timeout.
    host, port = owner(cluster[0], "{resend}").rsplit(":", 1)
    node = redis.Redis(host=host, port=int(port))
    store = RedisStore(f"{cluster[0]}?prefix=%7Bresend%7D&socket_timeout=0.5")
    try:
        store.enqueue_many([NewJob("k", {}) for _ in range(3)])
        node.client_pause(5_000, all=False)  # writes wait: the reply times out
        try:
            with pytest.raises(StoreError, match="Redis"):
                store.claim("w", ["default"], 1, 30)
        finally:
            node.client_unpause()
        assert store.stats().by_state["running"] <= 1
    finally:
        store.close()
        node.close()


def test_a_primary_without_aof_is_refused_by_name(cluster: list[str]) -> None:
    node = cluster[1].removeprefix("redis+cluster://")
    host, port = node.split(":")
    direct = redis.Redis(host=host, port=int(port))
    direct.config_set("appendonly", "no")
    try:
        with pytest.raises(DatabaseRefused, match=f"Redis at {node} has appendonly no"):
            RedisStore(cluster[0])
    finally:
        direct.config_set("appendonly", "yes")
        direct.close()


@pytest.mark.timeout(120)
def test_a_worker_runs_jobs_on_the_cluster(cluster: list[str], tmp_path: Path) -> None:
    url = f"{cluster[0]}?prefix=%7Bworker%7D"
    with running_procs(tmp_path, url) as procs:
        worker = procs.worker("--concurrency", "4", name="w")
        worker.wait_started(60)
        with app_queue(url) as queue:
            body = {"log": str(tmp_path / "runs.log"), "seconds": 0}
            ids = [queue.enqueue("sleep", body).id for _ in range(40)]
            for job_id in ids:
                job = wait_terminal(queue, job_id, 60)
                assert job.state is State.SUCCEEDED, job.error
                assert job.result == {"pid": worker.pid, "attempt": 1}
        assert worker.alive(), worker.stderr()
