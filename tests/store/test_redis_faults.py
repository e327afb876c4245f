"""The Redis store when its server dies: `redis-server` killed with SIGKILL and
started again from its AOF keeps every job the store acknowledged, and the
same store object carries on once it is back, its functions loaded again."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from chit.errors import StoreError
from chit.jobs import NewJob, State, Succeeded
from chit.store.redis import RedisStore
from support.redis import EVERY_WRITE_SYNCED, free_port, start_redis


@pytest.mark.slow
def test_a_killed_server_restarted_from_its_aof_keeps_every_acknowledged_job(
    tmp_path: Path,
) -> None:
    port = free_port()
    server = start_redis(tmp_path, port, *EVERY_WRITE_SYNCED)
    assert server is not None
    store = RedisStore(f"redis://127.0.0.1:{port}/0")
    try:
        ids = [store.enqueue(NewJob("k", {"i": i})).id for i in range(300)]
        ids += [e.id for e in store.enqueue_many([NewJob("k", {"i": i}) for i in range(300)])]
        claimed = store.claim("w", ["default"], 20, 30)
        done = store.finish([Succeeded(c.id, c.lease_token, {"ok": 1}) for c in claimed[:10]])
        assert done == [True] * 10

        server.send_signal(signal.SIGKILL)
        server.wait()
        with pytest.raises(StoreError, match=f"127.0.0.1:{port}"):
            store.get(ids[0])
        server = start_redis(tmp_path, port, *EVERY_WRITE_SYNCED)
        assert server is not None

        stats = store.stats()
        assert stats.by_state["succeeded"] == 10 and stats.by_state["running"] == 10
        assert stats.by_state["queued"] == len(ids) - 20
        held = {c.id: c for c in claimed[10:]}
        assert store.finish([Succeeded(j, c.lease_token) for j, c in held.items()]) == [True] * 10
        rest = store.claim("w", ["default"], 1000, 30)
        assert len(rest) == len(ids) - 20
        assert {c.id for c in rest} | {c.id for c in claimed} == set(ids)
        got = store.get(ids[-1])
        assert got is not None and got.state is State.RUNNING
    finally:
        store.close()
        if server is not None:
            server.kill()
            server.wait()
