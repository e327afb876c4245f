"""The field types and checks the API's schemas share, and the error body
every route answers."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, AwareDatetime, BaseModel, BeforeValidator, Field

from chit import bounds


def _in_range(value: datetime) -> datetime:
    utc = bounds.storable_time(value)
    if utc is None:
        raise ValueError(f"time out of range: use {bounds.YEARS}")
    return utc


def whole_number(value: Any) -> Any:
    # JSON Schema's integer is any number without a fraction: 2.0 is 2 (1.5 and
    # true are still refused by the strict field).
    if type(value) is float and value.is_integer() and abs(value) <= 2**53:
        return int(value)
    return value


def _written_out(value: Any) -> Any:
    # Lax pydantic reads a number as seconds since 1970: `"run_at": 0` is a slip,
    # and so is `?since=0.5` (a query's values are all text).
    if isinstance(value, int | float) or (isinstance(value, str) and _number(value)):
        raise ValueError("a time is ISO 8601 text with a timezone, not a number")
    return value


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _printable(value: str) -> str:
    if not bounds.is_plain_text(value):  # NUL, newlines, control characters
        raise ValueError("a concurrency key is printable text: no NUL or control characters")
    return value


def no_nul(value: Any) -> Any:
    """PostgreSQL's text cannot hold NUL and SQLite would: refuse it on both."""
    if isinstance(value, str) and "\x00" in value:
        raise ValueError("text cannot hold a NUL character (\\u0000)")
    return value


Moment = Annotated[
    AwareDatetime,
    BeforeValidator(_written_out),
    AfterValidator(_in_range),
    Field(json_schema_extra={"pattern": bounds.YEAR_PATTERN}),
]
# Strict: `true` or `1.5` is a slip, not priority 1.
Priority = Annotated[
    int,
    Field(strict=True, ge=-bounds.PRIORITY_LIMIT, le=bounds.PRIORITY_LIMIT),
    BeforeValidator(whole_number),
]
Name = Annotated[str, Field(min_length=1, max_length=bounds.NAME_MAX), AfterValidator(no_nul)]
ConcurrencyKey = Annotated[
    str,
    Field(
        min_length=1,
        max_length=bounds.CONCURRENCY_KEY_MAX,
        description="jobs of a key are limited together (a task's key_concurrency, key_rate)",
        json_schema_extra={"pattern": bounds.PLAIN_TEXT_PATTERN},
    ),
    AfterValidator(_printable),
]


def _one_line(value: str) -> str:
    if not bounds.is_plain_text(value):
        raise ValueError("a ref is printable text: no NUL or control characters")
    return value


Ref = Annotated[
    str,
    Field(
        min_length=1,
        max_length=bounds.REF_MAX,
        description="this job's name in its workflow, which other jobs give in depends_on",
        json_schema_extra={"pattern": bounds.PLAIN_TEXT_PATTERN},
    ),
    AfterValidator(_one_line),
]
# A dependency: a job id, or (in POST /workflows) a ref of the same request.
DependencyName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=bounds.REF_MAX,
        json_schema_extra={"pattern": bounds.PLAIN_TEXT_PATTERN},
    ),
    AfterValidator(_one_line),
]
RunOnIn = Literal["succeeded", "finished"]


def _ascii_printable(value: str) -> str:
    if not (value.isprintable() and value.isascii()):
        raise ValueError("a key is printable ASCII: no NUL, control or non-ASCII characters")
    return value


_PRINTABLE_ASCII = {"pattern": "^[ -~]*$"}


DebounceKey = Annotated[
    str,
    Field(
        min_length=1,
        max_length=bounds.DEBOUNCE_KEY_MAX,
        description="while the job of this key has not started, another submit with the key "
        "replaces its payload and moves its start (created: false, debounced: true)",
        json_schema_extra=_PRINTABLE_ASCII,
    ),
    AfterValidator(_ascii_printable),
]
UniqueKey = Annotated[
    str,
    Field(
        min_length=1,
        max_length=bounds.UNIQUE_KEY_MAX,
        description="at most one job per key waiting, queued or running: another submit "
        "answers that job (created: false); free again once it has finished",
        json_schema_extra=_PRINTABLE_ASCII,
    ),
    AfterValidator(_ascii_printable),
]


class ErrorOut(BaseModel):
    """Every error the API answers: a stable `error` code for programs and a
    `message` for people; `details` is always an object: `errors` (a list of
    `loc`, `msg`, `type`) for invalid fields, `known_kinds`, `job_id`, or empty."""

    error: str
    message: str
    details: dict[str, Any] = Field(default_factory=dict)
