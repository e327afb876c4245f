"""What a throttled backlog costs a claim: `store.claim` timed directly.

    .venv/bin/python bench/flow_claim.py sqlite|postgres URL_BACKLOG URL_EMPTY URL_PLAIN
        [--backlog 100000] [--claims 400] [--batch 8] [--plans FILE]

Started by run.py (`--steps flow-claim`) in chit's virtual environment, with
three fresh, empty databases of one backend. Each holds one running job of the
kind `capped`, claimed with an hour's lease, and as many queued `noop` jobs
as the claims take:

- backlog: `capped` limited to `concurrency=1`, so at its limit, with
  `--backlog` more of its jobs queued ahead of the no-op ones (enqueued first,
  same priority, and the kind sorts first);
- empty:   the same limits, no throttled job queued;

in both, `noop` has a limit too (`concurrency=100000`, never reached), so both
claims are flow claims: a queue of one kind that no limit names is claimed by
the one statement (issue 22), which would measure that against the flow claim;
- plain:   no limits at all (the claim flow control leaves as it was).

The claims take turns between the three (the order rotating), each one
`store.claim(limit=--batch)` of the queue both kinds share, timed alone; the
jobs it got are then marked done (untimed), as a worker would. Printed: the
median and p90 of each, and backlog/empty, which must stay within 1.2. Then one
claim more of the backlog database is explained: on PostgreSQL every statement
it runs, by auto_explain with ANALYZE and BUFFERS (rows and pages each one
touched); on SQLite each statement's EXPLAIN QUERY PLAN. They go to --plans; the
figures are the last line of stdout, as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import chit
from chit.jobs import Succeeded
from chit.limits import Limits
from chit.store import FullStore

QUEUE = "default"
# The limited kind: it sorts before `noop`, so a walk of the queue's kinds meets it first.
THROTTLED = "capped"
LEASE = 3600.0  # the throttled job stays running, its kind at its limit, throughout
WARMUP = 10  # claims of each database before timing: connections, caches, the limits read
CHUNK = 10_000  # jobs per enqueue_many


def build(url: str, limited: bool, backlog: int, noop_jobs: int) -> chit.Queue:
    """One database, filled as the module docstring says."""
    queue = chit.Queue(url)

    @queue.task(THROTTLED, concurrency=1 if limited else None)
    def throttled(job: chit.JobContext, body: Any) -> None: ...

    @queue.task("noop")
    def noop(job: chit.JobContext, body: Any) -> None: ...

    store = queue.store
    if limited:
        store.declare_limits({THROTTLED: Limits(concurrency=1), "noop": Limits(100_000)})
    queue.enqueue(THROTTLED, {"i": -1})
    held = store.claim("holder", [QUEUE], 1, LEASE)
    assert [j.kind for j in held] == [THROTTLED], held
    enqueue(queue, THROTTLED, backlog)
    enqueue(queue, "noop", noop_jobs)
    return queue


def enqueue(queue: chit.Queue, kind: str, n: int) -> None:
    for first in range(0, n, CHUNK):
        count = min(CHUNK, n - first)
        queue.enqueue_many([chit.JobRequest(kind, {"i": i}) for i in range(first, first + count)])


def settle(url: str) -> None:
    """PostgreSQL: every database from the same state, as the growth seed does
    (planner statistics, the visibility map, no checkpoint running through the
    timed claims). SQLite: nothing, chit never analyzes."""
    if not url.startswith("postgres"):
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE chit_jobs")
        conn.execute("VACUUM ANALYZE chit_attempts")
        conn.execute("CHECKPOINT")


def claim_once(store: FullStore, batch: int) -> tuple[float, int]:
    """Seconds one claim took and how many jobs it got; the jobs are then done."""
    started = time.perf_counter()
    jobs = store.claim("bench", [QUEUE], batch, 60.0)
    seconds = time.perf_counter() - started
    if any(j.kind != "noop" for j in jobs):
        raise SystemExit(f"a claim handed out {[j.kind for j in jobs]}: the limit did not hold")
    store.finish([Succeeded(j.id, j.lease_token) for j in jobs])
    return seconds, len(jobs)


def postgres_plans(url: str, batch: int) -> str:
    """auto_explain's plans of every statement one claim runs, on its own store
    with one pooled connection (so the notices come back on it)."""
    from chit.store.postgres import PostgresStore

    store = PostgresStore(url, pool_size=1, migrate=False)
    notices: list[str] = []
    try:
        with store._conn() as conn:  # the pool's one connection
            for setting in (
                "LOAD 'auto_explain'",
                "SET auto_explain.log_min_duration = 0",
                "SET auto_explain.log_analyze = on",
                "SET auto_explain.log_buffers = on",
                "SET auto_explain.log_timing = on",
                "SET auto_explain.log_nested_statements = on",
                "SET auto_explain.log_level = notice",
            ):
                conn.execute(setting)
            conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        claim_once(store, batch)  # the first claim of a store reads limits and pauses
        notices.clear()
        jobs = store.claim("bench", [QUEUE], batch, 60.0)
        # The queries' own comments left out: the plans are long enough.
        plans = [_without_comments(n) for n in notices]
        store.finish([Succeeded(j.id, j.lease_token) for j in jobs])
    finally:
        store.close()
    head = f"{len(plans)} statements ran by one throttled claim that got {len(jobs)} jobs"
    return head + "\n\n" + "\n\n".join(plans)


def sqlite_plans(store: FullStore, batch: int) -> str:
    """EXPLAIN QUERY PLAN of every statement one claim runs (SQLite gives no
    row counts; the plan shows which are seeks and which are scans)."""
    conn, _ = store._conn()  # type: ignore[attr-defined]  # this thread's connection, its lock
    seen: list[str] = []
    conn.set_trace_callback(seen.append)
    try:
        jobs = store.claim("bench", [QUEUE], batch, 60.0)
    finally:
        conn.set_trace_callback(None)
    store.finish([Succeeded(j.id, j.lease_token) for j in jobs])
    counts: dict[str, int] = {}
    for sql in seen:
        body = _without_comments(sql)
        if body.upper().startswith(("SELECT", "WITH", "UPDATE", "INSERT", "DELETE")):
            counts[body] = counts.get(body, 0) + 1
    out = []
    no_plan = 0
    for sql, times in counts.items():
        rows = conn.execute(f"EXPLAIN QUERY PLAN {sql}").fetchall()
        if not rows:  # INSERT ... VALUES: nothing to search
            no_plan += times
            continue
        plan = "\n".join(f"  {'  ' * _depth(rows, r)}{r[3]}" for r in rows)
        out.append(f"{_one_line(sql)}{f'  (×{times})' if times > 1 else ''}\n{plan}")
    head = (
        f"{sum(counts.values())} statements ran by one throttled claim that got {len(jobs)} "
        f"jobs; {no_plan} of them one-row INSERTs (no search), the others:"
    )
    return head + "\n\n" + "\n\n".join(out)


def _without_comments(sql: str) -> str:
    lines = [line for line in sql.strip().splitlines() if not line.lstrip().startswith("--")]
    return "\n".join(lines).strip()


def _depth(rows: list[Any], row: Any) -> int:
    parents = {r[0]: r[1] for r in rows}
    depth, parent = 0, row[1]
    while parent in parents:
        depth, parent = depth + 1, parents[parent]
    return depth


def _one_line(sql: str, width: int = 160) -> str:
    text = " ".join(sql.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def summary(seconds: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in seconds)
    return {"median_ms": statistics.median(ms), "p90_ms": ms[int(len(ms) * 0.9) - 1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("backend", choices=("sqlite", "postgres"))
    parser.add_argument("urls", nargs=3, metavar="URL", help="backlog, empty and plain databases")
    parser.add_argument("--backlog", type=int, default=100_000)
    parser.add_argument("--claims", type=int, default=400, help="timed claims of each database")
    parser.add_argument("--batch", type=int, default=8, help="jobs each claim asks for")
    parser.add_argument("--plans", help="file for the plans of one throttled claim")
    args = parser.parse_args()

    names = ("backlog", "empty", "plain")
    noop_jobs = (args.claims + WARMUP + 2) * args.batch
    started = time.perf_counter()
    queues = {
        name: build(url, name != "plain", args.backlog if name == "backlog" else 0, noop_jobs)
        for name, url in zip(names, args.urls, strict=True)
    }
    for url in args.urls:
        settle(url)
    seed_seconds = time.perf_counter() - started
    stores = {name: q.store for name, q in queues.items()}
    for _ in range(WARMUP):
        for store in stores.values():
            claim_once(store, args.batch)
    times: dict[str, list[float]] = {name: [] for name in names}
    short = 0
    for n in range(args.claims):
        order = names[n % 3 :] + names[: n % 3]
        for name in order:
            seconds, got = claim_once(stores[name], args.batch)
            times[name].append(seconds)
            short += got < args.batch
    figures: dict[str, Any] = {name: summary(times[name]) for name in names}
    figures |= {
        "backend": args.backend,
        "backlog_jobs": args.backlog,
        "claims": args.claims,
        "batch": args.batch,
        "short_claims": short,  # claims that got fewer jobs than asked: should be 0
        "seed_seconds": seed_seconds,
        "ratio": figures["backlog"]["median_ms"] / figures["empty"]["median_ms"],
        "ratio_plain": figures["backlog"]["median_ms"] / figures["plain"]["median_ms"],
    }
    if args.plans:
        if args.backend == "postgres":
            text = postgres_plans(args.urls[0], args.batch)
        else:
            text = sqlite_plans(stores["backlog"], args.batch)
        Path(args.plans).write_text(text + "\n")
    for queue in queues.values():
        queue.close()
    print(json.dumps(figures))


if __name__ == "__main__":
    sys.exit(main())
