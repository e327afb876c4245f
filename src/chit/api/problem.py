"""`ApiProblem`, apart from the FastAPI handlers in errors.py: API keys
(auth.py) raise it, and `chit keys` uses auth.py without the `api` extra."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class ApiProblem(Exception):
    """An answer other than success, raised anywhere in a route."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details or {}
        self.headers = dict(headers or {})
