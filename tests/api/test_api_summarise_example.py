"""examples/summarise.py, the long-AI-task example, as a person uses it: a
real `uvicorn examples.summarise:app` and a real `chit worker` on one SQLite
file, the page in headless Chromium. The draft streams into the page word by
word, the job waits for approval holding no slot (the worker, one slot, runs
other work meanwhile), the page's button approves it, and the fan-out to
`key_points` jobs is merged into the result the page shows."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.browser import chromium_browser
from support.processes import Procs, child_env, free_port, wait_ready
from support.waiting import wait_until

pytest.importorskip("playwright.sync_api")

pytestmark = pytest.mark.slow

ROOT = Path(__file__).parents[2]
KEY = "demo-key-0123456789"
TEXT = (
    "Queues hold work. A worker takes it under a lease.\n\n"
    "Leases end. Another worker takes the job again.\n\n"
    "People approve drafts. The job waits without a slot."
)
DRAFT = "Queues hold work. Leases end. People approve drafts."


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Procs]]:
    tmp = tmp_path_factory.mktemp("summarise")
    env = child_env(
        CHIT_DATABASE_URL=f"sqlite:///{tmp / 'chit.db'}",
        CHIT_API_KEYS=f"demo:admin:{KEY}",
        CHIT_POLL_INTERVAL="0.2",
        PYTHONUNBUFFERED="1",
    )
    env["PYTHONPATH"] = f"{ROOT}:{env['PYTHONPATH']}"
    procs = Procs(tmp, env)
    port = free_port()
    server = procs.start(
        ["-m", "uvicorn", "examples.summarise:app", "--port", str(port), "--log-level", "warning"],
        "server",
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(server, lambda: httpx.get(f"{url}/chit/readyz"), 60, what="the example app")
        worker = procs.worker("--concurrency", "1", app="examples.summarise:queue", name="worker")
        worker.wait_started(60)
        yield url, procs
    finally:
        procs.cleanup()


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    yield from chromium_browser()


def test_the_page_streams_the_draft_takes_the_approval_and_shows_the_merged_result(
    app: tuple[str, Procs], chromium: Any
) -> None:
    url, _ = app
    page = chromium.new_page()
    page.set_default_timeout(30_000)
    problems: list[str] = []
    # Script errors and refusals of the page's policy; not the browser's favicon.ico 404.
    page.on(
        "console",
        lambda m: (
            problems.append(m.text)
            if m.type == "error" and not m.text.startswith("Failed to load resource")
            else None
        ),
    )
    page.goto(url + "/")
    # What the page shows each time its output changes, and the state beside it.
    page.evaluate(
        """() => {
        window.seen = [];
        new MutationObserver(() => window.seen.push(
            [document.getElementById("output").textContent,
             document.getElementById("state").textContent])
        ).observe(document.getElementById("output"), {childList: true, characterData: true,
                                                       subtree: true});
    }"""
    )
    page.fill("#key", KEY)
    page.fill("#text", TEXT)
    page.click("#submit button")
    page.wait_for_selector("#approve:not([hidden])")

    # Streamed: a word at a time, while the job ran, before it waited.
    seen = page.evaluate("window.seen")
    assert [text for text, _ in seen] == [
        " ".join(DRAFT.split()[:n]) + " " for n in range(1, len(DRAFT.split()) + 1)
    ]
    assert seen[0][1] == "running"
    assert page.inner_text("#output").strip() == DRAFT
    assert page.inner_text("#state") == "waiting"

    # Waiting holds no slot: the one-slot worker runs another job meanwhile.
    auth = {"Authorization": f"Bearer {KEY}"}
    other = httpx.post(
        f"{url}/chit/jobs",
        json={"kind": "key_points", "payload": {"index": 9, "text": "One. Two."}},
        headers=auth,
    ).json()["job_id"]
    wait_until(
        lambda: httpx.get(f"{url}/chit/jobs/{other}", headers=auth).json()["state"] == "succeeded",
        30,
        what="another job to run while the summary waits",
    )

    page.fill("#by", "ana")
    page.click("#approve button")
    page.wait_for_selector("#result:not([hidden])")
    assert page.inner_text("#state") == "succeeded", page.inner_text("#result")
    result = page.inner_text("#result")
    assert '"approved_by": "ana"' in result
    assert '"summary": "Queues hold work. Leases end. People approve drafts."' in result
    assert result.count('"sentences": 2') == 3  # one key_points job a paragraph, merged
    assert not problems, problems  # nothing the page's policy or script refused
    page.close()


def test_a_bad_key_or_text_shows_the_apis_error_and_submits_nothing(
    app: tuple[str, Procs], chromium: Any
) -> None:
    url, _ = app
    before = httpx.get(f"{url}/chit/stats", headers={"Authorization": f"Bearer {KEY}"}).json()
    page = chromium.new_page()
    page.goto(url + "/")
    page.fill("#key", "not-a-key")
    page.fill("#text", TEXT)
    page.click("#submit button")
    page.wait_for_selector("#error:not([hidden])")
    assert page.inner_text("#state") == "not started"
    page.close()
    after = httpx.get(f"{url}/chit/stats", headers={"Authorization": f"Bearer {KEY}"}).json()
    assert after["by_state"] == before["by_state"]
