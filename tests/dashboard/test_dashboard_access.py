"""Who sees what: sign-in, sessions, scopes, tenants, and forms that only the
dashboard can send (in-process, on SQLite and PostgreSQL)."""

from __future__ import annotations

import base64
import secrets
from datetime import UTC, datetime, timedelta

import httpx
import pytest

import chit
from chit.api.auth import create_key, hash_key
from chit.dashboard.session import session_hash
from chit.jobs import NewJob, State
from chit.store.capabilities import NewSession
from support.dashboard import (
    ADMIN_KEY,
    GLOBEX_ADMIN,
    READ_KEY,
    SUBMIT_KEY,
    Browser,
    finished,
    hidden,
    running_dashboard,
)

pytestmark = pytest.mark.anyio


def pages(job_id: str) -> list[str]:
    return [
        "/ui/",
        "/ui/jobs",
        "/ui/jobs?q=order-1",
        f"/ui/jobs/{job_id}",
        f"/ui/jobs/{job_id}/result",
        "/ui/failures",
        "/ui/failures/replay?kind=work&error=KeyError%3A+x",
    ]


async def test_without_a_session_every_page_sends_to_sign_in_and_shows_no_data(
    dashboard: Browser,
) -> None:
    job_id = finished(dashboard.queue, error="KeyError: x\ntrace", key="order-1")
    for path in pages(job_id):
        response = await dashboard.http.get(path)
        assert response.status_code == 303, path
        assert response.headers["location"].startswith("/ui/login?next=")
        assert job_id not in response.text and "KeyError" not in response.text
    events = await dashboard.http.get(f"/ui/jobs/{job_id}/events")
    assert events.status_code == 401 and job_id not in events.text
    # A made-up or malformed cookie is no session either.
    dashboard.http.cookies.set("chit_session", "nonce.bm90LWEta2V5LTAxMjM0NTY3", path="/ui")
    assert (await dashboard.http.get("/ui/")).status_code == 303
    dashboard.http.cookies.set("chit_session", "garbage", path="/ui")
    assert (await dashboard.http.get("/ui/")).status_code == 303


async def test_sign_in_refuses_a_wrong_key_and_a_key_without_read_scope(
    dashboard: Browser,
) -> None:
    wrong = await dashboard.sign_in("wrong-key-0123456789")
    assert wrong.status_code == 401 and "not recognised" in wrong.text
    submit_only = await dashboard.sign_in(SUBMIT_KEY)
    assert submit_only.status_code == 401 and "read or admin key" in submit_only.text
    assert "chit_session" not in dashboard.http.cookies
    assert (await dashboard.http.get("/ui/")).status_code == 303


async def test_the_session_cookie_is_httponly_strict_scoped_and_the_key_never_in_a_url(
    dashboard: Browser,
) -> None:
    response = await dashboard.sign_in(ADMIN_KEY, next="/ui/jobs")
    assert response.status_code == 303 and response.headers["location"] == "/ui/jobs"
    cookie = next(
        c for c in response.headers.get_list("set-cookie") if c.startswith("chit_session=")
    )
    attributes = {a.strip().lower() for a in cookie.split(";")[1:]}
    assert {"httponly", "samesite=strict", "path=/ui"} <= attributes
    assert ADMIN_KEY not in cookie  # encoded, not shown as typed
    page = await dashboard.http.get("/ui/jobs")
    assert page.status_code == 200 and ADMIN_KEY not in page.text
    assert page.headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert page.headers["cache-control"] == "no-store"
    # `next` never leads off the dashboard.
    for target in ("https://evil.example/", "//evil.example/ui", "/jobs", "/ui\\..\\x"):
        again = await dashboard.sign_in(ADMIN_KEY, next=target)
        assert again.headers["location"] == "/ui/", target


