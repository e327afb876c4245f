"""HTTP protocol details against a real `chit serve` (uvicorn), with raw
sockets where a client library would hide the problem: 405's Allow, HEAD as a
status probe, a request that gives its length two ways, a very long URL."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from chit.cli.http_protocol import HEAD_TIMEOUT
from support.stack import lone_server
from support.waiting import wait_until


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with lone_server(tmp_path_factory.mktemp("protocol")) as url:
        yield url


def raw(url: str, request: bytes) -> bytes:
    """Send bytes, read until the server closes or the answer is complete."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(request)
        s.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    return answer


def submit(url: str) -> str:
    response = httpx.post(f"{url}/jobs", json={"kind": "echo", "payload": {"message": "hi"}})
    assert response.status_code == 202, response.text
    return str(response.json()["job_id"])


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("PUT", "/jobs", "GET, POST"),
        ("DELETE", "/jobs", "GET, POST"),
        ("OPTIONS", "/jobs/replay", "POST"),
        ("GET", "/jobs/replay/x", None),
        ("PUT", "/jobs/01m8t86hq608zpv21ew92h8ayb", "GET, HEAD, PATCH"),
        ("PUT", "/jobs/01m8t86hq608zpv21ew92h8ayb/run-now", "POST"),
        ("POST", "/limits/k", "DELETE, PUT"),
        ("PUT", "/ui/login", "GET, POST"),
    ],
)
def test_405_lists_every_method_of_the_path(
    server: str, method: str, path: str, allow: str | None
) -> None:
    response = httpx.request(method, f"{server}{path}")
    if allow is None:
        assert response.status_code == 404
        return
    assert response.status_code == 405, response.text
    assert response.headers["allow"] == allow
    assert response.json()["error"] == "method_not_allowed"


def test_head_of_a_job_is_a_status_probe(server: str) -> None:
    job_id = submit(server)
    got = httpx.get(f"{server}/jobs/{job_id}")
    head = httpx.head(f"{server}/jobs/{job_id}")
    assert head.status_code == 200 and head.content == b""
    assert head.headers["etag"] == got.headers["etag"]
    assert head.headers["content-length"] == str(len(got.content))
    assert head.headers["retry-after"] == "1"
    unchanged = httpx.head(
        f"{server}/jobs/{job_id}", headers={"If-None-Match": got.headers["etag"]}
    )
    assert unchanged.status_code == 304
    assert httpx.head(f"{server}/jobs/{'0' * 26}").status_code == 404


def test_content_length_with_transfer_encoding_is_400(server: str) -> None:
    body = b'{"kind": "echo", "payload": {"message": "smuggled"}}'
    request = (
        b"POST /jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n" % len(body)
        + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    )
    answer = raw(server, request)
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
    assert b"not both" in answer
    listed = httpx.get(f"{server}/jobs", params={"kind": "echo"}).json()["jobs"]
    assert not any(j.get("result") == "smuggled" for j in listed)
    assert all("smuggled" not in str(j) for j in listed)


def test_a_one_megabyte_url_is_answered_not_reset(server: str) -> None:
    request = b"GET /jobs?kind=" + b"a" * 1_000_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"
    answer = raw(server, request)
    assert answer.split(b" ", 2)[1] in (b"414", b"431"), answer[:200]


def test_one_header_past_the_limit_is_431_even_when_it_arrives_whole(server: str) -> None:
    """h11 measures a head only while it is incomplete: one that arrives whole in
    a single read was let through at any size (a 100,000-byte header: 200)."""
    big = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n"
    answer = raw(server, big)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert b"headers are too long" in answer
    # Under the limit (64 KiB), a large header is served.
    fits = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 60_000 + b"\r\n\r\n"
    assert raw(server, fits).startswith(b"HTTP/1.1 200 ")


@pytest.mark.slow
def test_a_request_whose_headers_never_end_is_timed_out(server: str) -> None:
    host, port = server.removeprefix("http://").split(":")
    started = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=HEAD_TIMEOUT + 10) as s:
        s.sendall(b"GET /jobs HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert time.monotonic() - started >= HEAD_TIMEOUT - 1


@pytest.mark.slow
def test_connections_beyond_chit_max_connections_get_503_at_once(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    # uvicorn counts the connection a request comes on: with 3, two event
    # streams held open leave a third connection only its 503.
    with lone_server(tmp_path_factory.mktemp("capped"), CHIT_MAX_CONNECTIONS="3") as url:
        job_id = submit(url)  # queued, no worker: its event stream stays open
        host, port = url.removeprefix("http://").split(":")
        streams = []
        try:
            for expected in (b"200", b"200", b"503"):
                s = socket.create_connection((host, int(port)), timeout=10)
                streams.append(s)
                s.sendall(f"GET /jobs/{job_id}/events HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                assert s.recv(65536).split(b" ", 2)[1] == expected
            started = time.monotonic()
            refused = httpx.get(f"{url}/healthz", timeout=10)
            assert refused.status_code == 503, refused.text
            assert time.monotonic() - started < 5  # at once, not queued
        finally:
            for s in streams:
                s.close()
        # The streams closed, connections are free again.
        wait_until(lambda: httpx.get(f"{url}/healthz").status_code == 200, 10, what="a free slot")
