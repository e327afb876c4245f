"""The Redis store over each way to reach a server a URL can name: a unix
socket (unix://) and TLS (rediss://), besides the TCP every other test uses.
The store writes and reads its calls' sockets itself (wire.py), so each runs a
job's life, an idle worker's blocking claim, and a broken connection's reopening."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from urllib.parse import quote

import pytest
import redis

from chit.errors import StoreError
from chit.jobs import NewJob, Succeeded
from chit.store.redis import RedisStore
from store.test_redis_claim_on_wake import waiting
from support.redis import free_port, redis_server


@pytest.fixture(scope="module")
def folder() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="chit-transports-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key."""
    if shutil.which("openssl") is None:
        pytest.fail("openssl is missing (Debian's openssl)", pytrace=False)
    cert, key = folder / "server.crt", folder / "server.key"
    command = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
               "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
               "-keyout", str(key), "-out", str(cert)]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True)
    return cert, key


@pytest.fixture(scope="module", params=["unix", "tls"])
def url(request: pytest.FixtureRequest, folder: Path) -> Iterator[str]:
    """A chit URL of the transport, and the server behind it (also on TCP)."""
    if request.param == "unix":
        socket_path = folder / "redis.sock"
        with redis_server("--unixsocket", str(socket_path), "--unixsocketperm", "700"):
            yield f"unix://{socket_path}?db=0"
        return
    cert, key = _certificate(folder)
    port = free_port()
    tls = ("--tls-port", str(port), "--tls-cert-file", str(cert), "--tls-key-file", str(key),
           "--tls-ca-cert-file", str(cert), "--tls-auth-clients", "no")  # fmt: skip
    with redis_server(*tls):
        yield f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={quote(str(cert))}"


@pytest.fixture
def store(url: str) -> Iterator[RedisStore]:
    with closing(RedisStore(url, prefix="{chit-transport}")) as s:
        s.migrate()
        yield s
        with closing(redis.Redis.from_url(url)) as c:
            c.flushdb()


def test_a_job_is_stored_claimed_and_finished(store: RedisStore) -> None:
    payload = {"text": "é \r\n $3 " + "x" * 100_000}  # more than one read of the socket
    job_id = store.enqueue(NewJob("k", payload)).id
    [job] = store.claim("w", ["default"], 1, 30)
    assert job.id == job_id and job.payload == payload
    assert store.finish([Succeeded(job_id, job.lease_token, {"n": 1})]) == [True]
    got = store.get(job_id)
    assert got is not None and str(got.state) == "succeeded" and got.result == {"n": 1}


def test_an_idle_worker_wakes_and_claims_a_job_enqueued_after_it_blocked(
    store: RedisStore, url: str
) -> None:
    with closing(redis.Redis.from_url(url, decode_responses=True)) as client:
        woken = waiting(client, lambda: store.claim_on_wake("w", ["default"], 1, 30, 20))
    job_id = store.enqueue(NewJob("k", {})).id
    got = woken.result(20)
    assert got is not None and [j.id for j in got] == [job_id]


def test_a_connection_the_server_closed_is_opened_again(store: RedisStore, url: str) -> None:
    before = store.redis.send(("CLIENT", "ID"))[0]
    with closing(redis.Redis.from_url(url)) as client:
        client.client_kill_filter(_id=before)
    assert store.redis.send(("CLIENT", "ID"))[0] != before


def test_a_server_gone_is_a_store_error_not_a_hang(folder: Path) -> None:
    missing = folder / "nobody.sock"
    with pytest.raises(StoreError, match="cannot reach Redis"):
        RedisStore(f"unix://{missing}", prefix="{chit-transport}").migrate()
