"""`/docs` is the reference rendered on the server, with nothing loaded from
another host (no CDN, no script); `/favicon.ico` answers."""

from __future__ import annotations

import re
from html import escape as html_escape
from pathlib import Path

import pytest

from chit.store import queries
from support.api import Api

pytestmark = pytest.mark.anyio


async def test_docs_need_nothing_from_another_host(api: Api) -> None:
    page = await api.http.get("/docs")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert page.headers["content-security-policy"].startswith("default-src 'none'")
    html = page.text
    assert "<script" not in html
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html), "a link off the server"
    assert "@import" not in html and "url(" not in html
    schema = (await api.http.get("/openapi.json")).json()
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            assert f"{method.upper()}</span> <code>{path}</code>" in html
            assert html_escape(operation.get("summary", "")) in html
    assert "href='#schema-JobStatus'" in html and "id='schema-JobStatus'" in html
    assert (await api.http.get("/redoc")).status_code == 404  # it loads from a CDN too


async def test_the_favicon_answers(api: Api) -> None:
    icon = await api.http.get("/favicon.ico")
    assert icon.status_code == 200
    assert icon.headers["content-type"] == "image/x-icon"
    assert icon.content[:4] == b"\0\0\1\0"  # an ICO file
    assert (await api.http.get("/ui/static/favicon.ico")).content == icon.content


HTTP_API_DOC = Path(__file__).parents[2] / "docs" / "http-api.md"
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


async def test_the_http_api_doc_says_what_readyz_and_times_are(api: Api) -> None:
    """docs/http-api.md against the server: the schema version is the backend's
    newest migration, or Redis's library version (not a number the doc can
    state), times have six decimals."""
    doc = HTTP_API_DOC.read_text()
    url = api.queue.settings.database_url
    if url.startswith("redis"):  # the version of its function library
        from chit.store.redis.connection import VERSION

        newest = VERSION
    else:
        newest = len(queries.migrations("sqlite" if url.startswith("sqlite") else "postgres"))
    ready = (await api.http.get("/readyz")).json()
    assert ready == {"status": "ready", "schema_version": newest}
    assert not re.search(r'"schema_version": \d', doc)

    job_id = api.queue.enqueue("echo", {"message": "hi"}).id
    job = (await api.http.get(f"/jobs/{job_id}")).json()
    for field in ("run_at", "created_at", "updated_at"):
        assert TIME.fullmatch(job[field]), job[field]
    examples = re.findall(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z", doc)
    assert examples and all(TIME.fullmatch(t) for t in examples), examples
