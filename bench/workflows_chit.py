"""The workflows benchmark's chit app (bench/workflows.py): a no-op `leaf` and
a no-op `callback`, each recording its start and end (recorder.py).

    python bench/workflows_chit.py store SHAPE N IDS   store N jobs in one call; JSON
    python bench/workflows_chit.py hops IDS            the chain's hops, from the job rows; JSON

SHAPE is `fanin` (N leaves and one callback depending on all of them, one
`enqueue_workflow`), `plain` (the same N leaves, no dependencies, one
`enqueue_many`) or `chain` (N jobs, each depending on the one before, one
`enqueue_workflow`). Payload `i` numbers the jobs: the leaves and the chain
from 0, the callback N. IDS is a file: `store` writes the ids stored, in
order, and `hops` reads them.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import chit
from recorder import record

queue = chit.Queue()


@queue.task("leaf")
def leaf(job: chit.JobContext, body: dict) -> None:
    started = time.time()
    record(body["i"], body["t"], started)


@queue.task("callback")
def callback(job: chit.JobContext, body: dict) -> None:
    started = time.time()
    record(body["i"], body["t"], started)


def requests(shape: str, n: int, t: float) -> list[chit.JobRequest]:
    if shape == "plain":
        return [chit.JobRequest("leaf", {"i": i, "t": t}) for i in range(n)]
    if shape == "fanin":
        leaves = [chit.JobRequest("leaf", {"i": i, "t": t}, ref=f"l{i}") for i in range(n)]
        refs = [r.ref for r in leaves if r.ref]
        return [*leaves, chit.JobRequest("callback", {"i": n, "t": t}, depends_on=refs)]
    if shape == "chain":
        return [
            chit.JobRequest(
                "leaf", {"i": i, "t": t}, ref=f"c{i}", depends_on=[f"c{i - 1}"] if i else []
            )
            for i in range(n)
        ]
    raise SystemExit(f"unknown shape {shape!r}")


def store(shape: str, n: int, ids: Path) -> dict[str, float]:
    batch = requests(shape, n, time.time())
    started = time.perf_counter()
    if shape == "plain":
        stored = [e.id for e in queue.enqueue_many(batch)]
    else:
        stored = queue.enqueue_workflow(batch).ids
    seconds = time.perf_counter() - started
    ids.write_text(json.dumps(stored))
    return {"seconds": seconds, "jobs": len(batch)}


def quantile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


def hops(ids: Path) -> dict[str, float]:
    """started_at of job k+1 minus finished_at of job k, as the store recorded them
    (SQLite keeps milliseconds, PostgreSQL microseconds)."""
    jobs = [queue.get(job_id) for job_id in json.loads(ids.read_text())]
    gaps = []
    for k in range(len(jobs) - 1):
        finished, started = jobs[k].finished_at, jobs[k + 1].started_at
        assert finished is not None and started is not None
        gaps.append((started - finished).total_seconds() * 1000)
    return {
        "median_ms": statistics.median(gaps),
        "p90_ms": quantile(gaps, 0.9),
        "max_ms": max(gaps),
        "negative": sum(g < 0 for g in gaps),
    }


if __name__ == "__main__":
    if sys.argv[1] == "store":
        out = store(sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]))
    else:
        out = hops(Path(sys.argv[2]))
    queue.close()
    print(json.dumps(out))
