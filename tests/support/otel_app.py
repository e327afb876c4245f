"""A worker app that traces: an OpenTelemetry SDK provider whose spans are
written, one JSON object a line, to the file CHIT_TEST_SPANS names, as each
ends (the e2e tracing test reads them back from a real worker process)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

import chit


def as_dict(span: ReadableSpan) -> dict[str, Any]:
    assert span.context is not None
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": f"{span.context.trace_id:032x}",
        "span_id": f"{span.context.span_id:016x}",
        "parent_span_id": None if span.parent is None else f"{span.parent.span_id:016x}",
        "links": [f"{link.context.span_id:016x}" for link in span.links],
        "attributes": dict(span.attributes or {}),
        "status": span.status.status_code.name,
        "events": [{"name": e.name, **dict(e.attributes or {})} for e in span.events],
    }


class FileExporter(SpanExporter):
    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(self.path, "a") as f:
            for span in spans:
                f.write(json.dumps(as_dict(span), default=str) + "\n")
        return SpanExportResult.SUCCESS


provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(FileExporter(os.environ["CHIT_TEST_SPANS"])))
trace.set_tracer_provider(provider)

queue = chit.Queue()


@queue.task("flaky", max_attempts=3)
def flaky(job: chit.JobContext, body: dict[str, Any]) -> dict[str, Any]:
    """Fails its first attempt; each attempt makes a span of its own, "inside"."""
    with trace.get_tracer("app").start_as_current_span("inside"):
        if job.attempt == 1:
            raise RuntimeError("the first attempt fails on purpose")
    return {"attempt": job.attempt, "pid": os.getpid()}
