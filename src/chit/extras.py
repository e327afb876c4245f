"""The optional parts of chit and the extras that install them.

`pip install chit` is the library, the worker and the CLI on SQLite, on
pydantic and cronsim alone. The rest load only where they are used, so the core never
imports them; a part used without its extra fails with one line naming it,
e.g. "chit serve needs the HTTP API: pip install 'chit[api]'".
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from chit.errors import ConfigError

# The top-level modules each extra brings, as `import` names them (not the
# distributions' names): a ModuleNotFoundError for another one is a real bug
# and is not dressed up as a missing extra.
MODULES: dict[str, frozenset[str]] = {
    "api": frozenset(
        {"fastapi", "starlette", "uvicorn", "h11", "anyio", "jinja2", "markupsafe"}
        | {"prometheus_client"}
    ),
    "postgres": frozenset({"psycopg", "psycopg_pool", "psycopg_binary"}),
    "client": frozenset({"httpx", "httpcore", "anyio", "h11"}),
    "django": frozenset({"django", "django_tasks", "asgiref"}),
    # Never imported by chit itself (chit.tracing works on what the application
    # imported): listed so the core's lean-import tests cover it.
    "otel": frozenset({"opentelemetry"}),
}


class MissingExtra(ConfigError, ImportError):
    """A part of chit was used without the extra that installs it. Also an
    ImportError, since that is what it replaces."""

    def __init__(self, what: str, extra: str) -> None:
        super().__init__(f"{what}: pip install 'chit[{extra}]'")
        self.extra = extra


@contextmanager
def needs(extra: str, what: str) -> Iterator[None]:
    """Turn a missing module of `extra` raised inside the block into
    MissingExtra(what, extra); any other error passes through. Nested, the
    outermost block's `what` wins: it names what the user asked for."""
    try:
        yield
    except MissingExtra as e:
        if e.extra != extra:
            raise
        raise MissingExtra(what, extra) from None
    except ModuleNotFoundError as e:
        top = (e.name or "").partition(".")[0]
        if top not in MODULES[extra]:
            raise
        raise MissingExtra(what, extra) from None
