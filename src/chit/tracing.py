"""OpenTelemetry traces across the queue (`pip install chit[otel]`).

- Enqueue makes a producer span, `chit.enqueue <kind>`, a child of the current
  span (or of the W3C `traceparent` a request carried: POST /jobs's header),
  and stores that span's traceparent with the job.
- Each attempt runs in a consumer span, `chit.run <kind>`: on the first attempt
  its parent is the producer span, so the job's run sits in the trace that
  enqueued it; a retry starts a trace of its own with a link to the producer
  span. The handler runs with the span current, so its own spans nest under it.

Without the opentelemetry packages, or with no SDK configured (the API's
default provider records nothing), every function here does nothing and costs
a check, and nothing optional is imported; a traceparent given is still
stored, for a worker that traces.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.context import Context

from chit.jobs import ClaimedJob, Failed, Outcome

TRACER = "chit"
# W3C Trace Context, version 00: an invalid one is ignored, as the spec says.
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")


def valid_traceparent(value: str | None) -> str | None:
    """`value` if it is a W3C traceparent, else None."""
    if value is None or not _TRACEPARENT.fullmatch(value) or value.startswith("ff"):
        return None
    return value


def enabled() -> bool:
    """Whether spans would be recorded: an SDK's provider (not the API's
    default) is set. Setting one imports opentelemetry.trace, so a process that
    has not imported it is not tracing, and chit imports nothing optional."""
    api = sys.modules.get("opentelemetry.trace")
    if api is None:
        return False
    provider = api.get_tracer_provider()
    return not isinstance(provider, api.ProxyTracerProvider | api.NoOpTracerProvider)


def _context_of(traceparent: str | None) -> Context | None:
    if traceparent is None:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract({"traceparent": traceparent})


def span_traceparent(span: Any) -> str | None:
    """The W3C traceparent naming `span` (None for no span): how an attempt's
    span reaches a child process of the process pool."""
    if span is None:
        return None
    return _traceparent_of(span)


@contextmanager
def resumed(traceparent: str | None) -> Iterator[None]:
    """Make the span `traceparent` names the parent of the spans made in the
    block (a handler in a child process: its spans nest under the attempt's)."""
    parent = _context_of(valid_traceparent(traceparent)) if enabled() else None
    if parent is None:
        yield
        return
    from opentelemetry import context

    token = context.attach(parent)
    try:
        yield
    finally:
        context.detach(token)


def _traceparent_of(span: Any) -> str | None:
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, trace.set_span_in_context(span))
    return carrier.get("traceparent")


def enqueuing(requests: list[Any]) -> AbstractContextManager[list[Any]]:
    """A producer span for each request (a chit.JobRequest: typed loosely, as
    chit.queue imports this module), open while the block stores them; the
    requests given back carry their span's traceparent. An error raised in the
    block is recorded on every span. Not tracing, the requests as they are (no
    generator made and run: an enqueue's every microsecond counts)."""
    if not enabled():
        return nullcontext(requests)
    return _producer_spans(requests)


@contextmanager
def _producer_spans(requests: list[Any]) -> Iterator[list[Any]]:
    from opentelemetry import trace

    tracer = trace.get_tracer(TRACER)
    spans, traced = [], []
    for request in requests:
        span = tracer.start_span(
            f"chit.enqueue {request.kind}",
            context=_context_of(valid_traceparent(request.traceparent)),
            kind=trace.SpanKind.PRODUCER,
            attributes={
                "messaging.system": "chit",
                "messaging.operation.type": "send",
                "chit.job.kind": request.kind,
                "chit.tenant": request.tenant,
                **({"chit.queue": request.queue} if request.queue else {}),
            },
        )
        spans.append(span)
        traced.append(replace(request, traceparent=_traceparent_of(span)))
    try:
        yield traced
    except BaseException as e:
        for span in spans:
            _record_error(span, e, _headline(e))
        raise
    finally:
        for span in spans:
            span.end()


def start_run(job: ClaimedJob, worker: str | None) -> Any:
    """The consumer span of one attempt (not current: `activated` makes it so
    where the handler runs), or None when not tracing."""
    if not enabled():
        return None
    from opentelemetry import trace
    from opentelemetry.context import Context

    producer = _context_of(valid_traceparent(job.traceparent))
    links: list[Any] = []
    parent: Context | None = None
    if producer is not None:
        if job.attempt <= 1:
            parent = producer
        else:  # a retry: its own trace, linked to the one that enqueued the job
            links = [trace.Link(trace.get_current_span(producer).get_span_context())]
            parent = Context()
    else:
        parent = Context()
    attributes: dict[str, Any] = {
        "messaging.system": "chit",
        "messaging.operation.type": "process",
        "chit.job.id": job.id,
        "chit.job.kind": job.kind,
        "chit.job.attempt": job.attempt,
        "chit.queue": job.queue,
        "chit.tenant": job.tenant,
    }
    if worker:
        attributes["chit.worker"] = worker
    return trace.get_tracer(TRACER).start_span(
        f"chit.run {job.kind}",
        context=parent,
        kind=trace.SpanKind.CONSUMER,
        links=links,
        attributes=attributes,
    )


def activated(span: Any) -> Any:
    """A context manager that makes `span` current (where the handler runs)."""
    if span is None:
        return nullcontext()
    from opentelemetry import trace

    # end_run records the error and the status: use_span's own would read the
    # exception's message, which may raise (and so change the job's error).
    return trace.use_span(
        span, end_on_exit=False, record_exception=False, set_status_on_exception=False
    )


def end_run(span: Any, outcome: Outcome, error: BaseException | None = None) -> None:
    """Close an attempt's span with its outcome (`chit.outcome`: succeeded,
    retrying, failed, cancelled, released) and the error, if any."""
    if span is None:
        return

    name = type(outcome).__name__.lower()
    if isinstance(outcome, Failed):
        name = "retrying" if outcome.retry_in is not None else "failed"
    span.set_attribute("chit.outcome", name)
    if isinstance(outcome, Failed):
        _record_error(span, error, outcome.error.split("\n", 1)[0])
    span.end()


def _record_error(span: Any, error: BaseException | None, headline: str) -> None:
    """The error on the span: an exception event and the ERROR status. An
    exception whose message cannot be read (its __str__ raises) is recorded by
    its headline: tracing never changes what happens to the job."""
    from opentelemetry import trace

    try:
        if error is None:
            span.add_event("exception", {"exception.message": headline})
        else:
            span.record_exception(error)
    except Exception:
        span.add_event("exception", {"exception.message": headline})
    span.set_status(trace.Status(trace.StatusCode.ERROR, headline))


def _headline(error: BaseException) -> str:
    try:
        return f"{type(error).__name__}: {error}"
    except Exception:
        return type(error).__name__
