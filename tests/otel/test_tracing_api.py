"""The HTTP API's traceparent header (issue 15), in process with the SDK's
in-memory exporter: POST /jobs and POST /workflows make their producer spans
children of the caller's span; without the header (or with an invalid one,
ignored, the job still stored) they are children of the current span, not of
the caller's. Both backends."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import chit
from support.api import Api, running_api, settings_for
from support.api_app import register
from support.postgres import sqlite_or_emptied_postgres

pytestmark = pytest.mark.anyio

CALLER_TRACE, CALLER_SPAN = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
HEADER = {"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"}


@pytest.fixture(params=["sqlite", "postgres"])
def queue(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[chit.Queue]:
    q = register(chit.Queue(settings=settings_for(sqlite_or_emptied_postgres(request, tmp_path))))
    yield q
    q.close()


@pytest.fixture
async def api(queue: chit.Queue) -> AsyncIterator[Api]:
    async for a in running_api(queue):
        yield a


def producers(spans: InMemorySpanExporter) -> list[tuple[str, str | None]]:
    return [
        (f"{s.context.trace_id:032x}", None if s.parent is None else f"{s.parent.span_id:016x}")
        for s in spans.get_finished_spans()
        if s.name.startswith("chit.enqueue")
    ]


async def test_post_jobs_joins_the_callers_trace(api: Api, spans: InMemorySpanExporter) -> None:
    answer = await api.http.post(
        "/jobs", json={"kind": "echo", "payload": {"message": "hi"}}, headers=HEADER
    )
    assert answer.status_code == 202, answer.text
    assert producers(spans) == [(CALLER_TRACE, CALLER_SPAN)]
    stored = api.store.claim("w", ["default"], 1, 30)
    assert [j.traceparent[3:35] for j in stored if j.traceparent] == [CALLER_TRACE]


async def test_post_workflows_joins_the_callers_trace(
    api: Api, spans: InMemorySpanExporter
) -> None:
    jobs = [
        {"ref": "a", "kind": "echo", "payload": {"message": "a"}},
        {"ref": "b", "kind": "echo", "payload": {"message": "b"}, "depends_on": ["a"]},
    ]
    answer = await api.http.post("/workflows", json={"jobs": jobs}, headers=HEADER)
    assert answer.status_code == 202, answer.text
    assert producers(spans) == [(CALLER_TRACE, CALLER_SPAN)] * 2


@pytest.mark.parametrize("header", [{}, {"traceparent": "00-nonsense"}])
async def test_without_a_valid_header_the_enqueue_starts_a_trace(
    api: Api, spans: InMemorySpanExporter, header: dict[str, str]
) -> None:
    answer = await api.http.post(
        "/jobs", json={"kind": "echo", "payload": {"message": "hi"}}, headers=header
    )
    assert answer.status_code == 202, answer.text
    [(trace_id, parent)] = producers(spans)
    assert trace_id != CALLER_TRACE and parent != CALLER_SPAN
    # The current span is the parent then: a new root, or the framework's request
    # span where it makes one (FastAPI does, with OpenTelemetry installed).
    assert parent is None or parent in {
        f"{s.context.span_id:016x}"
        for s in spans.get_finished_spans()
        if s.name != "chit.enqueue echo"
    }
