"""OpenTelemetry in one process (issue 15), with the SDK's in-memory exporter:
a job that fails once then succeeds gives one producer span (a child of the
enqueuing span), two consumer spans (the first a child of the producer span,
the retry in its own trace with a link to it), the error recorded; a handler's
own spans nest under its attempt; POST /jobs's traceparent header is the
producer span's parent; an invalid traceparent is ignored. On both backends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import chit
from chit import tracing
from chit.jobs import State
from chit.settings import Settings
from chit.worker.runner import Worker
from support.postgres import sqlite_or_emptied_postgres


@pytest.fixture(params=["sqlite", "postgres"])
def queue(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[chit.Queue]:
    url = sqlite_or_emptied_postgres(request, tmp_path)
    q = chit.Queue(settings=Settings(database_url=url, backoff_base=0.01, backoff_max=0.02))

    @q.task("flaky", max_attempts=3)
    def flaky(job: chit.JobContext, body: dict[str, Any]) -> dict[str, Any]:
        with trace.get_tracer("app").start_as_current_span("inside"):
            if job.attempt == 1:
                raise RuntimeError("the first attempt fails on purpose")
        return {"attempt": job.attempt}

    yield q
    q.close()


def run_all(queue: chit.Queue, job_id: str) -> None:
    worker = Worker(queue, concurrency=1, poll_interval=0.05)
    try:
        for _ in range(100):
            worker.run_until_idle(timeout=5)
            if queue.get(job_id).state.terminal:
                return
        pytest.fail("the job did not finish")
    finally:
        worker.close()


def named(spans: InMemorySpanExporter, prefix: str) -> list[ReadableSpan]:
    return [s for s in spans.get_finished_spans() if s.name.startswith(prefix)]


def test_a_job_failing_once_gives_a_producer_span_and_two_consumer_spans(
    queue: chit.Queue, spans: InMemorySpanExporter
) -> None:
    assert tracing.enabled()
    with trace.get_tracer("app").start_as_current_span("request") as outer:
        job = queue.enqueue("flaky", {}, tenant="acme")
    run_all(queue, job.id)
    assert queue.get(job.id).state is State.SUCCEEDED

    [producer] = named(spans, "chit.enqueue")
    assert producer.name == "chit.enqueue flaky" and producer.kind is SpanKind.PRODUCER
    assert producer.parent is not None
    assert producer.parent.span_id == outer.get_span_context().span_id
    assert producer.context.trace_id == outer.get_span_context().trace_id

    first, second = sorted(named(spans, "chit.run"), key=lambda s: s.start_time or 0)
    for span, attempt in ((first, 1), (second, 2)):
        assert span.name == "chit.run flaky" and span.kind is SpanKind.CONSUMER
        assert span.attributes is not None
        assert span.attributes["chit.job.id"] == job.id
        assert span.attributes["chit.job.attempt"] == attempt
        assert span.attributes["chit.queue"] == "default"
        assert span.attributes["chit.tenant"] == "acme"
    assert first.attributes["chit.outcome"] == "retrying"  # type: ignore[index]
    assert second.attributes["chit.outcome"] == "succeeded"  # type: ignore[index]

    # The first attempt: in the enqueuer's trace, under the producer span.
    assert first.parent is not None and first.parent.span_id == producer.context.span_id
    assert first.context.trace_id == producer.context.trace_id
    assert not first.links
    # The retry: a trace of its own, linked to the producer span.
    assert second.parent is None and second.context.trace_id != producer.context.trace_id
    assert [link.context.span_id for link in second.links] == [producer.context.span_id]

    # The error, recorded on the first attempt only.
    assert first.status.status_code is StatusCode.ERROR
    [event] = [e for e in first.events if e.name == "exception"]
    assert event.attributes is not None
    assert event.attributes["exception.type"] == "RuntimeError"
    assert event.attributes["exception.message"] == "the first attempt fails on purpose"
    assert second.status.status_code is not StatusCode.ERROR

    # The handler's own spans nest under its attempt.
    inside = named(spans, "inside")
    assert sorted(s.parent.span_id for s in inside if s.parent) == sorted(
        [first.context.span_id, second.context.span_id]
    )


async def test_aenqueue_makes_the_same_producer_span(
    queue: chit.Queue, spans: InMemorySpanExporter
) -> None:
    with trace.get_tracer("app").start_as_current_span("request") as outer:
        job = await queue.aenqueue("flaky", {})
    await queue.aclose()
    [producer] = named(spans, "chit.enqueue")
    assert producer.parent is not None
    assert producer.parent.span_id == outer.get_span_context().span_id
    stored = queue.store.claim("w", ["default"], 1, 30)[0]
    assert stored.id == job.id
    assert stored.traceparent is not None  # the flags (sampled, random) are the SDK's
    assert stored.traceparent[:-3] == (
        f"00-{producer.context.trace_id:032x}-{producer.context.span_id:016x}"
    )


test_aenqueue_makes_the_same_producer_span = pytest.mark.anyio(
    test_aenqueue_makes_the_same_producer_span
)


def test_a_traceparent_given_is_the_producer_spans_parent(
    queue: chit.Queue, spans: InMemorySpanExporter
) -> None:
    given = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    queue.enqueue_many([chit.JobRequest("flaky", {}, traceparent=given)])
    [producer] = named(spans, "chit.enqueue")
    assert f"{producer.context.trace_id:032x}" == "0af7651916cd43dd8448eb211c80319c"
    assert producer.parent is not None and f"{producer.parent.span_id:016x}" == "b7ad6b7169203331"


@pytest.mark.parametrize(
    "bad",
    [
        "junk",
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",  # all-zero trace id
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",  # all-zero span id
        "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",  # version ff
        "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",  # upper case
    ],
)
def test_an_invalid_traceparent_is_ignored(
    queue: chit.Queue, spans: InMemorySpanExporter, bad: str
) -> None:
    queue.enqueue_many([chit.JobRequest("flaky", {}, traceparent=bad)])
    [producer] = named(spans, "chit.enqueue")
    assert producer.parent is None  # a new trace: no span in the test's context


def test_an_enqueue_refused_records_the_error_and_stores_nothing(
    queue: chit.Queue, spans: InMemorySpanExporter
) -> None:
    with pytest.raises(chit.UnknownKind):
        queue.enqueue("nope", {})
    [producer] = named(spans, "chit.enqueue")
    assert producer.status.status_code is StatusCode.ERROR
    assert [e.name for e in producer.events] == ["exception"]
    assert sum(queue.store.stats().by_state.values()) == 0


WITHOUT_OTEL = """
import sys
sys.modules["opentelemetry"] = None  # as if chit[otel] were not installed: imports fail
import chit
from chit import tracing
from chit.worker.runner import Worker

