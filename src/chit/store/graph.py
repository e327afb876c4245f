"""Workflows at enqueue: a batch's dependency graph checked, and each new job's
first state worked out (DESIGN.md "Workflows and steps").

Pure functions over the batch and the stored jobs it names; the store reads
those (locked) and writes what `plan` returns. Nothing here touches a database.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from chit.bounds import DEPENDENCIES_MAX, REF_MAX
from chit.errors import InvalidRequest
from chit.jobs import NewJob, RunOn, State


def is_graph(jobs: Sequence[NewJob]) -> bool:
    """Whether a batch has refs or dependencies (reads every job)."""
    return any(job.depends_on or job.ref is not None for job in jobs)


@dataclass(frozen=True, slots=True)
class Stored:
    """A stored job the batch depends on, as the store read it under its lock."""

    tenant: str
    state: State
    workflow_id: str | None


@dataclass
class Graph:
    """A batch's edges, resolved to ids."""

    ids: list[str]
    depends_on: list[list[str]]  # for each job (by position) the ids it depends on, in order
    inside: dict[str, int]  # id of a job of the batch -> its position
    stored: list[str]  # ids outside the batch, in first-use order
    dependents: dict[str, list[str]]  # id depended on -> ids of its dependents, in call order
    order: list[int] = field(default_factory=list)  # positions, each after its dependencies


def check(jobs: Sequence[NewJob], ids: Sequence[str]) -> Graph:
    """Resolve refs to ids and check the graph; InvalidRequest for a bad ref, a
    duplicate ref, a self-dependency, a cycle, an edge across tenants inside the
    batch, or more than DEPENDENCIES_MAX edges."""
    refs: dict[str, int] = {}
    for n, ref in enumerate(job.ref for job in jobs):
        if ref is None:
            continue
        if not isinstance(ref, str) or not 1 <= len(ref) <= REF_MAX or "\x00" in ref:
            raise InvalidRequest(f"job {n}: a ref must be 1 to {REF_MAX} characters, not {ref!r}")
        if ref in refs:
            raise InvalidRequest(f"duplicate ref {ref!r}: jobs {refs[ref]} and {n}")
        refs[ref] = n
    count = sum(len(job.depends_on) for job in jobs)
    if count > DEPENDENCIES_MAX:
        raise InvalidRequest(f"{count:,} dependencies in one call; at most {DEPENDENCIES_MAX:,}")
    inside = {job_id: n for n, job_id in enumerate(ids)}
    depends_on: list[list[str]] = []
    dependents: dict[str, list[str]] = {}
    for n, job in enumerate(jobs):
        targets: dict[str, None] = {}  # in order, each once
        for name in job.depends_on:
            if not isinstance(name, str) or not name:
                raise InvalidRequest(f"job {n}: depends_on holds {name!r}, not a ref or a job id")
            target = ids[refs[name]] if name in refs else name
            if target == ids[n]:
                raise InvalidRequest(f"job {n} ({_name(job, n)}) depends on itself")
            if target in inside and jobs[inside[target]].tenant != job.tenant:
                raise InvalidRequest(f"job {n} depends on a job of another tenant")
            if target not in targets:
                targets[target] = None
                dependents.setdefault(target, []).append(ids[n])
        depends_on.append(list(targets))
    stored = [t for t in dependents if t not in inside]
    edges = Graph(list(ids), depends_on, inside, stored, dependents)
    edges.order = _order(jobs, edges)
    return edges


def _order(jobs: Sequence[NewJob], graph: Graph) -> list[int]:
    """The positions in dependency order (Kahn's algorithm); InvalidRequest naming
    a cycle when there is one."""
    depends_on, inside = graph.depends_on, graph.inside
    waiting = [sum(1 for t in targets if t in inside) for targets in depends_on]
    ready = [n for n, count in enumerate(waiting) if count == 0]
    order: list[int] = []
    while ready:
        n = ready.pop()
        order.append(n)
        for m in (inside[d] for d in graph.dependents.get(graph.ids[n], ())):
            waiting[m] -= 1
            if waiting[m] == 0:
                ready.append(m)
    if len(order) < len(depends_on):
        raise InvalidRequest(f"the dependencies form a cycle: {_cycle(jobs, depends_on, inside)}")
    return order


def _cycle(jobs: Sequence[NewJob], depends_on: list[list[str]], inside: Mapping[str, int]) -> str:
    """One cycle, as refs (or positions) joined by arrows."""
    done: set[int] = set()
    for start in range(len(depends_on)):
        path: list[int] = []
        on_path: dict[int, int] = {}
        n: int | None = start
        while n is not None and n not in done:
            if n in on_path:
                loop = [*path[on_path[n] :], n]
                return " -> ".join(_name(jobs[m], m) for m in loop)
            on_path[n] = len(path)
            path.append(n)
            nxt = [inside[t] for t in depends_on[n] if t in inside]
            n = nxt[0] if nxt else None
        done.update(path)
    return "?"


def _name(job: NewJob, n: int) -> str:
    return repr(job.ref) if job.ref is not None else f"job {n}"


def plan(
    jobs: Sequence[NewJob],
    graph: Graph,
    found: Mapping[str, Stored],
    workflow_id: str,
) -> list[dict[str, Any]]:
    """Each job's first state and workflow columns, by position; InvalidRequest
    for a stored dependency that is unknown or another tenant's."""
    for n, (job, targets) in enumerate(zip(jobs, graph.depends_on, strict=True)):
        for t in targets:
            if t not in graph.inside:
                dep = found.get(t)
                if dep is None or dep.tenant != job.tenant:
                    raise InvalidRequest(
                        f"job {n} depends on {t!r}: no such job of this call or of"
                        " this tenant (a ref must name a job of the same call)"
                    )
    rows: list[dict[str, Any]] = [{} for _ in jobs]
    state: dict[str, State] = {t: dep.state for t, dep in found.items()}
    for n in graph.order:
        job, targets = jobs[n], graph.depends_on[n]
        error = None
        pending = 0
        for t in targets:
            s = state.get(t, State.WAITING)
            satisfied = s is State.SUCCEEDED or (job.run_on is RunOn.FINISHED and s.terminal)
            if not satisfied:
                pending += 1
            if (
                error is None
                and job.run_on is RunOn.SUCCEEDED
                and s in (State.FAILED, State.CANCELLED)
            ):
                error = f"dependency {t} {s.value}"
        first = State.CANCELLED if error else State.WAITING if pending else State.QUEUED
        state[graph.ids[n]] = first
        rows[n] = {
            "state": first.value,
            "error": error,
            "deps_pending": pending,
            "workflow_id": workflow_id,
            "ref": job.ref,
            "run_on": job.run_on.value,
            "depends_on": targets or None,
            "dependents": graph.dependents.get(graph.ids[n]),  # in the order of the call
        }
    return rows


def stored_dependents(graph: Graph, inserted: set[str]) -> dict[str, list[str]]:
    """For each stored job the batch depends on, the new jobs that depend on it."""
    out = {t: [d for d in graph.dependents[t] if d in inserted] for t in graph.stored}
    return {t: ids for t, ids in out.items() if ids}
