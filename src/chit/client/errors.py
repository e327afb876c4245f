"""What the server's error answers raise: `APIError` subclasses that are also
the matching local exceptions (the tree is drawn in `chit.client`)."""

from __future__ import annotations

from typing import Any

import httpx

from chit.errors import (
    ChitError,
    IdempotencyConflict,
    InvalidRequest,
    InvalidTransition,
    JobNotFound,
    StoreError,
    WorkflowNotFound,
)


class APIError(ChitError):
    def __init__(self, status: int, code: str, message: str, details: Any = None) -> None:
        Exception.__init__(self, message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details

    def __str__(self) -> str:
        return self.message


class APINotFound(APIError, JobNotFound):
    pass


class APIWorkflowNotFound(APINotFound, WorkflowNotFound):
    pass


class APIInvalidRequest(APIError, InvalidRequest):
    pass


class APIIdempotencyConflict(APIError, IdempotencyConflict):
    pass


class APIConflict(APIError, InvalidTransition):
    pass


class APIUnavailable(APIError, StoreError):
    pass


def raise_for(response: httpx.Response) -> None:
    try:
        body = response.json()
        code, message, details = body["error"], body["message"], body.get("details")
    except (ValueError, KeyError, TypeError):
        code, message, details = f"http_{response.status_code}", response.text[:500], None
    status = response.status_code
    if status == 404:
        cls: type[APIError] = APIWorkflowNotFound if code == "workflow_not_found" else APINotFound
    elif code == "idempotency_conflict":
        cls = APIIdempotencyConflict
    elif status in (400, 413, 415, 422):
        cls = APIInvalidRequest
    elif status == 409:
        cls = APIConflict
    elif status in (502, 503, 504):
        cls = APIUnavailable
    else:
        cls = APIError
    raise cls(status, code, message, details)


def unreachable(base_url: str, error: httpx.TransportError) -> APIUnavailable:
    return APIUnavailable(0, "unreachable", f"cannot reach the chit API at {base_url}: {error}")