async def test_a_read_key_sees_the_pages_but_cannot_act(dashboard: Browser) -> None:
    job_id = finished(dashboard.queue, error="KeyError: x")
    await dashboard.sign_in(READ_KEY)
    page = await dashboard.http.get(f"/ui/jobs/{job_id}")
    assert page.status_code == 200 and "KeyError: x" in page.text
    assert "Retry</button>" not in page.text
    failures = await dashboard.http.get("/ui/failures")
    assert "KeyError: x" in failures.text and "Replay these" not in failures.text
    token = hidden(page.text, "csrf_token")  # the sign-out form's
    refused = await dashboard.http.post(f"/ui/jobs/{job_id}/retry", data={"csrf_token": token})
    assert refused.status_code == 403 and "read-only" in refused.text
    assert dashboard.queue.store.get(job_id).state is State.FAILED  # type: ignore[union-attr]


async def test_another_tenants_key_sees_none_of_these_jobs_anywhere(dashboard: Browser) -> None:
    store = dashboard.queue.store
    failed = finished(dashboard.queue, error="KeyError: secret-thing", key="order-1")
    done = finished(dashboard.queue, kind="report", result={"rows": 1})
    running = store.enqueue(NewJob("work", {"message": "x"}, queue="solo")).id
    store.claim("w", ["solo"], 1, 30)
    mine = finished(dashboard.queue, kind="globex_only", error="Boom", tenant="globex")
    await dashboard.sign_in(GLOBEX_ADMIN)

    overview = (await dashboard.http.get("/ui/")).text
    assert "globex_only" in overview
    for secret in ("report", "KeyError", failed, done, running):
        assert secret not in overview
    listing = (await dashboard.http.get("/ui/jobs")).text
    assert mine in listing and failed not in listing and done not in listing
    assert failed not in (await dashboard.http.get("/ui/jobs?q=order-1")).text
    searched = (await dashboard.http.get(f"/ui/jobs?q={failed}")).text
    assert f"/ui/jobs/{failed}" not in searched and "No job has that id" in searched
    failures = (await dashboard.http.get("/ui/failures")).text
    assert "Boom" in failures and "secret-thing" not in failures
    confirm = await dashboard.http.get(
        "/ui/failures/replay", params={"kind": "work", "error": "KeyError: secret-thing"}
    )
    assert "no failed job" in confirm.text.lower()
    for path in (f"/ui/jobs/{failed}", f"/ui/jobs/{done}/result", f"/ui/jobs/{failed}/events"):
        response = await dashboard.http.get(path)
        assert response.status_code == 404, path
        assert "secret-thing" not in response.text
    token = await dashboard.csrf()
    retry = await dashboard.http.post(f"/ui/jobs/{failed}/retry", data={"csrf_token": token})
    assert retry.status_code == 404
    replay = await dashboard.http.post(
        "/ui/failures/replay",
        data={"csrf_token": token, "kind": "work", "error": "KeyError: secret-thing"},
    )
    assert replay.status_code == 303 and "replayed=0" in replay.headers["location"]
    cancel = await dashboard.http.post(f"/ui/jobs/{running}/cancel", data={"csrf_token": token})
    assert cancel.status_code == 404
    assert store.get(failed).state is State.FAILED  # type: ignore[union-attr]
    assert not store.get(running).cancel_requested  # type: ignore[union-attr]


async def test_posts_without_the_sessions_csrf_token_or_from_another_site_are_refused(
    dashboard: Browser, keyed_queue: chit.Queue
) -> None:
    job_id = finished(dashboard.queue, error="KeyError: x")
    retry = f"/ui/jobs/{job_id}/retry"
    await dashboard.sign_in(ADMIN_KEY)
    token = await dashboard.csrf()

    # Another browser's session has another token.
    async for other in running_dashboard(keyed_queue):
        await other.sign_in(ADMIN_KEY)
        other_token = await other.csrf()
    assert other_token != token

    attempts: list[tuple[dict[str, str], dict[str, str]]] = [
        ({"other": "1"}, {}),
        ({"csrf_token": ""}, {}),
        ({"csrf_token": "0" * 64}, {}),
        ({"csrf_token": other_token}, {}),
        ({"csrf_token": token}, {"origin": "https://evil.example"}),
        ({"csrf_token": token}, {"origin": "null"}),
        ({"csrf_token": token}, {"sec-fetch-site": "cross-site"}),
    ]
    for form, headers in attempts:
        response = await dashboard.http.post(retry, data=form, headers=headers)
        assert response.status_code == 403, (form, headers)
        assert "security token" in response.text
    json_post = await dashboard.http.post(retry, json={"csrf_token": token})
    assert json_post.status_code == 415
    assert dashboard.queue.store.get(job_id).state is State.FAILED  # type: ignore[union-attr]

    # The page's own form, from this site: accepted.
    ok = await dashboard.http.post(
        retry, data={"csrf_token": token}, headers={"origin": "http://test"}
    )
    assert ok.status_code == 303 and ok.headers["location"].endswith("notice=retried")
    assert dashboard.queue.store.get(job_id).state is State.QUEUED  # type: ignore[union-attr]


