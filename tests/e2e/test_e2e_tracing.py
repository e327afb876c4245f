"""OpenTelemetry across a real worker process (issue 15): the test enqueues under
a span of its own (SDK, in-memory exporter), a `chit worker` whose app sets a
provider writing spans to a file runs the job, which fails once then succeeds.
One producer span here; two consumer spans there, the first a child of the
producer span, the retry in a trace of its own linked to it, the error recorded,
the handler's own spans under them (thread pool, and process pool children).
A traceparent sent to POST /jobs is the producer span's parent. Both backends."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import chit
from chit.jobs import State
from support.jobs import wait_terminal
from support.otel_spans import memory_spans
from support.processes import Procs, free_port, wait_healthy
from support.waiting import wait_until

pytestmark = pytest.mark.slow

APP = "support.otel_app:queue"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    yield from memory_spans()


def read_spans(path: Path) -> list[dict[str, Any]]:
    """The spans written so far: complete lines only (a process may be half way
    through writing the last one)."""
    if not path.exists():
        return []
    *complete, _partial = path.read_text().split("\n")
    return [json.loads(line) for line in complete if line]


def consumer_spans(path: Path, job_id: str, count: int) -> list[dict[str, Any]]:
    def found() -> list[dict[str, Any]]:
        runs = [s for s in read_spans(path) if s["attributes"].get("chit.job.id") == job_id]
        return runs if len(runs) >= count else []

    runs = wait_until(found, 30, what=f"{count} consumer spans in {path}")
    return sorted(runs, key=lambda s: s["attributes"]["chit.job.attempt"])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("pool", ["thread", "process"])
def test_a_job_failing_once_across_a_real_worker_gives_linked_spans(
    procs: Procs, db_url: str, tmp_path: Path, spans: InMemorySpanExporter, pool: str
) -> None:
    path = tmp_path / "spans.jsonl"
    queue = chit.Queue(db_url)
    queue.task("flaky", max_attempts=3)(lambda job, body: None)  # the worker's app runs it
    try:
        with trace.get_tracer("test").start_as_current_span("request") as outer:
            job_id = queue.enqueue("flaky", {}, tenant="acme").id
        worker = procs.start(
            ["-m", "chit", "worker", "--app", APP, "--concurrency", "1", "--pool", pool],
            "worker",
            extra_env={"CHIT_TEST_SPANS": str(path)},
        )
        assert wait_terminal(queue, job_id, 60).state is State.SUCCEEDED, worker.stderr()
    finally:
        queue.close()

    [producer] = [s for s in spans.get_finished_spans() if s.name == "chit.enqueue flaky"]
    assert producer.parent is not None
    assert producer.parent.span_id == outer.get_span_context().span_id
    producer_trace = f"{producer.context.trace_id:032x}"
    producer_span = f"{producer.context.span_id:016x}"

    first, second = consumer_spans(path, job_id, 2)
    for span, attempt, outcome in ((first, 1, "retrying"), (second, 2, "succeeded")):
        assert span["name"] == "chit.run flaky" and span["kind"] == "CONSUMER"
        assert span["attributes"]["chit.job.attempt"] == attempt
        assert span["attributes"]["chit.outcome"] == outcome
        assert span["attributes"]["chit.queue"] == "default"
        assert span["attributes"]["chit.tenant"] == "acme"
    assert first["trace_id"] == producer_trace and first["parent_span_id"] == producer_span
    assert first["links"] == []
    assert second["trace_id"] != producer_trace and second["parent_span_id"] is None
    assert second["links"] == [producer_span]
    assert first["status"] == "ERROR" and second["status"] != "ERROR"
    [error] = [e for e in first["events"] if e["name"] == "exception"]
    assert "the first attempt fails on purpose" in error["exception.message"]

    # The handler's own spans (in a child process under --pool process) nest under
    # their attempt's.
    inside = wait_until(
        lambda: len(found := [s for s in read_spans(path) if s["name"] == "inside"]) >= 2 and found,
        30,
        what="the handler's spans",
    )
    assert sorted(s["parent_span_id"] for s in inside) == sorted(
        [first["span_id"], second["span_id"]]
    )


@pytest.mark.timeout(120)
def test_a_traceparent_sent_to_post_jobs_is_the_enqueues_parent(
    procs: Procs, db_url: str, tmp_path: Path
) -> None:
    path = tmp_path / "spans.jsonl"
    port = free_port()
    env = {"CHIT_TEST_SPANS": str(path)}
    server = procs.start(
        ["-m", "chit", "serve", "--app", APP, "--port", str(port)], "serve", extra_env=env
    )
    procs.start(["-m", "chit", "worker", "--app", APP], "worker", extra_env=env)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(server, url, 30, what="chit serve to answer")
    assert server.alive(), server.stderr()
    caller_trace, caller_span = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    answer = httpx.post(
        f"{url}/jobs",
        json={"kind": "flaky", "payload": {}},
        headers={"traceparent": f"00-{caller_trace}-{caller_span}-01"},
    )
    assert answer.status_code == 202, answer.text
    job_id = answer.json()["job_id"]
    first, second = consumer_spans(path, job_id, 2)
    [producer] = [s for s in read_spans(path) if s["name"] == "chit.enqueue flaky"]
    assert producer["trace_id"] == caller_trace and producer["parent_span_id"] == caller_span
    assert producer["kind"] == "PRODUCER"
    assert first["trace_id"] == caller_trace and first["parent_span_id"] == producer["span_id"]
    assert second["links"] == [producer["span_id"]]