queue = chit.Queue(sys.argv[1])
queue.task("echo")(lambda job, body: body)
given = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
job = queue.enqueue_many([chit.JobRequest("echo", {"x": 1}, traceparent=given)])[0]
Worker(queue, concurrency=1).run_until_idle(timeout=20)
assert not tracing.enabled()
print(queue.get(job.id).state.value, queue.get(job.id).result)
"""


def test_chit_works_without_the_opentelemetry_packages(tmp_path: Path) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_OTEL, f"sqlite:///{tmp_path / 'q.db'}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "succeeded {'x': 1}"


def test_an_exception_that_cannot_describe_itself_fails_the_job_as_untraced(
    queue: chit.Queue, spans: InMemorySpanExporter
) -> None:
    # Recording an exception reads its message; one whose __str__ raises must
    # leave the job's error as it is without tracing, and the span marked.
    class Mute(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no words")

    @queue.task("mute", max_attempts=1)
    def mute(job: chit.JobContext, body: dict[str, Any]) -> None:
        raise Mute()

    job = queue.enqueue("mute", {})
    run_all(queue, job.id)
    stored = queue.get(job.id)
    assert stored.state is State.FAILED
    assert stored.error is not None
    assert stored.error.startswith("Mute: <the exception's message could not be read>")
    [run] = named(spans, "chit.run")
    assert run.status.status_code is StatusCode.ERROR
    assert run.attributes is not None and run.attributes["chit.outcome"] == "failed"
