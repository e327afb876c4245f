"""API keys: who is calling, for which tenant, allowed to do what.

Keys are sent as `Authorization: Bearer KEY` and come from two places:

- `CHIT_API_KEYS`, comma-separated entries, each either
  `KEY` (every scope, tenant "") or `TENANT:SCOPES:KEY`, where SCOPES joins
  `submit`, `read` and `admin` with `+` and TENANT `*` means every tenant,
  e.g. `acme:submit+read:3f9c...` or `*:admin:9e1b...`;
- the keys table, managed by `chit keys create|list|revoke`, which stores only
  a SHA-256 of each key (keys are 192 random bits: a fast hash is enough).

Scopes: `submit` (POST /jobs), `read` (job status, list, events, results),
`admin` (retry, cancel, replay, failures, stats, metrics; implies the other two).
A key sees only its tenant's jobs; another tenant's job answers 404. Limits and
pauses (GET/PUT/DELETE /limits, pause and resume) hold for every tenant, so they
need an admin key of every tenant (`*`, or the open mode).

With no key configured anywhere, ever, the API is open (every scope, every
tenant): `chit serve` allows that on a loopback address only. A store that has
had a key stays closed when its last key is revoked: revoking a key never
opens the API.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from chit.api.problem import ApiProblem
from chit.errors import ConfigError
from chit.jobs import ApiKey, NewApiKey
from chit.store import FullStore

SCOPES = ("submit", "read", "admin")
ALL_TENANTS = "*"
KEY_PREFIX = "chit_"
MIN_KEY_LENGTH = 16
_TENANT = re.compile(r"\*|[A-Za-z0-9_.\-]{0,64}")
_KEY_CHARS = re.compile(r"[\x21-\x7e]+")  # printable ASCII, no spaces
# How long a looked-up key is trusted before the table is asked again: revoking
# a key takes effect within this many seconds.
KEY_CACHE_SECONDS = 5.0
_CACHE_MAX = 10_000


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling. `tenant=None` sees every tenant and submits as tenant ""."""

    key_id: str
    tenant: str | None
    scopes: frozenset[str]

    @property
    def submit_tenant(self) -> str:
        return self.tenant or ""

    def allows(self, scope: str) -> bool:
        return scope in self.scopes


OPEN = Principal(key_id="open", tenant=None, scopes=frozenset(SCOPES))


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()


def effective_scopes(scopes: Iterable[str]) -> frozenset[str]:
    given = frozenset(scopes)
    return frozenset(SCOPES) if "admin" in given else given


def check_scopes(scopes: Iterable[str], where: str) -> tuple[str, ...]:
    given = tuple(dict.fromkeys(s.strip() for s in scopes if s.strip()))
    unknown = [s for s in given if s not in SCOPES]
    if unknown or not given:
        raise ConfigError(
            f"{where}: scopes {'+'.join(given) or '(none)'!r} are not valid; "
            f"use one or more of {', '.join(SCOPES)} joined by +"
        )
    return given


def check_tenant(tenant: str, where: str) -> str:
    if not _TENANT.fullmatch(tenant):
        raise ConfigError(
            f"{where}: tenant {tenant!r} is not valid; use up to 64 letters, digits, "
            "'_', '.' or '-', or '*' for every tenant"
        )
    return tenant


def parse_env_keys(entries: Iterable[str]) -> dict[str, Principal]:
    """CHIT_API_KEYS entries -> {sha256 of key: principal}. Errors name the entry
    by position and never echo a key."""
    keys: dict[str, Principal] = {}
    for number, entry in enumerate(entries, start=1):
        where = f"CHIT_API_KEYS entry {number}"
        if entry.count(":") >= 2:
            tenant, scopes_text, key = entry.split(":", 2)
            scopes = check_scopes(scopes_text.split("+"), where)
            check_tenant(tenant, where)
        elif ":" in entry:
            raise ConfigError(
                f"{where}: expected KEY or TENANT:SCOPES:KEY (e.g. acme:submit+read:KEY)"
            )
        else:
            tenant, scopes, key = "", SCOPES, entry
        if len(key) < MIN_KEY_LENGTH or not _KEY_CHARS.fullmatch(key):
            raise ConfigError(
                f"{where}: the key must be at least {MIN_KEY_LENGTH} printable ASCII "
                "characters without spaces (`chit keys create` makes a good one)"
            )
        keys[hash_key(key)] = Principal(
            key_id=f"env:{number}",
            tenant=None if tenant == ALL_TENANTS else tenant,
            scopes=effective_scopes(scopes),
        )
    return keys


