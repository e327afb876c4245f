"""A real worker and a `redis-server` that comes and goes: started before its
server, the worker waits for it; with the server SIGKILLed and started again
from its AOF, the same worker carries on by itself."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from chit.jobs import State
from support.jobs import app_queue, wait_terminal
from support.processes import running_procs
from support.redis import EVERY_WRITE_SYNCED, free_port, start_redis
from support.waiting import wait_until

pytestmark = pytest.mark.slow


@pytest.mark.timeout(120)
def test_a_worker_waits_for_redis_and_carries_on_after_it_restarts(tmp_path: Path) -> None:
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    servers = []
    try:
        with running_procs(tmp_path, url) as procs:
            worker = procs.worker(name="w")
            wait_until(
                lambda: "database unavailable, retrying" in worker.stderr(),
                30,
                what="the worker to say it waits for its server",
            )
            assert worker.alive(), worker.stderr()
            servers.append(start_redis(tmp_path, port, *EVERY_WRITE_SYNCED))
            assert servers[-1] is not None, "the port was taken meanwhile"
            worker.wait_started(60)
            with app_queue(url) as queue:
                body = {"log": str(tmp_path / "runs.log"), "seconds": 0}
                first = queue.enqueue("sleep", body).id
                assert wait_terminal(queue, first, 30).state is State.SUCCEEDED

                servers[-1].send_signal(signal.SIGKILL)
                servers[-1].wait()
                servers.append(start_redis(tmp_path, port, *EVERY_WRITE_SYNCED))
                assert servers[-1] is not None, "the port was taken meanwhile"
                second = queue.enqueue("sleep", body).id
                assert wait_terminal(queue, second, 60).state is State.SUCCEEDED
                kept = wait_terminal(queue, first, 1)  # from the AOF
                assert kept.result == {"pid": worker.pid, "attempt": 1}
            assert worker.alive(), worker.stderr()
            worker.signal(signal.SIGTERM)
            assert worker.wait(20) == 0
            assert "Traceback" not in worker.stderr()
    finally:
        for server in servers:
            if server is not None and server.poll() is None:
                server.kill()
                server.wait()
