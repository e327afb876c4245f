"""Every error the API answers is JSON: `{"error": code, "message": ..., "details": {...}}`,
`details` always an object (`{}` when there is nothing more to say).

chit's exceptions map to statuses here, in one table. `ChitRoute` applies the
mapping inside each route, so the routes answer the same way when an
application mounts them on its own FastAPI app, whatever handlers it has.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import pydantic
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from chit.api.problem import ApiProblem
from chit.api.schemas.common import ErrorOut
from chit.errors import (
    ChitError,
    IdempotencyConflict,
    InvalidPayload,
    InvalidRequest,
    InvalidTransition,
    InvalidWait,
    JobNotFound,
    PayloadTooLarge,
    StoreError,
    UnknownKind,
    WorkflowNotFound,
)
from chit.ids import is_job_id
from chit.limits import LimitError

log = logging.getLogger("chit.api")

# Seconds a client should wait before retrying when the database is away.
STORE_RETRY_AFTER = 5


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    return {"error": code, "message": message, "details": details or {}}


def to_problem(exc: Exception) -> ApiProblem | None:
    """The answer for an exception, or None for a bug (answered 500)."""
    match exc:
        case ApiProblem():
            return exc
        case UnknownKind():
            return ApiProblem(422, "unknown_kind", str(exc), {"known_kinds": exc.known})
        case InvalidPayload():
            return ApiProblem(422, "invalid_payload", str(exc), {"errors": exc.errors})
        case PayloadTooLarge():
            return ApiProblem(413, "payload_too_large", str(exc))
        case InvalidRequest():
            return ApiProblem(422, "invalid_request", str(exc))
        case LimitError():
            return ApiProblem(422, "invalid_limits", str(exc))
        case IdempotencyConflict():
            message = f"{exc}; use a new key for a new request"
            return ApiProblem(422, "idempotency_conflict", message, {"job_id": exc.job_id})
        case JobNotFound():
            return ApiProblem(404, "job_not_found", str(exc))
        case InvalidWait():
            return ApiProblem(422, "invalid_signal", str(exc))
        case WorkflowNotFound():
            return ApiProblem(404, "workflow_not_found", str(exc))
        case InvalidTransition():
            return ApiProblem(409, "invalid_transition", str(exc))
        case StoreError() if not exc.transient:
            # The request held what the database cannot store: a retry never helps.
            log.warning("the database refused a value: %s", exc)
            return ApiProblem(
                422, "invalid_request", "the request holds a value the job database cannot store"
            )
        case StoreError():
            # The store's message names the server: it goes to the log, not the client.
            log.warning("the database is unavailable: %s", exc)
            return ApiProblem(
                503,
                "store_unavailable",
                "the job database is unavailable right now; try again shortly",
                headers={"Retry-After": str(STORE_RETRY_AFTER)},
            )
        case ChitError():
            return ApiProblem(400, "bad_request", str(exc))
        case RequestValidationError():
            return _invalid(exc.errors())
        case pydantic.ValidationError():
            return _invalid(exc.errors(include_url=False, include_input=False))
        case HTTPException():
            return ApiProblem(exc.status_code, _code(exc.status_code), str(exc.detail), None)
    return None


def _invalid(errors: Sequence[Any]) -> ApiProblem:
    details = [
        {"loc": [str(p) for p in e.get("loc", ())], "msg": e.get("msg"), "type": e.get("type")}
        for e in errors
    ]
    fields = "; ".join(f"{'.'.join(d['loc']) or 'body'}: {d['msg']}" for d in details)
    return ApiProblem(422, "invalid_request", f"invalid request: {fields}", {"errors": details})


def error_response(exc: ApiProblem) -> JSONResponse:
    return JSONResponse(
        error_body(exc.code, exc.message, exc.details), exc.status, headers=exc.headers
    )


def answer_exception(request: Request, exc: Exception) -> Response:
    """For app-level handlers: 404 and 405 from routing, and anything unexpected."""
    problem = to_problem(exc)
    if isinstance(exc, HTTPException) and exc.status_code in (404, 405):
        problem = _routing_error(request, exc)
    if problem is None:
        log.exception("%s %s failed", request.method, request.url.path, exc_info=exc)
        problem = ApiProblem(
            500, "internal_error", "internal error: the server log has the details"
        )
    return error_response(problem)


def _routing_error(request: Request, exc: HTTPException) -> ApiProblem:
    where = f"{request.method} {request.url.path[:200]}"
    if exc.status_code == 405:
        allowed = allowed_methods(request)
        return ApiProblem(
            405,
            "method_not_allowed",
            f"{where}: method not allowed here; allowed: {allowed or 'none'}",
            headers={"Allow": allowed},
        )
    return ApiProblem(404, "not_found", f"{where}: no such route; the routes are listed at /docs")


def allowed_methods(request: Request) -> str:
    """Every method some route takes at this path. Starlette's 405 names only
    the first route whose path matched (`PUT /jobs` said `Allow: POST`); a
    `{job_id}` that is not a job id does not count (`/jobs/replay`). The app
    lists its routers as `app.state.routers`: (prefix, router) pairs."""
    path = request.scope["path"]
    methods: set[str] = set()
    for prefix, router in getattr(request.app.state, "routers", ()):
        if not path.startswith(prefix):
            continue
        for route in router.routes:
            if not isinstance(route, APIRoute):
                continue
            found = route.path_regex.match(path.removeprefix(prefix))
            if found is None:
                continue
            job_id = found.groupdict().get("job_id")
            if job_id is not None and not is_job_id(job_id):
                continue
            methods |= route.methods or set()
    return ", ".join(sorted(methods))


class ChitRoute(APIRoute):
    """Answers chit's exceptions (and parameter validation) as JSON errors."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            try:
                return await handler(request)
            except Exception as exc:
                return answer_exception(request, exc)

        return guarded


def _code(status: int) -> str:
    return {
        400: "bad_request",
        401: "unauthorized",
        403: "forbidden",
        404: "not_found",
        405: "method_not_allowed",
        413: "body_too_large",
        415: "unsupported_media_type",
        422: "invalid_request",
    }.get(status, f"http_{status}")


_DESCRIPTIONS = {
    400: "the body is not valid UTF-8 JSON, or is nested too deeply",
    401: "no API key, or one that is not recognised",
    403: "the key lacks the scope (or, for limits and pauses, the tenants) this route needs",
    404: "no such job (or another tenant's)",
    409: "the job is not in a state that allows this",
    413: "the body (CHIT_MAX_BODY_BYTES) or the payload is too large",
    415: "the body is not JSON",
    422: "invalid request: the message says which field",
    503: "the job database cannot be used right now; retry after Retry-After",
}


def documented(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` for these error statuses, plus those every route can give."""
    return {
        status: {"model": ErrorOut, "description": _DESCRIPTIONS[status]}
        for status in sorted({401, 403, 422, 503, *statuses})
    }
