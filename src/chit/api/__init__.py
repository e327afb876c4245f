"""The HTTP API: `create_app(queue)` runs it on its own (`chit serve`);
`create_router(queue)` mounts the same routes on an application's FastAPI app."""

from chit.api.app import ApiState, create_app, create_router, lifespan
from chit.api.errors import ChitRoute

__all__ = ["ApiState", "ChitRoute", "create_app", "create_router", "lifespan"]
