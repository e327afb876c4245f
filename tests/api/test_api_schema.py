"""Schemathesis against /openapi.json, in-process: generated requests (valid and
invalid, bounded in number) to every operation must never get a 5xx, and every answer must match
the documented status codes, content types, headers and schemas."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

import chit
from chit.api import create_app
from chit.settings import Settings
from support.api import settings_for, sqlite_url
from support.api_app import register

# Hundreds of generated requests: a longer run, left out of `make test-fast`.
pytestmark = pytest.mark.slow

MAX_EXAMPLES = 40
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


def operations() -> list[str]:
    """Every operation's label, read from the schema (no database is opened)."""
    app = create_app(register(chit.Queue(settings=Settings())))
    paths = app.openapi()["paths"]
    return [f"{method.upper()} {path}" for path, item in paths.items() for method in item]


@pytest.mark.parametrize("label", operations())
def test_api_conforms_to_its_schema(tmp_path: Path, label: str) -> None:
    queue = register(chit.Queue(settings=settings_for(sqlite_url(tmp_path))))
    # A job to find (generated ids are all unknown), finished so its event stream ends.
    seed = queue.enqueue("echo", {"message": "seed"}).id
    queue.store.cancel(seed)
    schema = schemathesis.openapi.from_asgi("/openapi.json", create_app(queue))
    method, path = label.split(" ", 1)
    operation = schema[path][method]

    strategies = [
        operation.as_strategy(GenerationMode.POSITIVE),
        operation.as_strategy(GenerationMode.NEGATIVE),
    ]
    if "{job_id}" in path:
        strategies.append(
            operation.as_strategy(GenerationMode.POSITIVE, path_parameters={"job_id": seed})
        )
    cases = st.one_of(strategies)

    @given(case=cases)
    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def conforms(case: Any) -> None:
        # Room for a loaded machine (beside two busy loops, one POST /workflows
        # took over 5 s); a request that hangs still fails.
        case.call_and_validate(checks=CHECKS, timeout=30)

    try:
        conforms()
    finally:
        queue.close()