async def test_the_sign_in_form_needs_its_own_token(dashboard: Browser) -> None:
    forged = await dashboard.http.post("/ui/login", data={"key": ADMIN_KEY, "login_token": "x"})
    assert forged.status_code == 403
    assert "chit_session" not in dashboard.http.cookies


async def test_signing_out_and_revoking_the_key_end_the_session(dashboard: Browser) -> None:
    stored, key = create_key(dashboard.queue.store, scopes=["read"])
    assert (await dashboard.sign_in(key)).status_code == 303
    assert (await dashboard.http.get("/ui/")).status_code == 200
    dashboard.queue.store.revoke_api_key(stored.id)
    gone = await dashboard.http.get("/ui/jobs")
    assert gone.status_code == 303 and "reason=expired" in gone.headers["location"]

    await dashboard.sign_in(ADMIN_KEY)
    token = await dashboard.csrf()
    out = await dashboard.http.post("/ui/logout", data={"csrf_token": token})
    assert out.status_code == 303 and "signed_out" in out.headers["location"]
    assert (await dashboard.http.get("/ui/")).status_code == 303


def session_cookie(browser: Browser) -> str:
    cookie = browser.http.cookies.get("chit_session")
    assert cookie is not None, "not signed in"
    return cookie


def with_cookie(browser: Browser, value: str) -> None:
    browser.http.cookies.clear()
    browser.http.cookies.set("chit_session", value, path="/ui")


async def ended(browser: Browser) -> bool:
    page = await browser.http.get("/ui/jobs")
    return page.status_code == 303 and "reason=expired" in page.headers["location"]


async def test_after_sign_out_the_old_cookie_is_worth_nothing(dashboard: Browser) -> None:
    await dashboard.sign_in(ADMIN_KEY)
    cookie = session_cookie(dashboard)
    out = await dashboard.http.post("/ui/logout", data={"csrf_token": await dashboard.csrf()})
    assert out.status_code == 303
    with_cookie(dashboard, cookie)  # as a copy of the cookie taken before would
    assert await ended(dashboard)


async def test_the_cookie_holds_a_random_id_not_the_key_and_a_forged_one_signs_in_no_one(
    dashboard: Browser,
) -> None:
    await dashboard.sign_in(ADMIN_KEY)
    cookie = session_cookie(dashboard)
    assert ADMIN_KEY not in cookie
    assert base64.urlsafe_b64encode(ADMIN_KEY.encode()).decode().rstrip("=")[:20] not in cookie
    # The table knows it by its hash, and the key by its hash.
    stored = dashboard.queue.store.touch_session(session_hash(cookie), 3600)
    assert stored is not None and stored.key_hash == hash_key(ADMIN_KEY)
    assert dashboard.queue.store.touch_session(cookie, 3600) is None
    encoded = base64.urlsafe_b64encode(ADMIN_KEY.encode()).decode().rstrip("=")
    for forged in (
        f"{secrets.token_urlsafe(16)}.{encoded}",  # what the cookie used to be
        secrets.token_urlsafe(32),
        cookie[:-1] + ("A" if cookie[-1] != "A" else "B"),
        session_hash(cookie),
        "",
    ):
        with_cookie(dashboard, forged)
        page = await dashboard.http.get("/ui/jobs")
        assert page.status_code == 303, forged
        assert "/ui/login" in page.headers["location"]


