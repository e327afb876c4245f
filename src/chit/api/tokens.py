"""Event-stream tokens: how a browser streams a job without its API key in a URL.

`EventSource` cannot send `Authorization`, and a key in a query string ends up
in access logs and browser history. So the API hands a caller who may read a
job a token for that job's event stream alone: the job id, the job's tenant and
an expiry, signed with HMAC-SHA256. The signing key is made once and kept in
the database (`chit_secrets`), so every API process, and the next restart,
accepts the tokens any of them made. A token grants `read` of one job's events
until it expires; revoking the key that asked for it does not end it, which is
why it lives minutes (CHIT_EVENTS_TOKEN_SECONDS).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass

from chit.api.errors import ApiProblem
from chit.store import FullStore

SECRET_NAME = "events_token"
_VERSION = "v1"


@dataclass(frozen=True, slots=True)
class EventsToken:
    job_id: str
    tenant: str
    expires_at: int  # seconds since 1970


class EventTokens:
    """Signs and checks tokens. Blocking the first time (it reads, or makes,
    the secret): call it from a worker thread."""

    def __init__(self, store: FullStore, lifetime_seconds: float) -> None:
        self.store = store
        self.lifetime_seconds = lifetime_seconds
        self._lock = threading.Lock()
        self._key: bytes | None = None

    def _secret(self) -> bytes:
        with self._lock:
            if self._key is None:
                stored = self.store.server_secret(SECRET_NAME, secrets.token_hex(32))
                self._key = bytes.fromhex(stored)
            return self._key

    def issue(self, job_id: str, tenant: str, now: float | None = None) -> tuple[str, int]:
        """A token for `job_id`'s events and when it expires (seconds since 1970)."""
        expires_at = int((time.time() if now is None else now) + self.lifetime_seconds)
        payload = _b64(f"{_VERSION}\n{job_id}\n{tenant}\n{expires_at}".encode())
        return f"{payload}.{self._sign(payload)}", expires_at

    def check(self, token: str, job_id: str, now: float | None = None) -> EventsToken:
        """The token's claims if it is this server's, unexpired and for `job_id`;
        401 (not ours, altered, expired) or 403 (another job's) otherwise."""
        payload, _, signature = token.partition(".")
        if not hmac.compare_digest(signature.encode(), self._sign(payload).encode()):
            raise _refused("this events token is not one this server signed (altered or mistyped)")
        try:
            version, token_job, tenant, expires_text = _unb64(payload).decode().split("\n")
            expires_at = int(expires_text)
        except ValueError:  # signed by us, so only an older format could fail here
            raise _refused("this events token is in a format this server no longer reads") from None
        if version != _VERSION:
            raise _refused("this events token is in a format this server no longer reads")
        if (time.time() if now is None else now) >= expires_at:
            raise _refused(
                "this events token has expired: ask POST /jobs/{job_id}/events-token "
                "with your API key for a fresh one"
            )
        if token_job != job_id:
            raise ApiProblem(
                403,
                "forbidden",
                f"this events token is for job {token_job}, not {job_id[:100]}",
            )
        return EventsToken(job_id=token_job, tenant=tenant, expires_at=expires_at)

    def _sign(self, payload: str) -> str:
        return _b64(hmac.new(self._secret(), payload.encode(), hashlib.sha256).digest())


def _refused(message: str) -> ApiProblem:
    return ApiProblem(401, "unauthorized", message)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as error:
        raise ValueError(str(error)) from error
