"""Reading a JSON request body defensively: capped in size, strict UTF-8, no
NaN, bounded nesting, no unpaired surrogates (which the database cannot store).
Each refusal is an ApiProblem whose message says what to fix."""

from __future__ import annotations

import json
from typing import Any, NoReturn, TypeVar

import pydantic
from starlette.requests import Request

from chit.api.deps import api_state
from chit.api.errors import ApiProblem

M = TypeVar("M", bound=pydantic.BaseModel)

MAX_DEPTH = 64


async def read_body(request: Request, model: type[M]) -> M:
    """The body read by `read_json` within the server's max_body_bytes, then
    validated as `model`."""
    return model.model_validate(
        await read_json(request, api_state(request).settings.max_body_bytes)
    )


async def read_json(request: Request, limit: int) -> Any:
    content_type = request.headers.get("content-type")
    if content_type is not None and not _is_json(content_type):
        raise ApiProblem(
            415,
            "unsupported_media_type",
            f"the body must be JSON (Content-Type: application/json), not {content_type[:100]!r}",
        )
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        _too_large(int(declared), limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            _too_large(size, limit, at_least=True)
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        raise ApiProblem(400, "invalid_json", "the request body is empty: send a JSON object")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ApiProblem(
            400,
            "invalid_utf8",
            f"the body is not valid UTF-8: byte 0x{raw[e.start]:02x} at offset {e.start}",
        ) from None
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        _too_deep()
    except json.JSONDecodeError as e:
        raise ApiProblem(
            400,
            "invalid_json",
            f"the body is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}",
        ) from None
    except ValueError as e:  # NaN/Infinity, or an integer of thousands of digits
        raise ApiProblem(400, "invalid_json", f"the body is not valid JSON: {e}") from None
    check_value(value)
    return value


def check_value(value: Any) -> None:
    """Depth and text checks, without recursion (the input may be hostile)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            if depth > MAX_DEPTH:
                _too_deep()
            for key, child in item.items():
                _check_text(key)
                stack.append((child, depth + 1))
        elif isinstance(item, list):
            if depth > MAX_DEPTH:
                _too_deep()
            stack.extend((child, depth + 1) for child in item)
        elif isinstance(item, str):
            _check_text(item)


def _check_text(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ApiProblem(
            400,
            "invalid_json",
            f"a string in the body has an unpaired surrogate (\\u{ord(text[e.start]):04x}); "
            "send valid Unicode",
        ) from None


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON; send a number or null")


def _too_large(size: int, limit: int, at_least: bool = False) -> NoReturn:
    amount = f"more than {limit}" if at_least else str(size)
    raise ApiProblem(
        413,
        "body_too_large",
        f"the request body is {amount} bytes; the limit is {limit} (CHIT_MAX_BODY_BYTES)",
    )


def _too_deep() -> NoReturn:
    raise ApiProblem(
        400, "invalid_json", f"the body is nested more than {MAX_DEPTH} levels deep; flatten it"
    )