@pytest.mark.parametrize(
    "age, idle, most, live",
    [
        (timedelta(seconds=30), 60, 3600, True),
        (timedelta(seconds=90), 60, 3600, False),  # idle too long
        (timedelta(hours=2), 36_000, 3600, False),  # past the absolute expiry
    ],
    ids=["live", "idle", "absolute"],
)
async def test_a_session_past_its_idle_or_absolute_expiry_is_refused(
    dashboard: Browser, age: timedelta, idle: float, most: float, live: bool
) -> None:
    cookie = secrets.token_urlsafe(32)
    signed_in = NewSession(session_hash(cookie), hash_key(ADMIN_KEY), idle, most)
    dashboard.queue.store.create_session(signed_in, now=datetime.now(UTC) - age)
    with_cookie(dashboard, cookie)
    page = await dashboard.http.get("/ui/jobs")
    assert (page.status_code == 200) is live, page.headers.get("location")


async def test_a_request_keeps_a_session_alive_but_never_past_its_absolute_expiry(
    dashboard: Browser,
) -> None:
    store = dashboard.queue.store
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=50)
    cookie = secrets.token_urlsafe(32)
    store.create_session(NewSession(session_hash(cookie), hash_key(ADMIN_KEY), 60, 100), now=start)
    with_cookie(dashboard, cookie)
    assert (await dashboard.http.get("/ui/jobs")).status_code == 200  # idle until now + 60 s
    later = store.touch_session(session_hash(cookie), 60, now=start + timedelta(seconds=99))
    assert later is not None and later.idle_expires_at == later.expires_at == start + timedelta(
        seconds=100
    )
    assert store.touch_session(session_hash(cookie), 60, now=start + timedelta(seconds=100)) is None


async def test_requests_keep_a_session_alive_beyond_its_first_idle_window(
    dashboard: Browser,
) -> None:
    store = dashboard.queue.store
    start = datetime.now(UTC).replace(microsecond=0)
    hashed = session_hash(secrets.token_urlsafe(32))
    store.create_session(NewSession(hashed, hash_key(ADMIN_KEY), 60, 3600), now=start)
    for seconds in (50, 100, 150, 200):  # a request every 50 s, each within 60 s of the last
        assert store.touch_session(hashed, 60, now=start + timedelta(seconds=seconds)), seconds
    assert store.touch_session(hashed, 60, now=start + timedelta(seconds=300)) is None


async def test_revoking_a_key_deletes_its_sessions(dashboard: Browser) -> None:
    stored, key = create_key(dashboard.queue.store, scopes=["read"])
    await dashboard.sign_in(key)
    cookie = session_cookie(dashboard)
    dashboard.queue.store.revoke_api_key(stored.id)
    assert dashboard.queue.store.touch_session(session_hash(cookie), 3600) is None
    assert await ended(dashboard)


async def test_with_no_key_configured_the_dashboard_is_open_like_the_api(
    open_queue: chit.Queue,
) -> None:
    async for browser in running_dashboard(open_queue):
        page = await browser.http.get("/ui/login")
        assert "No API key is configured" in page.text
        assert (await browser.sign_in("")).status_code == 303
        assert (await browser.http.get("/ui/")).status_code == 200
    # Listening beyond loopback with no key: nobody gets in.
    async for browser in running_dashboard(open_queue, allow_open=False):
        assert "No API key is configured" not in (await browser.http.get("/ui/login")).text
        assert (await browser.sign_in("")).status_code == 401


async def test_static_files_are_served_and_nothing_else(dashboard: Browser) -> None:
    css = await dashboard.http.get("/ui/static/dashboard.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    js = await dashboard.http.get("/ui/static/dashboard.js")
    assert js.status_code == 200 and "EventSource" in js.text
    for name in ("nope.css", "..%2Froutes.py", "__init__.py"):
        assert (await dashboard.http.get(f"/ui/static/{name}")).status_code == 404


def test_the_api_schema_leaves_the_dashboard_out(keyed_queue: chit.Queue) -> None:
    from chit.api import create_app

    paths = create_app(keyed_queue).openapi()["paths"]
    assert not [p for p in paths if p.startswith("/ui")]
    assert httpx  # the module is used above