def create_key(
    store: FullStore,
    *,
    tenant: str = "",
    scopes: Iterable[str] = ("submit", "read"),
    name: str = "",
) -> tuple[ApiKey, str]:
    """Store a new random key; returns it with the key text, which is shown once."""
    scopes = check_scopes(scopes, "chit keys create")
    check_tenant(tenant, "chit keys create")
    key_id = secrets.token_hex(6)
    key = f"{KEY_PREFIX}{key_id}_{secrets.token_urlsafe(24)}"
    stored = store.create_api_key(
        NewApiKey(id=key_id, key_hash=hash_key(key), tenant=tenant, scopes=scopes, name=name)
    )
    return stored, key


def principal_of(key: ApiKey) -> Principal:
    return Principal(
        key_id=key.id,
        tenant=None if key.tenant == ALL_TENANTS else key.tenant,
        scopes=effective_scopes(key.scopes),
    )


class Authenticator:
    """Turns an Authorization header into a Principal. Blocking (it may read the
    keys table): call it from a worker thread."""

    def __init__(
        self,
        store: FullStore,
        env_keys: dict[str, Principal],
        cache_seconds: float = KEY_CACHE_SECONDS,
        *,
        allow_open: bool = True,
    ) -> None:
        self.store = store
        self.allow_open = allow_open
        self.env_keys = env_keys
        self.cache_seconds = cache_seconds
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, Principal | None]] = {}
        self._open_until = 0.0
        self._open = False

    def is_open(self) -> bool:
        """True when no key is configured anywhere and none ever was in the store
        (one revoked is not none): every caller gets every scope."""
        if self.env_keys:
            return False
        now = time.monotonic()
        with self._lock:
            if now < self._open_until:
                return self._open
        is_open = not self.store.list_api_keys(include_revoked=True)
        with self._lock:
            self._open, self._open_until = is_open, now + self.cache_seconds
        return is_open

    def cached(self, authorization: str | None) -> Principal | None:
        """The answer when it needs no database read (open mode known, a
        CHIT_API_KEYS key, a recently seen key); None means call `authenticate`."""
        now = time.monotonic()
        with self._lock:
            if not self.env_keys and now >= self._open_until:
                return None
            if self._open and not self.env_keys:
                return self._open_principal()
        key = _bearer(authorization)
        digest = hash_key(key)
        found = self.env_keys.get(digest)
        if found is not None:
            return found
        with self._lock:
            hit = self._cache.get(digest)
        if hit is None or now >= hit[0] or hit[1] is None:
            return None
        return hit[1]

    def authenticate(self, authorization: str | None) -> Principal:
        if self.is_open():
            return self._open_principal()
        return self.authenticate_digest(hash_key(_bearer(authorization)))

    def authenticate_digest(self, digest: str) -> Principal:
        """`authenticate` for a key known by its hash (a dashboard session's)."""
        if self.is_open():
            return self._open_principal()
        found = self.env_keys.get(digest)
        if found is None:
            found = self._lookup(digest)
        if found is None:
            raise ApiProblem(
                401,
                "unauthorized",
                "API key not recognised: it is mistyped or was revoked",
                headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
            )
        return found

    def _open_principal(self) -> Principal:
        if not self.allow_open:
            raise ApiProblem(
                401,
                "unauthorized",
                "no API key is configured and this server listens beyond loopback, so it "
                "accepts no one: create a key with `chit keys create` or set CHIT_API_KEYS",
                headers={"WWW-Authenticate": "Bearer"},
            )
        return OPEN

    def _lookup(self, digest: str) -> Principal | None:
        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(digest)
            if cached is not None and now < cached[0]:
                return cached[1]
        key = self.store.find_api_key(digest)
        principal = None if key is None else principal_of(key)
        with self._lock:
            if len(self._cache) >= _CACHE_MAX:
                self._cache.clear()
            self._cache[digest] = (now + self.cache_seconds, principal)
        return principal


def require_scope(principal: Principal, scope: str) -> None:
    if not principal.allows(scope):
        have = "+".join(s for s in SCOPES if s in principal.scopes) or "none"
        raise ApiProblem(
            403,
            "forbidden",
            f"this API key has scope {have}; this route needs {scope}",
        )


def require_every_tenant(principal: Principal) -> None:
    """Limits and pauses hold for every tenant's jobs: a key bound to one tenant
    (the default tenant "" included) may not set or read them."""
    if principal.tenant is not None:
        raise ApiProblem(
            403,
            "forbidden",
            f"this API key is bound to tenant {principal.tenant!r}; limits and pauses hold "
            "for every tenant, so this route needs an admin key of every tenant "
            "(`chit keys create --tenant '*' --scopes admin`, or *:admin:KEY in CHIT_API_KEYS)",
        )


def _bearer(authorization: str | None) -> str:
    if not authorization:
        raise ApiProblem(
            401,
            "unauthorized",
            "missing API key: send the header `Authorization: Bearer YOUR_KEY`",
            headers={"WWW-Authenticate": "Bearer"},
        )
    scheme, _, key = authorization.partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key:
        raise ApiProblem(
            401,
            "unauthorized",
            "the Authorization header must be `Bearer YOUR_KEY`",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return key
