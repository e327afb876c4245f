"""examples/app.py, the jobs `make up` runs, run by a real worker: a report that
keeps failing is one failure group, whatever attempt each failure came from."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from chit.jobs import State
from chit.worker import Worker

EXAMPLE = Path(__file__).parents[2] / "examples" / "app.py"


@pytest.fixture
def example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    monkeypatch.setenv("CHIT_DATABASE_URL", f"sqlite:///{tmp_path / 'chit.db'}")
    monkeypatch.setenv("CHIT_BACKOFF_BASE", "0.001")
    monkeypatch.setenv("CHIT_BACKOFF_MAX", "0.002")
    spec = importlib.util.spec_from_file_location("chit_example_app", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    module.queue.close()


def test_a_report_failing_on_every_attempt_is_one_failure_group(example: ModuleType) -> None:
    queue = example.queue
    ids = [
        queue.enqueue("sales_report", {"region": r, "seconds": 0, "fail_times": f}).id
        for r, f in (("amer", 5), ("apac", 3), ("emea", 2))
    ]
    Worker(queue).run_until_idle()
    states = [queue.store.get(i).state for i in ids]
    assert states == [State.FAILED, State.FAILED, State.SUCCEEDED]
    attempts = [a.error for a in queue.store.attempts(ids[2]) if a.error]
    assert len(attempts) == 2 and len(set(attempts)) == 1  # retried errors read the same too
    [group] = queue.store.failures()
    assert (group.kind, group.count) == ("sales_report", 2)
    assert group.error == "ConnectionError: warehouse unreachable"
