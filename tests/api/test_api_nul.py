"""A NUL character in any text the API takes is refused with 422 on both
backends (PostgreSQL's text cannot hold it; SQLite would store it), and
nothing is stored. Error messages never name the database URL, user or SQL."""

from __future__ import annotations

import pytest

from chit.errors import InvalidRequest, StoreError
from chit.jobs import JobFilter
from support.api import Api, assert_error, break_the_sqlite_file

pytestmark = pytest.mark.anyio

NUL = "a\x00b"


def stored(api: Api) -> list[str]:
    return [j.id for j in api.store.list(JobFilter(), limit=1000).jobs]


def clean(body: dict) -> None:
    """No trace of the database in a message a client reads."""
    text = str(body).lower()
    for word in ("postgres", "sqlite", "select", "insert", "where", "line 1", "context"):
        assert word not in text, body


@pytest.mark.parametrize(
    "body",
    [
        {"kind": NUL},
        {"kind": "echo", "queue": NUL, "payload": {"message": "hi"}},
        {"kind": "echo", "concurrency_key": NUL, "payload": {"message": "hi"}},
        {"kind": "echo", "payload": {"message": NUL}},
    ],
    ids=["kind", "queue", "concurrency_key", "payload"],
)
async def test_submit_with_nul_is_422(api: Api, body: dict) -> None:
    before = stored(api)
    response = await api.http.post("/jobs", json=body)
    clean(assert_error(response, 422))
    assert stored(api) == before


async def test_idempotency_key_with_nul_is_refused(api: Api) -> None:
    # HTTP cannot carry a NUL in a header (h11 refuses it before chit sees it);
    # the ASGI app still refuses one if a server hands it over.
    response = await api.http.post(
        "/jobs",
        json={"kind": "echo", "payload": {"message": "hi"}},
        headers=[(b"idempotency-key", b"a\x00b")],
    )
    clean(assert_error(response, 422))
    assert stored(api) == []


@pytest.mark.parametrize("field", ["kind", "queue"])
async def test_list_filter_with_nul_is_422(api: Api, field: str) -> None:
    response = await api.http.get("/jobs", params={field: NUL})
    body = assert_error(response, 422, "invalid_request")
    clean(body)
    assert field in body["message"] and "NUL" in body["message"]
    assert "retry-after" not in response.headers


@pytest.mark.parametrize(
    "body",
    [{"kind": NUL}, {"error_prefix": NUL}, {"kind": "echo", "error_prefix": "x\x00"}],
    ids=["kind", "error_prefix", "both"],
)
async def test_replay_filter_with_nul_is_422(api: Api, body: dict) -> None:
    response = await api.http.post("/jobs/replay", json=body)
    clean(assert_error(response, 422, "invalid_request"))


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("PUT", "/limits/a%00b"),
        ("DELETE", "/limits/a%00b"),
        ("POST", "/queues/a%00b/pause"),
        ("POST", "/queues/a%00b/resume"),
        ("POST", "/kinds/a%00b/pause"),
        ("POST", "/kinds/a%00b/resume"),
    ],
)
async def test_flow_names_with_nul_are_422(api: Api, method: str, path: str) -> None:
    response = await api.http.request(method, path, json={"concurrency": 1})
    clean(assert_error(response, 422, "invalid_request"))


async def test_job_id_with_nul_is_404(api: Api) -> None:
    clean(assert_error(await api.http.get("/jobs/a%00b"), 404))


async def test_enqueue_from_code_with_a_nul_queue_is_refused(api: Api) -> None:
    with pytest.raises(InvalidRequest, match="NUL"):
        api.queue.enqueue("echo", {"message": "hi"}, queue=NUL)
    assert stored(api) == []


async def test_the_store_message_names_no_user_database_or_sql(api: Api) -> None:
    url = api.queue.settings.database_url
    if not url.startswith("postgresql"):
        pytest.skip("SQLite stores a NUL the store is handed")
    with pytest.raises(StoreError) as caught:
        api.store.list(JobFilter(kind=NUL))
    message = str(caught.value)
    assert not caught.value.transient  # bad data: no retry helps
    database = url.rsplit("/", 1)[1]
    for secret in ("postgres@", database, "SELECT", "LINE", "CONTEXT", "\n"):
        assert secret not in message, message
    assert "127.0.0.1" in message  # the server, for the operator reading the log


async def test_unavailable_answer_names_no_database(api: Api, tmp_path) -> None:
    break_the_sqlite_file(api, tmp_path)
    response = await api.http.get("/jobs")
    body = assert_error(response, 503, "store_unavailable")
    assert str(tmp_path) not in body["message"] and "chit.db" not in body["message"]
    assert body["message"] == "the job database is unavailable right now; try again shortly"
