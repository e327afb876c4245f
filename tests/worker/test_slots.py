"""How many jobs a worker claims ahead of its free slots (chit.worker.slots)."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from chit.jobs import ClaimedJob, Succeeded
from chit.worker import slots as slots_module
from chit.worker.slots import PREFETCH_BELOW_SECONDS, Slots


def slots_of(concurrency: int, prefetch: int = 0, stopping: threading.Event | None = None) -> Slots:
    """Slots whose jobs start nowhere (the test holds and ends them itself)."""
    slots = Slots(
        None,  # type: ignore[arg-type]  # the contexts made here write nothing
        concurrency=concurrency,
        prefetch=prefetch,
        lease_seconds=30.0,
        stopping=stopping or threading.Event(),
    )
    slots.start = lambda job, ctx: None
    return slots


def primed(monkeypatch: pytest.MonkeyPatch, job_seconds: float, prefetch: int) -> Slots:
    """Slots of 4 whose jobs have all taken `job_seconds`, by a clock of the test's."""
    clock = [1000.0]
    monkeypatch.setattr(slots_module, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    slots = slots_of(4, prefetch)
    for n in range(3):
        free = slots.reserve()
        slots.hold([ClaimedJob(f"j{n}", "k", "default", {}, 1, 3, "t")], free)
        clock[0] += job_seconds
        slots.end(Succeeded(f"j{n}", "t"))
        batch, reserved = slots.take()
        slots.settle(batch, [], reserved, lambda recorded: None)
    return slots


@pytest.mark.parametrize(
    ("job_seconds", "ahead"),
    [
        (0.0001, 128),  # the whole prefetch: its jobs are a fraction of the bound
        (0.0021, 38),  # 4 slots x 20 ms / 2.1 ms
        (0.0051, 15),
        (0.019, 4),
        (PREFETCH_BELOW_SECONDS + 0.001, 0),  # long jobs: none ahead
        (0.5, 0),
    ],
)
def test_short_jobs_are_claimed_ahead_as_many_as_the_slots_run_in_20_ms(
    monkeypatch: pytest.MonkeyPatch, job_seconds: float, ahead: int
) -> None:
    slots = primed(monkeypatch, job_seconds, prefetch=128)
    assert slots.reserve() == 4 + ahead


def test_no_more_than_the_prefetch_is_claimed_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    assert primed(monkeypatch, 0.0001, prefetch=3).reserve() == 4 + 3
    assert primed(monkeypatch, 0.0001, prefetch=0).reserve() == 4


def test_an_idle_wait_waits_for_the_slots_a_finishers_claim_was_promised() -> None:
    slots = slots_of(2)
    slots.hold([ClaimedJob("j1", "k", "default", {}, 1, 3, "t")], slots.reserve())
    slots.end(Succeeded("j1", "t"))
    batch, promised = slots.take()  # the finisher's claim beside the outcome: every slot
    assert promised == 2 and slots.reserve() == 0
    waiting = threading.Event()

    class Noted(threading.Condition):
        def wait(self, timeout: float | None = None) -> bool:
            waiting.set()
            return super().wait(timeout)

    slots._promise_ended = Noted(slots._lock)
    got: list[int] = []
    waiter = threading.Thread(target=lambda: got.append(slots.reserve(wait=10)))
    waiter.start()
    assert waiting.wait(10)
    slots.settle(batch, [], promised, lambda recorded: None)  # it claimed nothing
    waiter.join(10)
    assert got == [2]


def test_with_no_promise_to_wait_for_a_full_worker_reserves_nothing_at_once() -> None:
    slots = slots_of(1)
    slots.hold([ClaimedJob("j1", "k", "default", {}, 1, 3, "t")], slots.reserve())
    waiter = threading.Thread(target=lambda: slots.reserve(wait=30))
    waiter.start()
    waiter.join(10)  # not the 30 s: nothing would free the slot sooner
    assert not waiter.is_alive()


def test_a_stop_ends_the_wait_for_a_finishers_promise() -> None:
    stopping = threading.Event()
    slots = slots_of(1, stopping=stopping)
    slots.hold([ClaimedJob("j1", "k", "default", {}, 1, 3, "t")], slots.reserve())
    slots.end(Succeeded("j1", "t"))
    assert slots.take()[1] == 1  # promised, and the finisher's call never ends
    got: list[int] = []
    waiter = threading.Thread(target=lambda: got.append(slots.reserve(wait=30)))
    waiter.start()
    stopping.set()
    waiter.join(10)  # not the 30 s
    assert got == [0]
