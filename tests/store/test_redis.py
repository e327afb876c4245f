"""What only the Redis store has: the durability it insists on at open, the
function library loaded again when the server lost it, one prefix for every
key, and errors that name the server but never its password."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing, contextmanager
from datetime import UTC, datetime, timedelta
from unittest.mock import ANY

import pytest
import redis

from chit.errors import DatabaseRefused, StoreError
from chit.jobs import AttemptOutcome, Failed, JobFilter, NewJob, Succeeded
from chit.limits import Limits
from chit.settings import Settings
from chit.store import open_store
from chit.store.capabilities import NewSession
from chit.store.flow import Claim
from chit.store.redis import RedisStore
from chit.store.redis.connection import VERSION
from support.invariants import redis_index_faults
from support.redis import has_waitaof, own_store, recorded_calls, redis_server
from support.waiting import wait_until


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    with closing(redis.Redis.from_url(redis_url, decode_responses=True)) as c:
        yield c


@contextmanager
def config(client: redis.Redis, name: str, value: str) -> Iterator[None]:
    """A server setting changed for the block (the server is this test process's own)."""
    before = client.config_get(name)[name]
    client.config_set(name, value)
    try:
        yield
    finally:
        client.config_set(name, before)


def test_a_server_without_aof_is_refused_naming_the_setting(
    redis_url: str, client: redis.Redis
) -> None:
    with config(client, "appendonly", "no"), pytest.raises(StoreError) as e:
        RedisStore(redis_url)
    assert "appendonly no" in str(e.value) and "\n" not in str(e.value)


def test_a_server_that_may_evict_is_refused_naming_the_setting(
    redis_url: str, client: redis.Redis
) -> None:
    with config(client, "maxmemory-policy", "allkeys-lru"), pytest.raises(StoreError) as e:
        RedisStore(redis_url)
    assert "maxmemory-policy allkeys-lru" in str(e.value) and "\n" not in str(e.value)


def test_an_unreachable_server_is_named_without_its_password() -> None:
    with closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: nothing answers there
        with pytest.raises(StoreError) as e:
            RedisStore(f"redis://:hunter2@127.0.0.1:{port}/0")
    message = str(e.value)
    assert f"127.0.0.1:{port}" in message and "hunter2" not in message


def test_the_library_is_loaded_again_when_the_server_lost_it(
    redis_url: str, client: redis.Redis
) -> None:
    store = RedisStore(redis_url, prefix="{chit-reload}")
    try:
        assert store.schema_version() == VERSION
        client.function_flush()  # as a restart without an AOF of it, or a new primary
        assert store.schema_version() == 0
        job_id = store.enqueue(NewJob("k", {})).id  # loads it again, then enqueues
        assert store.schema_version() == VERSION
        got = store.get(job_id)
        assert got is not None and got.kind == "k"
    finally:
        store.close()


def test_every_key_is_under_the_prefix(redis_url: str, client: redis.Redis) -> None:
    store = RedisStore(redis_url, prefix="{chit-only}", result_inline_bytes=10)
    try:
        store.enqueue(NewJob("k", {}, idempotency_key="i", unique_key="u"))
        [job] = store.claim("w", ["default"], 1, 30)
        assert store.save_step(job.id, job.lease_token, "s", 1)
        assert store.finish([Succeeded(job.id, job.lease_token, "x" * 100)]) == [True]
        keys = set(client.scan_iter(match="*only*"))
        assert keys and all(k.startswith("{chit-only}:") for k in keys)
    finally:
        for key in client.scan_iter(match="{chit-only}:*"):
            client.delete(key)
        store.close()


def test_a_prefix_without_a_hash_tag_is_refused(redis_url: str) -> None:
    with pytest.raises(StoreError, match="hash tag"):
        RedisStore(redis_url, prefix="chit")


def test_racing_flow_claims_never_both_take_a_limited_kinds_last_slot(redis_url: str) -> None:
    stores = [RedisStore(redis_url, prefix="{chit-race}") for _ in range(4)]
    try:
        stores[0].declare_limits({"k": Limits(concurrency=2)})
        # Two tenants: every claim is a flow claim, its reads and claim several calls.
        stores[0].enqueue_many([NewJob("k", {}, tenant=f"t{n % 2}") for n in range(40)])
        start = threading.Barrier(len(stores))

        def claim(store: RedisStore) -> int:
            start.wait()
            return sum(len(store.claim("w", ["default"], 2, 30)) for _ in range(5))

        with ThreadPoolExecutor(len(stores)) as pool:
            assert sum(pool.map(claim, stores)) == 2
    finally:
        client = redis.Redis.from_url(redis_url)
        for key in client.scan_iter(match="{chit-race}:*"):
            client.delete(key)
        client.close()
        for store in stores:
            store.close()


def test_what_a_library_before_version_11_stored_is_closed_and_pruned_once(
    redis_url: str, client: redis.Redis
) -> None:
    # Before version 11 a running attempt's open record was in P:att, and every
    # terminal job in P:done (a failed one in P:failed too) beside P:fin.
    P = "{chit-v10}"
    with own_store(redis_url, client, P) as store:
        done = store.enqueue(NewJob("k", {})).id
        failed = store.enqueue(NewJob("k", {}, max_attempts=1)).id
        running = store.enqueue(NewJob("k", {})).id
        jobs = {j.id: j for j in store.claim("w", ["default"], 3, 30)}
        assert store.finish([Succeeded(done, jobs[done].lease_token, 1)]) == [True]
        assert store.finish([Failed(failed, jobs[failed].lease_token, "boom", None)]) == [True]
        open_record = client.hget(f"{P}:j:{running}", "aat")
        client.hdel(f"{P}:j:{running}", "aat")
        record = {"attempt": 1, "worker": "w", "started_at": int(open_record), "kind": "k"}
        client.rpush(f"{P}:att:{running}", json.dumps(record | {"ckey": ""}))
        for job_id in (done, failed):
            at = client.zscore(f"{P}:fin:succeeded", job_id) or client.zscore(
                f"{P}:fin:failed", job_id
            )
            client.zadd(f"{P}:done", {job_id: at})
        client.zadd(f"{P}:failed", {failed: client.zscore(f"{P}:fin:failed", failed)})

        assert [a.worker for a in store.attempts(running)] == ["w"]
        assert store.finish([Succeeded(running, jobs[running].lease_token, 2)]) == [True]
        [attempt] = store.attempts(running)
        assert attempt.outcome == AttemptOutcome.SUCCEEDED and attempt.finished_at is not None
        assert store.prune(60, now=datetime.now(UTC) + timedelta(hours=1)) == 3
        for name in ("done", "failed", "fin:succeeded", "fin:failed"):
            assert client.zcard(f"{P}:{name}") == 0
        assert not list(client.scan_iter(match=f"{P}:att:*"))


def open_upgraded(redis_url: str, client: redis.Redis, *prefixes: str) -> None:
    """Open each prefix as a deployment does after an upgrade: the server lacks
    this library (the first deployment loads it, the others find it loaded)
    and the prefix's keys are not yet of its layout."""
    client.function_delete("chit")
    for prefix in prefixes:
        client.delete(f"{prefix}:layout")
        RedisStore(redis_url, prefix=prefix).close()


def test_the_index_of_every_job_a_library_before_version_23_kept_goes_at_the_upgrade(
    redis_url: str, client: redis.Redis
) -> None:
    # Before version 23 every job was in P:all too, beside its state's set:
    # nothing reads it now, and nothing would take a pruned job out of it. The
    # library is the server's, the key each prefix's: a second deployment on
    # the server finds the library upgraded by the first.
    with (
        own_store(redis_url, client, "{chit-v22a}") as first,
        own_store(redis_url, client, "{chit-v22b}") as second,
    ):
        ids = {}
        for P, store in (("{chit-v22a}", first), ("{chit-v22b}", second)):
            ids[P] = [store.enqueue(NewJob("k", {})).id for _ in range(3)]
            client.zadd(f"{P}:all", dict.fromkeys(ids[P], 0))
        open_upgraded(redis_url, client, *ids)
        for P in ids:
            assert not client.exists(f"{P}:all")
        for P, store in (("{chit-v22a}", first), ("{chit-v22b}", second)):
            assert [j.id for j in store.list(JobFilter()).jobs] == ids[P][::-1]
            assert redis_index_faults(client, P) == []


def test_the_unique_key_index_a_library_before_version_24_lacked_is_built_at_the_upgrade(
    redis_url: str, client: redis.Redis
) -> None:
    # Replay reads P:uk (every job of a unique key) to put back only the
    # newest failed one. Jobs stored before version 24 are in no such index:
    # the first open after the upgrade finds them, a few SCAN steps at a time,
    # including a prefix with a character glob patterns treat as special.
    P = "{chit-v23[*]}"
    with own_store(redis_url, client, P) as store:
        failed = []
        for _ in range(2):
            job_id = store.enqueue(NewJob("k", {}, unique_key="u", max_attempts=1)).id
            [job] = store.claim("w", ["default"], 1, 30)
            assert store.finish([Failed(job_id, job.lease_token, "boom")]) == [True]
            failed.append(job_id)
        store.enqueue_many([NewJob("k", {}) for _ in range(2500)])  # SCAN steps
        for key in client.scan_iter(match="*:uk:*"):
            client.delete(key)
        open_upgraded(redis_url, client, P)
        assert client.zrange(f"{P}:uk:\0u", 0, -1) == failed
        assert client.get(f"{P}:layout") == str(VERSION)
        assert store.retry(failed[0]) is False and store.retry(failed[1]) is True
        assert redis_index_faults(client, P) == []


def test_an_open_attempt_left_in_the_job_hash_is_closed_by_the_next_claim(
    redis_url: str, client: redis.Redis
) -> None:
    P = "{chit-open}"
    with own_store(redis_url, client, P) as store:
        job_id = store.enqueue(NewJob("k", {}, max_attempts=5)).id
        store.claim("w1", ["default"], 1, 30)
        at = datetime.now(UTC) + timedelta(seconds=31)
        store.rescue_expired(now=at)
        # As a failure between the rescue and the record's closing would leave it.
        client.hset(f"{P}:j:{job_id}", mapping={"aat": 1, "worker": "lost"})
        [again] = store.claim("w2", ["default"], 1, 30, now=at)
        assert again.attempt == 2
        history = [(a.worker, a.outcome) for a in store.attempts(job_id)]
        assert history == [
            ("w1", AttemptOutcome.LEASE_EXPIRED),
            ("lost", AttemptOutcome.LEASE_EXPIRED),
            ("w2", None),
        ]


def test_open_store_takes_a_redis_url_and_its_prefix(redis_url: str, client: redis.Redis) -> None:
    settings = Settings(database_url=f"{redis_url}?prefix=%7Bchit-url%7D", free_hand_backs=1)
    store = open_store(settings)
    try:
        assert isinstance(store, RedisStore) and store.free_hand_backs == 1
        job_id = store.enqueue(NewJob("k", {})).id
        assert client.exists(f"{{chit-url}}:j:{job_id}")
    finally:
        for key in client.scan_iter(match="{chit-url}:*"):
            client.delete(key)
        store.close()


def test_an_entry_left_in_the_ready_set_never_claims_a_running_job_twice(
    redis_url: str, client: redis.Redis
) -> None:
    # The claim takes ready entries by their member: one that outlived its job's
    # start (whatever left it) is dropped, and the job stays with its worker.
    P = "{chit-stale}"
    with own_store(redis_url, client, P) as store:
        job_id = store.enqueue(NewJob("k", {})).id
        [first] = store.claim("w1", ["default"], 1, 30)
        client.zadd(f"{P}:r:default", {f"{0:013d}{job_id}": 0})
        assert store.claim("w2", ["default"], 1, 30) == []
        assert client.zcard(f"{P}:r:default") == 0
        job = store.get(job_id)
        assert job is not None and (job.worker, job.attempts) == ("w1", 1)
        assert store.finish([Succeeded(job_id, first.lease_token, None)]) == [True]


def test_wait_aof_is_refused_in_one_line_where_the_server_has_no_waitaof(
    redis_url: str, client: redis.Redis
) -> None:
    if has_waitaof(redis_url):
        pytest.skip("this server has WAITAOF (Redis 7.2+): the refusal cannot happen")
    settings = Settings.from_env({"CHIT_DATABASE_URL": redis_url, "CHIT_REDIS_WAIT_AOF": "1"})
    with pytest.raises(DatabaseRefused, match=r"has no WAITAOF .*CHIT_REDIS_WAIT_AOF=1 needs it"):
        open_store(settings)


def test_wait_aof_enqueues_return_once_the_aof_holds_them(
    redis_url: str, client: redis.Redis
) -> None:
    if not has_waitaof(redis_url):
        pytest.skip(f"redis-server {client.info()['redis_version']} has no WAITAOF (7.2+)")
    store = RedisStore(redis_url, wait_aof=True)
    try:
        ids = [e.id for e in store.enqueue_many([NewJob("k", {}), NewJob("k", {})])]
        assert all(store.get(i) is not None for i in ids)
        assert client.info("persistence")["aof_last_write_status"] == "ok"
    finally:
        store.close()


def connection_id(store: RedisStore) -> int:
    """The server's id of the connection the store's next call goes out on."""
    [client_id] = store.redis.send(("CLIENT", "ID"))
    return int(client_id)


def command_calls(client: redis.Redis, command: str) -> int:
    """How many times the server has run `command` (lower case), by INFO commandstats."""
    return int(client.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


def test_an_error_reply_among_commands_sent_together_leaves_the_connection_in_step(
    redis_url: str, client: redis.Redis
) -> None:
    # Every reply is read before the error is raised: the next call on the
    # connection reads its own reply, not one left over.
    P = "{chit-send}"
    with own_store(redis_url, client, P) as store:
        sent = store.redis.send
        before = connection_id(store)
        with pytest.raises(redis.ResponseError, match="not an integer"):
            sent(("SET", f"{P}:a", "1"), ("INCRBY", f"{P}:a", "x"), ("SET", f"{P}:b", "2"))
        assert sent(("GET", f"{P}:a"), ("GET", f"{P}:b"), ("CLIENT", "ID")) == ["1", "2", before]


@pytest.fixture(params=[True, False], ids=["c-parser", "redis-py-parser"])
def c_parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Each way `send` reads: with the C parser (wire.py), and redis-py's without it."""
    if not request.param:
        monkeypatch.setattr("chit.store.redis.connection.hiredis", None)
    return bool(request.param)


class _Interrupted:
    """A reply reader interrupted (Ctrl-C, a signal's exception) mid-read."""

    def has_data(self) -> bool:
        return False

    def gets(self) -> object:
        raise KeyboardInterrupt


def test_a_call_interrupted_before_its_reply_leaves_no_reply_for_the_next_call(
    redis_url: str, client: redis.Redis, monkeypatch: pytest.MonkeyPatch, c_parser: bool
) -> None:
    # `send` keeps its connection for the next call: one whose
    # reply was never read (an interrupt, a timeout) must not be handed out as it is.
    P = "{chit-interrupted}"
    with own_store(redis_url, client, P) as store:
        sent = store.redis.send
        before = connection_id(store)
        [wire] = store.redis._idle

        def interrupted(self: object, *args: object, **kwargs: object) -> None:
            raise KeyboardInterrupt

        with monkeypatch.context() as m:
            if c_parser:
                m.setattr(wire, "_reader", _Interrupted())
            else:
                m.setattr(type(wire.conn), "read_response", interrupted)
            with pytest.raises(KeyboardInterrupt):
                sent(("SET", f"{P}:a", "1"))
        assert sent(("GET", f"{P}:a"), ("CLIENT", "ID")) == ["1", ANY]
        assert connection_id(store) != before  # that connection was closed, not kept


def test_a_call_after_the_server_closed_its_connection_is_sent_on_a_new_one(
    redis_url: str, client: redis.Redis
) -> None:
    # A restart, or the server's idle timeout, closes the connections `send` keeps:
    # nothing was sent on them, so the next call opens another.
    with own_store(redis_url, client, "{chit-closed}") as store:
        before = connection_id(store)
        client.client_kill_filter(_id=before)
        assert connection_id(store) != before


def test_a_call_to_a_server_gone_away_tries_to_connect_once(
    redis_url: str, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A connection a failed call closed was opened by the check for unread
    # data, then again by the send: each call waited out two connect timeouts.
    with own_store(redis_url, client, "{chit-gone}") as store:
        connection_id(store)  # one connection kept, idle
        conn_class = store.redis.node().connection_pool.connection_class
        tries: list[int] = []

        def refused(self: object) -> None:
            tries.append(1)
            raise OSError("refused")

        with monkeypatch.context() as m:
            m.setattr(conn_class, "_connect", refused)
            for wire in store.redis._idle:
                wire.close()  # as a failed call leaves it
            for _ in range(2):
                with pytest.raises(StoreError):
                    store.redis.run(lambda: store.redis.send(("PING",)))
        assert len(tries) == 2
        assert connection_id(store)  # the server is there again: a call goes through


def test_more_than_a_hundred_calls_at_once_each_get_a_connection(
    redis_url: str, client: redis.Redis
) -> None:
    # redis-py 8 bounds a pool at 100 unless told otherwise: the 101st call
    # at once failed. Each call here blocks until all 150 are waiting.
    P = "{chit-many}"
    with own_store(redis_url, client, P) as store:
        errors: list[BaseException] = []

        def wait() -> None:
            try:
                store.redis.send(("BLPOP", f"{P}:go", 30))
            except BaseException as e:  # reported below
                errors.append(e)

        blocked = client.info("clients")["blocked_clients"]
        threads = [threading.Thread(target=wait) for _ in range(150)]
        for t in threads:
            t.start()
        wait_until(
            lambda: errors or client.info("clients")["blocked_clients"] >= blocked + 150,
            20,
            what="150 calls blocked at once",
        )
        client.rpush(f"{P}:go", *range(150))
        for t in threads:
            t.join()
        assert errors == []


def test_a_forked_child_calls_on_its_own_connection(redis_url: str, client: redis.Redis) -> None:
    # A child inherits its parent's connections; reading replies on
    # the parent's socket would take the parent's replies.
    P = "{chit-fork}"
    with own_store(redis_url, client, P) as store:
        parent = connection_id(store)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report its connection's id, and go
            try:
                os.write(write, str(connection_id(store)).encode())
            finally:
                os._exit(0)
        os.close(write)
        with os.fdopen(read) as r:
            child = r.read()
        os.waitpid(pid, 0)
        assert child and child != str(parent)
        assert connection_id(store) == parent


def test_closing_the_store_closes_its_connections_and_one_still_in_a_call_after_it(
    redis_url: str, client: redis.Redis
) -> None:
    P = "{chit-close}"
    store = RedisStore(redis_url, prefix=P)
    busy: list[int] = []

    def call() -> None:  # blocks, its connection taken, until after the store is closed
        busy.append(int(store.redis.send(("CLIENT", "ID"), ("BLPOP", f"{P}:go", 30))[0]))

    t = threading.Thread(target=call)
    blocked = client.info("clients")["blocked_clients"]
    t.start()
    wait_until(
        lambda: client.info("clients")["blocked_clients"] > blocked, 10, what="the call blocked"
    )
    idle = connection_id(store)  # another connection, given back idle
    store.close()

    def open_ids() -> set[int]:
        return {int(c["id"]) for c in client.client_list()}

    assert idle not in open_ids()
    client.rpush(f"{P}:go", "1")
    t.join()
    assert busy and busy[0] != idle
    wait_until(lambda: busy[0] not in open_ids(), 10, what="the busy connection closed after")
    client.delete(f"{P}:go")


def test_a_batch_goes_in_the_short_form_only_when_no_job_has_the_later_fields(
    redis_url: str, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Plain jobs are sent with their first 8 fields alone; one job with any
    # later field (a concurrency key here) sends the whole batch in full.
    with own_store(redis_url, client, "{chit-short}") as store:
        calls = recorded_calls(monkeypatch, store, "fcall_synced")
        plain = store.enqueue_many([NewJob("k", {"n": 1}), NewJob("k", {"n": 2})])
        mixed = store.enqueue_many(
            [NewJob("k", {"n": 3}), NewJob("k", {"n": 4}, concurrency_key="c", timeout=0.5)]
        )
        assert [call[2] for call in calls] == [8, 20]  # the width, after the clock
        got = [store.get(e.id) for e in plain + mixed]
        assert [j.payload["n"] for j in got if j] == [1, 2, 3, 4]
        assert [(j.concurrency_key, j.timeout) for j in got if j] == [
            ("", None), ("", None), ("", None), ("c", 0.5)
        ]  # fmt: skip


def test_an_error_reply_is_the_error_redis_py_gives_it(
    redis_url: str, client: redis.Redis, monkeypatch: pytest.MonkeyPatch, c_parser: bool
) -> None:
    # A server loading its AOF answers LOADING: a wait mends that, so it is
    # "cannot reach" (503 from the API), as redis-py's BusyLoadingError makes
    # it; a replica's READONLY, or any other error reply, names the server.
    with own_store(redis_url, client, "{chit-errors}") as store:
        conn = store.redis

        def reply(error: str) -> tuple[str, ...]:
            return ("EVAL", f"return redis.error_reply('{error}')", "0")

        with pytest.raises(StoreError, match=r"cannot reach Redis at .*: Redis is loading"):
            conn.run(lambda: conn.send(("PING",), reply("LOADING Redis is loading the dataset")))
        with pytest.raises(StoreError, match=r"^Redis at .*: You cannot write against"):
            conn.run(lambda: conn.send(reply("READONLY You cannot write against a replica")))
        with pytest.raises(StoreError, match=r"^Redis at .*: first$"):
            conn.run(lambda: conn.send(reply("ERR first"), ("PING",), reply("ERR second")))
        assert conn.send(("PING",), ("ECHO", "é")) == ["PONG", "é"]  # nothing left unread


def test_a_push_or_a_false_reply_leaves_each_call_its_own_reply(
    redis_url: str, client: redis.Redis, monkeypatch: pytest.MonkeyPatch, c_parser: bool
) -> None:
    # redis-py 8 speaks RESP3: the server may push a frame no call asked for
    # (a maintenance notice; here a tracking invalidation), and a reply may be
    # RESP3's false, which the C reader also returns for "read more". A
    # timeout bounds a read that would otherwise wait for ever.
    P = "{chit-push}"
    with own_store(f"{redis_url}?socket_timeout=5", client, P) as store:
        send = store.redis.send
        tracked = send(("CLIENT", "TRACKING", "ON"), ("GET", f"{P}:k"), ("SET", f"{P}:k", "x"))
        assert tracked == ["OK", None, "OK"]  # the invalidation pushed behind the SET is no reply
        assert send(("ECHO", "one")) == ["one"]
        assert send(("ECHO", "two")) == ["two"]
        assert send(("EVAL", "redis.setresp(3); return false", "0"), ("PING",)) == [False, "PONG"]


def test_a_store_without_the_c_parser_packs_its_calls_itself(
    redis_url: str, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("chit.store.redis.connection.hiredis", None)
    with own_store(redis_url, client, "{chit-pure}") as store:
        job_id = store.enqueue(NewJob("k", {"text": "é \r\n $3"})).id
        [job] = store.claim("w", ["default"], 1, 30)
        assert store.finish([Succeeded(job_id, job.lease_token, {"n": 1.5})]) == [True]
        got = store.get(job_id)
        assert got is not None and job.payload == {"text": "é \r\n $3"}
        assert str(got.state) == "succeeded" and got.result == {"n": 1.5}


def test_an_enqueue_sent_again_after_its_reply_was_lost_stores_its_jobs_once(
    redis_url: str, client: redis.Redis
) -> None:
    # A client sends a call again when its connection breaks, perhaps after
    # the server ran it: the same job ids come a second time.
    P = "{chit-again}"
    with own_store(redis_url, client, P) as store:
        jobs = [NewJob("k", {"n": 1}), NewJob("k", {"n": 2}, idempotency_key="i")]
        args: list[object] = ["", 20, ""]
        ids = ["01AAAAAAAAAAAAAAAAAAAAAAAA", "01BBBBBBBBBBBBBBBBBBBBBBBB"]
        for job_id, job in zip(ids, jobs, strict=True):
            args += store._fields(job_id, job)
        first = store.redis.fcall("chit_enqueue", *args)
        assert first[0::3] == ["c", "c"]
        again = store.redis.fcall("chit_enqueue", *args)
        assert [str(v) for v in again] == [str(v) for v in first]  # the same created_at
        assert store.stats().by_state["queued"] == 2
        assert redis_index_faults(client, P) == []
        assert client.llen(f"{P}:w:default") == 2  # a wake token a job, once


def test_a_one_call_claim_pages_past_a_long_line_of_held_jobs(
    redis_url: str, client: redis.Redis
) -> None:
    # chit_claim reads as many ready entries as it wants, then pages twice as
    # long each time, up to 200. Jobs of a held kind (limited or paused, left
    # to flow claims), six of every seven in line, are looked past; each of
    # ours is claimed once, in order, wherever a page boundary falls.
    P = "{chit-pages}"
    with own_store(redis_url, client, P) as store:
        at = datetime.now(UTC) - timedelta(hours=1)
        kinds = ["ours" if i % 7 == 3 else "held" for i in range(600)]
        line = [NewJob(kind, {}, run_at=at + timedelta(seconds=i)) for i, kind in enumerate(kinds)]
        ids = [e.id for e in store.enqueue_many(line)]
        plain = Claim("w", ("default",), 50, 30.0, None)
        claimed: list[str] = []
        while batch := [job.id for job in store._claim_held(plain, "", ("held",))]:
            claimed += batch
        assert claimed == [i for i, kind in zip(ids, kinds, strict=True) if kind == "ours"]
        assert store.stats().by_state["queued"] == kinds.count("held")
        assert redis_index_faults(client, P) == []


def test_a_flow_claim_pages_past_a_long_line_of_expired_jobs(
    redis_url: str, client: redis.Redis
) -> None:
    # A flow claim reads a group's jobs as chit_claim reads the ready set:
    # six of every seven have expired (not started, past expires_at), and are
    # looked past; the others are claimed once each, in order.
    P = "{chit-group-pages}"
    with own_store(redis_url, client, P) as store:
        store.declare_limits({"k": Limits(concurrency=1000)})
        at = datetime.now(UTC) - timedelta(hours=1)
        fresh = [i % 7 == 3 for i in range(600)]
        line = [
            NewJob("k", {}, run_at=at + timedelta(seconds=i), expires_in=None if f else 60)
            for i, f in enumerate(fresh)
        ]
        ids = [e.id for e in store.enqueue_many(line)]
        later = datetime.now(UTC) + timedelta(seconds=120)
        claimed: list[str] = []
        while batch := [job.id for job in store.claim("w", ["default"], 3, 30, now=later)]:
            claimed += batch
        assert claimed == [i for i, f in zip(ids, fresh, strict=True) if f]


def test_a_sign_in_takes_sessions_gone_by_their_expiry_out_of_their_keys_set(
    redis_url: str, client: redis.Redis
) -> None:
    P = "{chit-sessions}"
    with own_store(redis_url, client, P) as store:
        store.create_session(NewSession("live", "k1", idle_seconds=60, max_seconds=3600))
        for n in range(5):  # each gone 1 ms after its sign-in, by the server's clock
            store.create_session(NewSession(f"brief{n}", "k1", idle_seconds=1, max_seconds=0.001))
        wait_until(lambda: not client.exists(*[f"{P}:sess:brief{n}" for n in range(5)]), 10)
        assert client.scard(f"{P}:ksess:k1") == 6
        store.create_session(NewSession("next", "k1", idle_seconds=60, max_seconds=3600))
        assert client.smembers(f"{P}:ksess:k1") == {"live", "next"}


def test_lost_leases_and_expiries_are_swept_a_thousand_a_call(
    redis_url: str, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One call for every lost lease of a fleet would hold the server for as
    # long as it takes: each call takes up to 1,000, and the store calls again.
    P = "{chit-sweep}"
    at = datetime(2030, 1, 1, tzinfo=UTC)
    with own_store(redis_url, client, P) as store:
        store.enqueue_many([NewJob("k", {}, max_attempts=1 + i % 2) for i in range(2100)])
        claimed = 0
        while batch := store.claim("w", ["default"], 1000, 30, now=at):
            claimed += len(batch)
        assert claimed == 2100
        store.enqueue_many(
            [NewJob("x", {}, queue="other", expires_at=at + timedelta(seconds=1))] * 1500
        )
        calls = recorded_calls(monkeypatch, store, "fcall")
        report = store.rescue_expired(now=at + timedelta(seconds=60))
        assert (report.requeued, report.failed, report.cancelled) == (1050, 1050, 0)
        assert [call[0] for call in calls].count("chit_rescue_expired") == 3
        assert store.expire_jobs(now=at + timedelta(seconds=60)) == 1500
        assert [call[0] for call in calls].count("chit_expire_jobs") == 2
        assert redis_index_faults(client, P) == []


def test_a_tenants_queue_counts_and_oldest_read_none_of_other_tenants_jobs() -> None:
    # Each was one call reading every job of the queue, one HGET a job: with
    # 100,000 of another tenant's jobs, two seconds with the server held. A
    # server of its own: the count is the server's, and an earlier test's
    # thread still winding down on the shared one would add to it.
    P = "{chit-tenants}"
    with (
        redis_server() as url,
        closing(redis.Redis.from_url(url)) as client,
        own_store(url, client, P) as store,
    ):
        store.enqueue_many([NewJob("k", {}, tenant="big") for _ in range(3000)])
        store.enqueue_many(
            [NewJob("k", {}, tenant="big", run_at=datetime(2100, 1, 1, tzinfo=UTC))] * 2000
        )
        store.enqueue(NewJob("k", {}, tenant="small"))

        before = command_calls(client, "hget")
        [counts] = store.queue_counts(tenant="small")
        assert (counts.ready, counts.scheduled) == (1, 0)
        oldest = store.oldest_queued(tenant="small")
        assert oldest is not None and oldest.tenant == "small"
        assert store.stats(tenant="nobody").oldest_queued_age is None
        assert command_calls(client, "hget") - before < 50


def test_a_list_few_jobs_match_reads_its_ids_over_several_calls(
    redis_url: str, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One call read ids until it had found the page: a rare kind among
    # millions of jobs held the server for the whole walk.
    P = "{chit-rare}"
    with own_store(redis_url, client, P) as store:
        rare = [store.enqueue(NewJob("rare", {"n": n})).id for n in range(3)]
        store.enqueue_many([NewJob("common", {})] * 11_000)
        calls = recorded_calls(monkeypatch, store, "fcall_ro")
        first = store.list(JobFilter(kind="rare"), limit=2)
        assert [j.id for j in first.jobs] == rare[:0:-1] and first.next_cursor == rare[1]
        # 11,000 common ids first, 5,000 a call
        assert [call[0] for call in calls].count("chit_list") == 3
        rest = store.list(JobFilter(kind="rare"), limit=2, cursor=first.next_cursor)
        assert [j.id for j in rest.jobs] == rare[:1] and rest.next_cursor is None
        assert store.list(JobFilter(kind="none"), limit=5).jobs == []


def test_a_tenants_failures_and_replays_read_only_its_own_failed_jobs() -> None:
    P = "{chit-failed}"  # on a server of its own, as the test above
    with (
        redis_server() as url,
        closing(redis.Redis.from_url(url)) as client,
        own_store(url, client, P) as store,
    ):
        store.enqueue_many([NewJob("k", {}, tenant="big", max_attempts=1)] * 2000)
        while batch := store.claim("w", ["default"], 1000, 30):
            assert store.finish([Failed(j.id, j.lease_token, "Boom") for j in batch]) == [
                True
            ] * len(batch)
        store.enqueue(NewJob("k", {}, tenant="small", max_attempts=1))
        [mine] = store.claim("w", ["default"], 1, 30)
        store.finish([Failed(mine.id, mine.lease_token, "Boom")])

        before = command_calls(client, "hmget")
        [group] = store.failures(tenant="small")
        assert group.count == 1
        assert store.replay_failure_group("k", "Boom", tenant="small") == 1
        assert command_calls(client, "hmget") - before < 50
