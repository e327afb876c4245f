"""The HTTP API: `create_app(queue)` runs it on its own (`chit serve`);
`create_router(queue)` mounts the same routes on an application's FastAPI app.

Imported lazily, so `chit.api.schemas` (used by `chit.Client`) does not load
FastAPI."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from chit.extras import needs

if TYPE_CHECKING:
    from chit.api.app import create_app, create_router, lifespan
    from chit.api.deps import ApiState
    from chit.api.errors import ChitRoute

__all__ = ["ApiState", "ChitRoute", "create_app", "create_router", "lifespan"]


def __getattr__(name: str) -> Any:
    with needs("api", f"chit.api.{name} needs FastAPI"):
        return _load(name)


def _load(name: str) -> Any:
    if name == "ChitRoute":
        from chit.api.errors import ChitRoute

        return ChitRoute
    if name == "ApiState":
        from chit.api.deps import ApiState

        return ApiState
    if name in __all__:
        from chit.api import app

        return getattr(app, name)
    raise AttributeError(f"module 'chit.api' has no attribute {name!r}")
