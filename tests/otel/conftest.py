"""The in-memory spans of the test process (support/otel_spans.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from support.otel_spans import memory_spans


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    yield from memory_spans()
