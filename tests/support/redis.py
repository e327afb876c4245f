"""A `redis-server` of the test session's own: a free port, a temporary folder,
the durability chit's Redis store insists on (AOF on, no eviction), no RDB
snapshots. The shared server on 6379 is never used by tests.

`CHIT_TEST_REDIS_SERVER` names another binary (default: `redis-server` on the
PATH; `make test` installs Debian's when it is missing, scripts/test-deps.sh).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest
import redis

from chit.store.redis import RedisStore

START_SECONDS = 20.0

# For tests that SIGKILL the server and count what it acknowledged: under the
# default everysec, Redis answers before writing its AOF buffer while a slow
# fsync runs (a busy disk), and a kill then loses those writes.
EVERY_WRITE_SYNCED = ("--appendfsync", "always")


def _free_port() -> int:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cluster_port() -> int:
    """A free port whose cluster bus port, 10,000 above it, is free too: a
    cluster node binds both, and one above 55,535 has no bus port at all."""
    for _ in range(50):
        port = _free_port()
        if port + 10_000 <= 65_535 and _is_free(port + 10_000):
            return port
    pytest.fail("found no free port with a free cluster bus port", pytrace=False)


def _is_free(port: int) -> bool:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def redis_binary() -> str:
    binary = os.environ.get("CHIT_TEST_REDIS_SERVER") or shutil.which("redis-server")
    if binary is None:
        pytest.fail(
            "redis-server is not installed: `make test` installs it (scripts/test-deps.sh),"
            " or set CHIT_TEST_REDIS_SERVER to a binary",
            pytrace=False,
        )
    return binary


def start_redis(
    folder: Path, port: int, *extra: str, password: str | None = None
) -> subprocess.Popen[bytes] | None:
    """A redis-server on `port` keeping its files (AOF) in `folder`, once it
    answers; None when it did not start (the port was taken meanwhile)."""
    import redis

    if password is not None:
        extra = (*extra, "--requirepass", password)
    args = [redis_binary(), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder)]
    args += ["--appendonly", "yes", "--maxmemory-policy", "noeviction", "--save", ""]
    args += ["--daemonize", "no", "--logfile", str(folder / "redis.log"), *extra]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis.from_url(_url(port, password), socket_connect_timeout=1)
    deadline = time.monotonic() + START_SECONDS
    try:
        while process.poll() is None and time.monotonic() < deadline:
            try:
                client.ping()
                return process
            except redis.ConnectionError:
                time.sleep(0.02)  # the server is starting: nothing to wait on but its port
            except redis.BusyLoadingError:
                time.sleep(0.02)  # reading its AOF back
    finally:
        client.close()
    process.kill()
    process.wait()
    return None


def _url(port: int, password: str | None) -> str:
    credentials = f":{password}@" if password is not None else ""
    return f"redis://{credentials}127.0.0.1:{port}/0"


def free_port() -> int:
    return _free_port()


@contextmanager
def redis_server(*extra: str, password: str | None = None) -> Iterator[str]:
    """A running server of our own, as a redis:// URL (with `password`, if it
    requires one); stopped and its folder removed when the block ends."""
    folder = Path(tempfile.mkdtemp(prefix="chit-redis-"))
    for _ in range(3):  # another process may take the free port before the server binds it
        port = _free_port()
        process = start_redis(folder, port, *extra, password=password)
        if process is None:
            continue
        url = _url(port, password)
        try:
            yield url
        finally:
            _shut_down(url)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            shutil.rmtree(folder, ignore_errors=True)
        return
    log = (folder / "redis.log").read_text() if (folder / "redis.log").exists() else ""
    shutil.rmtree(folder, ignore_errors=True)
    pytest.fail(f"redis-server did not start:\n{log[-2000:]}", pytrace=False)


def _shut_down(url: str) -> None:
    """SHUTDOWN NOSAVE FORCE: SIGTERM is refused while an AOF is first written
    (a test that turned appendonly off and on again)."""
    import redis

    client = redis.Redis.from_url(url, socket_connect_timeout=1)
    try:
        client.shutdown(nosave=True, force=True)
    except redis.ConnectionError:
        pass  # it went down answering, or was down already
    finally:
        client.close()


def has_waitaof(url: str) -> bool:
    """Whether the server has WAITAOF (Redis 7.2+; Valkey says 7.2.4 too)."""
    import redis

    with closing(redis.Redis.from_url(url, decode_responses=True)) as client:
        version = str(client.info("server")["redis_version"])
    return tuple(int(part) for part in version.split(".")[:2]) >= (7, 2)


def emptied_redis(url: str) -> str:
    """The server with every key deleted (chit's functions stay: they are no keys)."""
    import redis

    with closing(redis.Redis.from_url(url)) as client:
        client.flushdb()
    return url


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """The session's own Redis server (one per test process)."""
    with redis_server() as url:
        yield url


@contextmanager
def redis_cluster(masters: int = 3) -> Iterator[list[str]]:
    """A Redis Cluster of `masters` primaries of our own (no replicas), each
    with AOF on, its slots shared out by `redis-cli --cluster create`; yields
    each node's redis+cluster:// URL once every node reports the cluster ok."""
    import redis

    folder = Path(tempfile.mkdtemp(prefix="chit-redis-cluster-"))
    processes: list[subprocess.Popen[bytes]] = []
    ports: list[int] = []
    try:
        for i in range(masters):
            node = folder / f"node{i}"
            node.mkdir()
            for _ in range(3):  # the free port may be taken before the node binds it
                port = _cluster_port()
                cluster = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
                process = start_redis(node, port, *cluster)
                if process is not None:
                    processes.append(process)
                    ports.append(port)
                    break
            else:
                pytest.fail(f"cluster node {i} did not start", pytrace=False)
        cli = shutil.which("redis-cli")
        if cli is None:
            pytest.fail("redis-cli is missing (Debian's redis-tools)", pytrace=False)
        nodes = [f"127.0.0.1:{p}" for p in ports]
        created = subprocess.run(
            [cli, "--cluster", "create", *nodes, "--cluster-replicas", "0", "--cluster-yes"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert created.returncode == 0, created.stdout + created.stderr
        clients = [redis.Redis(port=p, decode_responses=True) for p in ports]
        deadline = time.monotonic() + START_SECONDS
        try:
            # The nodes learn of each other by gossip: nothing to wait on but their word.
            while not all(c.cluster("INFO")["cluster_state"] == "ok" for c in clients):
                assert time.monotonic() < deadline, "the cluster did not come up"
                time.sleep(0.05)
        finally:
            for c in clients:
                c.close()
        yield [f"redis+cluster://127.0.0.1:{p}" for p in ports]
    finally:
        for process in processes:
            process.kill()
            process.wait()
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def own_store(redis_url: str, client: redis.Redis, prefix: str) -> Iterator[RedisStore]:
    store = RedisStore(redis_url, prefix=prefix)
    try:
        yield store
    finally:
        for key in client.scan_iter(match=f"{prefix}:*"):
            client.delete(key)
        store.close()


def recorded_calls(
    monkeypatch: pytest.MonkeyPatch, store: RedisStore, method: str
) -> list[tuple[object, ...]]:
    """Each call the store makes through `method` (fcall, fcall_ro,
    fcall_synced) from now on: the function's name and its arguments."""
    calls: list[tuple[object, ...]] = []
    call = getattr(store.redis, method)

    def recording(function: str, *args: object) -> object:
        calls.append((function, *args))
        return call(function, *args)

    monkeypatch.setattr(store.redis, method, recording)
    return calls
