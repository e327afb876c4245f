"""Where chit's tables live when they share a Django database: the chit URL of
an entry of `settings.DATABASES`, so chit's own connections and the ones Django
opens reach the same SQLite file or PostgreSQL database."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlencode

from django.core.exceptions import ImproperlyConfigured

# Django's own OPTIONS for PostgreSQL, which are not libpq connection parameters.
_DJANGO_ONLY_OPTIONS = frozenset(
    {"isolation_level", "server_side_binding", "pool", "assume_role", "cursor_factory"}
)


def chit_url(alias: str, database: Mapping[str, Any]) -> str:
    engine = str(database.get("ENGINE", ""))
    name = database.get("NAME")
    if engine.endswith("sqlite3"):
        if not name or str(name) == ":memory:" or str(name).startswith("file:"):
            raise ImproperlyConfigured(
                f"chit: DATABASES[{alias!r}] must be a SQLite file for chit's workers to share"
            )
        return f"sqlite:///{os.path.abspath(os.fspath(name))}"
    if engine.endswith(("postgresql", "postgis")):
        return _postgres_url(database)
    raise ImproperlyConfigured(
        f"chit: DATABASES[{alias!r}] uses {engine!r}; chit runs on SQLite and PostgreSQL only"
    )


def _postgres_url(database: Mapping[str, Any]) -> str:
    user = quote(str(database.get("USER") or ""), safe="")
    password = quote(str(database.get("PASSWORD") or ""), safe="")
    host = str(database.get("HOST") or "")
    port = str(database.get("PORT") or "")
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    # A host that is a directory is a Unix socket: libpq reads it from the query.
    netloc = "" if host.startswith("/") else (f"[{host}]" if ":" in host else host)
    netloc = f"{auth}{netloc}{':' + port if port and netloc else ''}"
    query: dict[str, str] = {}
    if host.startswith("/"):
        query["host"] = host
        if port:
            query["port"] = port
    for key, value in (database.get("OPTIONS") or {}).items():
        if key not in _DJANGO_ONLY_OPTIONS and isinstance(value, str | int):
            query[key] = str(value)
    name = quote(str(database.get("NAME") or ""), safe="")
    return f"postgresql://{netloc}/{name}" + (f"?{urlencode(query)}" if query else "")
