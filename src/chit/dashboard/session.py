"""Who is looking at the dashboard, and forms that only the dashboard can send.

Sessions live on the server (the `chit_sessions` table, `chit.store.Sessions`).
The browser's `chit_session` cookie holds only a random session id (256 bits);
the table holds its sha256 and the sha256 of the API key signed in with, so
neither the cookie nor the table gives away a key. A session ends after
CHIT_SESSION_IDLE_SECONDS without a request, CHIT_SESSION_MAX_SECONDS after
sign-in, at sign-out (the row is deleted: the old cookie is worth nothing) and
when its key is revoked (its rows are deleted; each request also authenticates
the key as the API does, so a key removed from CHIT_API_KEYS ends its sessions
too). A forged or guessed cookie names no row.

The cookie is HttpOnly (no script can read it), SameSite=Strict (no other
site's page or link makes the browser send it), limited to the dashboard's path
(API routes never see it, so it grants no ambient authority there) and Secure
over HTTPS.

Every form carries a CSRF token, an HMAC of the session cookie: tied to the
session, unknowable to another site, checked on every POST together with the
`Origin` and `Sec-Fetch-Site` headers when the browser sends them. The login
form, which has no session yet, is tied the same way to a short-lived
`chit_login` cookie.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import Response

from chit.api.auth import Principal

SESSION_COOKIE = "chit_session"
LOGIN_COOKIE = "chit_login"
LOGIN_SECONDS = 3600


@dataclass(frozen=True, slots=True)
class Session:
    """A signed-in browser: who it is, and the token its forms must carry."""

    principal: Principal
    csrf_token: str

    @property
    def can_act(self) -> bool:
        """Retry, cancel and replay need an admin key."""
        return self.principal.allows("admin")

    @property
    def who(self) -> str:
        tenant = (
            "every tenant"
            if self.principal.tenant is None
            else (
                f"tenant {self.principal.tenant!r}"
                if self.principal.tenant
                else "the default tenant"
            )
        )
        role = "admin" if self.can_act else "read-only"
        return f"{role}, {tenant}"


def new_session_id() -> str:
    """A session's id, the cookie's whole value; also the login form's nonce."""
    return secrets.token_urlsafe(32)


def session_hash(cookie: str) -> str:
    """What the sessions table knows a cookie by."""
    return hashlib.sha256(cookie.encode("utf-8", "surrogateescape")).hexdigest()


def token_for(cookie: str, purpose: str) -> str:
    return hmac.new(cookie.encode(), purpose.encode(), hashlib.sha256).hexdigest()


def csrf_token(cookie: str) -> str:
    return token_for(cookie, "chit-dashboard-form")


def login_token(cookie: str) -> str:
    return token_for(cookie, "chit-dashboard-login")


def same_origin(request: Request) -> bool:
    """False when the browser says the request comes from another site."""
    if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return origin is None
    # Host against host: a TLS-terminating proxy changes the scheme, not the host.
    return urlsplit(origin).netloc == request.headers.get("host")


def token_matches(expected: str, given: str | None) -> bool:
    return given is not None and hmac.compare_digest(expected.encode(), given.encode())


def set_cookie(response: Response, request: Request, name: str, value: str, age: int) -> None:
    response.set_cookie(
        name,
        value,
        max_age=age,
        path=cookie_path(request),
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def clear_cookie(response: Response, request: Request, name: str) -> None:
    response.delete_cookie(
        name,
        path=cookie_path(request),
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def cookie_path(request: Request) -> str:
    """The dashboard's own path (`/ui`, under any prefix the app is mounted at)."""
    return request.url_for("ui_overview").path.rstrip("/") or "/"
