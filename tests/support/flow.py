"""Reading back the start/end log `support.flow_app` handlers write: each run
(one attempt of a job) with its start and end by the handler's own clock, how
many runs overlapped at most, and how many started in any window of a length."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from support.jobs import lines


@dataclass(frozen=True, slots=True)
class Run:
    job_id: str
    attempt: int
    pid: int
    tag: str
    start: float
    end: float | None  # None: still running (or its worker was killed)

    def covers(self, t: float) -> bool:
        """Running at time t (started before, not yet ended)."""
        return self.start < t and (self.end is None or t < self.end)


def runs(log: Path) -> list[Run]:
    """Every run in the log, by start time."""
    started: dict[tuple[str, int], tuple[float, int, str]] = {}
    ended: dict[tuple[str, int], float] = {}
    for line in lines(log):
        event, job_id, attempt, at, pid, tag = line.split(" ", 5)
        key = (job_id, int(attempt))
        if event == "start":
            assert key not in started, f"{key} started twice:\n{line}"
            started[key] = (float(at), int(pid), tag)
        else:
            assert event == "end", line
            ended[key] = float(at)
    assert set(ended) <= set(started), "an end without a start"
    found = [
        Run(job_id, attempt, pid, tag, start, ended.get((job_id, attempt)))
        for (job_id, attempt), (start, pid, tag) in started.items()
    ]
    return sorted(found, key=lambda r: r.start)


def finished(log: Path) -> int:
    return sum(r.end is not None for r in runs(log))


def max_overlap(found: Iterable[Run]) -> int:
    """The most runs going on at one moment. An end at the very moment of a
    start counts first: one run handing its slot to the next is no overlap."""
    events: list[tuple[float, int]] = []
    for r in found:
        events.append((r.start, 1))
        if r.end is not None:
            events.append((r.end, -1))
    most = now = 0
    for _, step in sorted(events):
        now += step
        most = max(most, now)
    return most


def most_in_window(times: Sequence[float], seconds: float) -> int:
    """The most of `times` inside any half-open window [t, t + seconds)."""
    ordered = sorted(times)
    return max(
        (bisect.bisect_left(ordered, t + seconds) - i for i, t in enumerate(ordered)),
        default=0,
    )


def describe(found: Iterable[Run]) -> str:
    """The runs as lines, for a failing assertion's message."""
    return "\n".join(
        f"{r.start:.3f} -> {'...' if r.end is None else f'{r.end:.3f}'} "
        f"{r.job_id} #{r.attempt} pid {r.pid} {r.tag}"
        for r in found
    )
