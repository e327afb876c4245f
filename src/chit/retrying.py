"""When a failed or cancelled job may be retried, decided once above the stores.

A store's `retry` puts a job back to `waiting` whenever its dependencies are
not met, even when one of them has ended `failed` or `cancelled` and so never
will be: the job would wait forever. Retrying such a job is refused, naming
the dependency to retry first; that dependency's own retry puts this job back
to `waiting` (the store does that for the dependents a failure cancelled), so
nothing is lost by refusing. A callback (`run_on="finished"`) counts an ended
dependency as met and is never refused for one.

Every entry point that retries (the Queue, the HTTP API, the CLI and the
dashboard) goes through `refusal`, so each store, present and future, gets the
same behaviour without a line of its own.
"""

from __future__ import annotations

from collections.abc import Sequence

from chit.jobs import DependencyInfo, Job, RunOn, State

_ENDED_UNMET = (State.FAILED, State.CANCELLED)


def blockers(job: Job, dependencies: Sequence[DependencyInfo]) -> list[DependencyInfo]:
    """The dependencies of `job` that ended without succeeding, when its
    `run_on` needs them to succeed; empty when a retry can run it."""
    if job.run_on is RunOn.FINISHED:
        return []
    return [d for d in dependencies if d.state in _ENDED_UNMET]


def unmet(job: Job, dependencies: Sequence[DependencyInfo]) -> list[DependencyInfo]:
    """The dependencies a `waiting` job still waits on: those not succeeded
    (not ended, for a callback)."""
    if job.run_on is RunOn.FINISHED:
        return [d for d in dependencies if not d.state.terminal]
    return [d for d in dependencies if d.state is not State.SUCCEEDED]


def refusal(job: Job, dependencies: Sequence[DependencyInfo]) -> str | None:
    """Why retrying `job` is refused, or None when it may be retried."""
    found = blockers(job, dependencies)
    if not found:
        return None
    named = ", ".join(f"{d.id} ({d.kind}) is {d.state.value}" for d in found[:5])
    more = f" and {len(found) - 5} more" if len(found) > 5 else ""
    first = found[0].id
    return (
        f"job {job.id} depends on jobs that will not succeed: {named}{more}; "
        f"retry {first} first (chit replay {first}): that puts job {job.id} "
        "back to waiting with it"
    )


def waiting_on(dependencies: Sequence[DependencyInfo]) -> str:
    """A waiting job's reason in words: its unmet dependencies and their states."""
    shown = ", ".join(f"{d.id} ({d.kind}, {d.state.value})" for d in dependencies[:10])
    more = f" and {len(dependencies) - 10} more" if len(dependencies) > 10 else ""
    return f"waiting on dependencies: {shown}{more}"
