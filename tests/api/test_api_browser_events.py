"""A page on another origin, in a real headless Chromium (Debian's `chromium`,
driven by Playwright), against a real `chit serve` with two real `chit worker`
processes: with CHIT_CORS_ORIGINS naming the page's origin, it submits a job
with fetch (its key in Authorization) and follows it with EventSource, which
cannot send a header, by the submit answer's events_url: the events token, no
key in any URL. Without the token, EventSource gets nothing."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from support.browser import chromium_browser
from support.stack import Server, server_with_workers

pytest.importorskip("playwright.sync_api")

pytestmark = pytest.mark.slow

PAGE_KEY = "acme-page-key-0123456789"  # submit+read for tenant acme, nothing more
ADMIN_KEY = "admin-key-0123456789"
PAGE = b"<!doctype html><title>another origin</title><p>a page that uses chit's API</p>"

# What the page runs: submit, then follow by the events_url alone.
FOLLOW = """async ([api, key]) => {
  const answer = await fetch(api + "/jobs", {
    method: "POST",
    headers: {"Authorization": "Bearer " + key, "Content-Type": "application/json"},
    body: JSON.stringify({kind: "echo", payload: {message: "from a page", seconds: 0.6, steps: 3}}),
  });
  const submitted = await answer.json();
  const seen = await new Promise((resolve, reject) => {
    const events = [];
    const source = new EventSource(api + submitted.events_url);
    const take = (e) => {
      const status = JSON.parse(e.data);
      events.push([e.type, status.state, status.progress ? status.progress.done : null]);
      if (["succeeded", "failed", "cancelled"].includes(status.state)) {
        source.close();
        resolve(events);
      }
    };
    source.addEventListener("state", take);
    source.addEventListener("progress", take);
    source.onerror = () => { source.close(); reject(new Error("EventSource failed")); };
    setTimeout(() => { source.close(); reject(new Error("no terminal event in 20 s")); }, 20000);
  });
  return {status: answer.status, submitted, seen, location: answer.headers.get("Location")};
}"""

# EventSource on the bare route: no header can be sent, so it is refused.
WITHOUT_TOKEN = """async ([api, path]) => await new Promise((resolve) => {
  const source = new EventSource(api + path);
  source.onmessage = () => resolve("message");
  source.onerror = () => { const state = source.readyState; source.close(); resolve(state); };
})"""


@pytest.fixture(scope="module")
def page_origin() -> Iterator[str]:
    """A page on an origin of its own (another port is another origin)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(PAGE)))
            self.end_headers()
            self.wfile.write(PAGE)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, page_origin: str) -> Iterator[Server]:
    with server_with_workers(
        tmp_path_factory.mktemp("browser-events"),
        "support.api_app",
        key=ADMIN_KEY,
        keys=f"{ADMIN_KEY},acme:submit+read:{PAGE_KEY}",
        worker_flags=("--concurrency", "2"),
        CHIT_CORS_ORIGINS=page_origin,
    ) as server:
        yield server


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    yield from chromium_browser()


@pytest.fixture
def page(chromium: Any, page_origin: str) -> Iterator[Any]:
    context = chromium.new_context()
    context.set_default_timeout(30_000)
    page = context.new_page()
    urls: list[str] = []
    page.on("request", lambda request: urls.append(request.url))
    page.goto(page_origin + "/")
    page.urls = urls
    yield page
    context.close()


def test_a_page_on_another_origin_submits_and_streams_with_the_events_token(
    page: Any, stack: Server
) -> None:
    found = page.evaluate(FOLLOW, [stack.url, PAGE_KEY])

    assert found["status"] == 202
    job_id = found["submitted"]["job_id"]
    assert found["location"] == f"/jobs/{job_id}"  # exposed to the page by CORS
    assert found["submitted"]["events_url"].startswith(f"/jobs/{job_id}/events?token=")
    seen = found["seen"]
    assert seen[0][0] == "state" and seen[-1][:2] == ["state", "succeeded"], seen
    # The key went in a header only, never in a URL the browser opened.
    assert not [url for url in page.urls if PAGE_KEY in url]
    assert any("token=" in url for url in page.urls)
    assert seen[-1][2] == 3  # the status of the end, its progress included


def test_without_a_token_the_page_cannot_stream(page: Any, stack: Server) -> None:
    job_id = stack.http.post("/jobs", json={"kind": "echo", "payload": {"message": "x"}}).json()[
        "job_id"
    ]
    # EventSource gives up (readyState 2, CLOSED) on a 401: it never reconnects.
    assert page.evaluate(WITHOUT_TOKEN, [stack.url, f"/jobs/{job_id}/events"]) == 2
    assert page.evaluate(WITHOUT_TOKEN, [stack.url, f"/jobs/{job_id}/events?token=forged"]) == 2
