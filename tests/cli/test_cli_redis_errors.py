"""The real `chit` command given a Redis server it must not use: nothing
listening, no AOF, an evicting policy, a wrong password, a replica. Each is one
line on stderr, exit code 3, no traceback, from `list`, `worker`, `serve` and
`up` alike. (A worker started while its server is down waits for it instead,
as on PostgreSQL: that one mends by itself.)"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import closing, contextmanager

import pytest
import redis

from support.cli import assert_refused, run_cli
from support.processes import free_port
from support.redis import has_waitaof, redis_server

pytestmark = pytest.mark.slow

COMMANDS = {
    "list": ["list"],
    "worker": ["worker", "--app", "support.cli_app:queue"],
    "serve": ["serve", "--port", "PORT"],
    "up": ["up", "--workers", "1", "--port", "PORT"],
}


@pytest.fixture(scope="module")
def plain() -> Iterator[str]:
    with redis_server() as url:
        yield url


@pytest.fixture(scope="module")
def locked() -> Iterator[str]:
    with redis_server(password="right-secret") as url:
        yield url


@contextmanager
def setting(url: str, name: str, value: str) -> Iterator[None]:
    with closing(redis.Redis.from_url(url, decode_responses=True)) as client:
        before = client.config_get(name)[name]
        client.config_set(name, value)
        try:
            yield
        finally:
            client.config_set(name, before)


@contextmanager
def replica_of_nothing(url: str) -> Iterator[None]:
    """The server made a replica of a port nothing listens on: it stays a
    replica (serving its stale data), which is what chit must refuse."""
    with closing(redis.Redis.from_url(url, decode_responses=True)) as client:
        client.replicaof("127.0.0.1", str(free_port()))
        try:
            yield
        finally:
            client.replicaof("NO", "ONE")


def nothing_listening() -> str:
    with closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return f"redis://127.0.0.1:{s.getsockname()[1]}/0"


def run(command: str, url: str) -> str:
    """The command's one line of refusal (exit 3, nothing on stdout, no traceback)."""
    args = [str(free_port()) if a == "PORT" else a for a in COMMANDS[command]]
    return assert_refused(run_cli(*args, timeout=60, CHIT_DATABASE_URL=url), 3)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("command", COMMANDS)
def test_a_server_without_aof_is_one_line_exit_3(command: str, plain: str) -> None:
    with setting(plain, "appendonly", "no"):
        line = run(command, plain)
    assert "has appendonly no: chit needs appendonly yes" in line


@pytest.mark.timeout(90)
@pytest.mark.parametrize("command", COMMANDS)
def test_an_evicting_server_is_one_line_exit_3(command: str, plain: str) -> None:
    with setting(plain, "maxmemory-policy", "allkeys-lru"):
        line = run(command, plain)
    assert "has maxmemory-policy allkeys-lru: chit needs maxmemory-policy noeviction" in line


@pytest.mark.timeout(90)
@pytest.mark.parametrize("command", COMMANDS)
def test_a_replica_is_one_line_exit_3(command: str, plain: str) -> None:
    with replica_of_nothing(plain):
        line = run(command, plain)
    assert "is a replica: point chit at the primary" in line


@pytest.mark.timeout(90)
@pytest.mark.parametrize("command", COMMANDS)
def test_a_wrong_password_is_one_line_exit_3_without_the_password(
    command: str, locked: str
) -> None:
    wrong = locked.replace("right-secret", "wrong-secret")
    line = run(command, wrong)
    assert "refused the credentials" in line
    assert "secret" not in line


@pytest.mark.timeout(90)
@pytest.mark.parametrize("command", ["list", "serve", "up"])
def test_a_url_to_nothing_is_one_line_exit_3(command: str) -> None:
    url = nothing_listening()
    line = run(command, url)
    assert f"cannot reach Redis at {url.split('//')[1].split('/')[0]}" in line


@pytest.mark.timeout(90)
@pytest.mark.parametrize("command", ["list", "worker"])
def test_a_cluster_url_to_a_server_without_cluster_mode_is_one_line_exit_3(
    command: str, plain: str
) -> None:
    url = plain.replace("redis://", "redis+cluster://").removesuffix("/0")
    line = run(command, url)
    assert "Cluster mode is not enabled on this node" in line


@pytest.mark.timeout(90)
def test_a_cluster_url_to_nothing_is_one_line_exit_3() -> None:
    url = nothing_listening().replace("redis://", "redis+cluster://").removesuffix("/0")
    line = run("list", url)
    assert f"cannot reach the Redis Cluster at {url.split('//')[1]}" in line


@pytest.mark.timeout(90)
def test_wait_aof_on_a_server_without_waitaof_is_one_line_exit_3(plain: str) -> None:
    if has_waitaof(plain):
        pytest.skip("this server has WAITAOF (Redis 7.2+)")
    args = COMMANDS["list"]
    line = assert_refused(run_cli(*args, CHIT_DATABASE_URL=plain, CHIT_REDIS_WAIT_AOF="1"), 3)
    assert "has no WAITAOF" in line
