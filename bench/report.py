"""docs/benchmarks.md and docs/benchmarks.png from one run's results.

    bench/.venv-peers/bin/python bench/report.py bench/results/STAMP/results.json

rewrites the docs from a saved run (run.py calls `write` at the end of a run).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from systems import INFO  # noqa: E402

Result = dict[str, Any]
STEPS = ("process1", "process2")
NOT_YET = "not yet"


class Results:
    """The best ok run of each (system, step): highest jobs/s, lowest median."""

    def __init__(self, runs: list[dict[str, Any]], meta: dict[str, Any]) -> None:
        self.meta = meta
        self.runs = runs
        self.best: dict[tuple[str, str], Result] = {}
        self.failed: dict[tuple[str, str], str] = {}
        self.capped: dict[tuple[str, str], float] = {}
        for run in runs:
            key = (run["system"], run["step"])
            if not run["ok"]:
                self.failed.setdefault(key, run["error"])
                if "jobs_per_s" in run["result"]:  # capped: the rate of what ran
                    self.capped.setdefault(key, float(run["result"]["jobs_per_s"]))
                continue
            r = run["result"]
            old = self.best.get(key)
            if old is None or _better(r, old):
                self.best[key] = r

    def get(self, system: str, step: str) -> Result | None:
        return self.best.get((system, step))

    def rate(self, system: str, step: str) -> float | None:
        r = self.get(system, step)
        return None if r is None or "jobs_per_s" not in r else float(r["jobs_per_s"])

    def rate_or_capped(self, system: str, step: str) -> tuple[float | None, bool]:
        """The rate, or the rate over what ran before the time cap (and True)."""
        rate = self.rate(system, step)
        if rate is None and (system, step) in self.capped:
            return self.capped[system, step], True
        return rate, False

    def latency(self, system: str) -> tuple[float, float] | None:
        r = self.get(system, "latency")
        return None if r is None else (float(r["median_ms"]), float(r["p99_ms"]))

    def cell(self, system: str, step: str, fmt: Callable[[Result], str]) -> str:
        if system in self.meta["notes"]:
            return NOT_YET
        r = self.get(system, step)
        if r is not None:
            return "—" if "skipped" in r else fmt(r)
        if (system, step) in self.capped:
            return f"{self.capped[system, step]:,.0f} (time cap)"
        if (system, step) in self.failed:
            return "failed"
        return ""

    def all_rates(self, system: str, step: str) -> list[float]:
        return [
            float(run["result"]["jobs_per_s"])
            for run in self.runs
            if run["system"] == system and run["step"] == step and run["ok"]
            if "jobs_per_s" in run["result"]
        ]


def _better(new: Result, old: Result) -> bool:
    if "jobs_per_s" in new:
        return float(new["jobs_per_s"]) > float(old.get("jobs_per_s", 0))
    if "median_ms" in new:
        return float(new["median_ms"]) < float(old["median_ms"])
    return False


def _rate(r: Result) -> str:
    return f"{r['jobs_per_s']:,.0f}"


def _median(r: Result) -> str:
    return f"{r['median_ms']:.1f}"


def _p99(r: Result) -> str:
    return f"{r['p99_ms']:.1f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "" if a is None or b is None or b == 0 else f"{a / b:.2f}×"


# What a plain job's life writes: a property of the code, not of a run (counted
# from the indexes' definitions and predicates; the Redis commands by INFO
# commandstats over 5,000 jobs).
WRITES = "\n".join(
    [
        "What one plain job's enqueue, claim and finish write, against 8f9a0f0 "
        "(issue 22's baseline) in brackets. A batch: the outcomes a worker records "
        "at once and the jobs it claims for the slots they free, up to "
        "`--concurrency` + `--prefetch` jobs.",
        "",
        "| store | index entries a job | statements or commands |",
        "| --- | --- | --- |",
        "| SQLite | 15 (25) | enqueue: 1 insert; claim and finish: one transaction a batch |",
        "| PostgreSQL | 13 (18): insert 3, claim 2, finish 6, attempt record 2 "
        "(closed heap-only) | enqueue: 1 statement (many jobs: one COPY); "
        "claim and finish: one statement a batch |",
        "| Redis | — | enqueue: one FCALL, 11 commands (12 before library version 23); "
        "claim and finish: one FCALL a batch, 9 commands a job (20 before library version 20) |",
        "",
        "The indexes over every job's state hold waiting and finished jobs only, and "
        "limits or pauses of other kinds leave a plain job's claim the one statement.\n",
    ]
)


def write(runs: list[dict[str, Any]], meta: dict[str, Any], docs: Path) -> tuple[Path, Path]:
    results = Results(runs, meta)
    docs.mkdir(exist_ok=True)
    md = docs / "benchmarks.md"
    png = docs / "benchmarks.png"
    md.write_text(markdown(results))
    chart(results, png)
    return md, png


def markdown(res: Results) -> str:
    meta = res.meta
    sizes = meta["sizes"]
    systems = [s for s in INFO if s in meta["systems"] or s in meta["notes"]]
    out: list[str] = []
    add = out.append
    kind = "a quick run (`--quick`: smaller counts, not for comparison)" if meta["quick"] else ""
    add("# Benchmarks: chit and its peers\n")
    add(
        f"Measured by `make bench` on {meta['date']}{', ' + kind if kind else ''}, "
        f"in {meta.get('seconds', 0) / 60:.0f} minutes. Every system ran the same no-op "
        "jobs on the same machine in one run, taking turns workload by workload. "
        "Figures are jobs per second unless marked; higher is better, except latency.\n"
    )

    add("## Results\n")
    n = sizes["jobs"]
    add(
        "| system | store | enqueue one at a time | bulk enqueue | process, 1 worker "
        "| process, 2 workers | latency median (ms) | latency p99 (ms) |"
    )
    add("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for s in systems:
        info = INFO[s]
        name = f"**{info.title}**" if s.startswith("chit") else info.title
        add(
            f"| {name} | {info.backend} "
            f"| {res.cell(s, 'enqueue', _rate)} | {res.cell(s, 'bulk', _rate)} "
            f"| {res.cell(s, 'process1', _rate)} | {res.cell(s, 'process2', _rate)} "
            f"| {res.cell(s, 'latency', _median)} | {res.cell(s, 'latency', _p99)} |"
        )
    add("")
    add(
        f"{n:,} jobs per enqueue and process figure; latency over {sizes['latency_jobs']} "
        "jobs enqueued 10 to 30 ms apart (20 on average) to one idle worker process. — : the "
        "library has no bulk enqueue call."
        + (
            f" Process and growth figures are the best of {meta['repeat']} runs."
            if meta.get("repeat", 1) > 1
            else ""
        )
    )
    for s, note in meta["notes"].items():
        add(f"{INFO[s].title} on {INFO[s].backend}: {note}.")
    add("")
    add("![jobs per second by system and store](benchmarks.png)\n")

    add("## Against the targets of issue 6\n")
    add("| target | chit | peer | ratio | met |")
    add("| --- | ---: | ---: | ---: | --- |")
    for row in targets(res):
        add("| " + " | ".join(row) + " |")
    add("")

    add("## Against the targets of issue 22 (pay only for what you use)\n")
    add("| target | chit | peer | ratio | met |")
    add("| --- | ---: | ---: | ---: | --- |")
    for row in speed_targets(res):
        add("| " + " | ".join(row) + " |")
    add(
        "\n*features-on*: `process1` while the database holds what the other features "
        "leave behind (bench/features.py), read against `process1` of the same run. "
        "*Worker CPU*: user and system CPU of the worker processes from the first "
        "job on, per job.\n"
    )
    add(WRITES)

    add("## Against the targets of issue 24 (Redis)\n")
    add("| target | chit | peer | ratio | met |")
    add("| --- | ---: | ---: | ---: | --- |")
    for row in redis_targets(res):
        add("| " + " | ".join(row) + " |")
    add(
        "\n*Best Redis peer*: the fastest of Huey-Redis, RQ, Celery and Dramatiq in the "
        "same step of this run. Every Redis system runs on the same redis-server, with "
        "the durability chit's Redis store insists on: `appendonly yes`, "
        "`appendfsync everysec`, `maxmemory-policy noeviction`.\n"
    )

    add("## Claim cost as the table grows\n")
    queued = f"{sizes['queued']:,} queued"
    grown = f"{sizes['finished']:,} finished + {queued}"
    add(
        "One worker process; the table seeded by bulk SQL with queued jobs and, in the "
        "growth runs, finished jobs (each with its attempt row); jobs/s over the first "
        f"{sizes['measure']:,} jobs processed, against the same seeded backlog with no "
        "finished jobs. The process figure above (jobs enqueued by the library into an "
        "empty table) is shown for reference. On PostgreSQL each seeded table is measured "
        "right after a `CHECKPOINT`, so no run pays for writing out its seed.\n"
    )
    add("| system | table | jobs/s | of the same backlog alone |")
    add("| --- | --- | ---: | ---: |")
    for s in systems:
        if not INFO[s].seeds or s in meta["notes"]:
            continue
        base = res.rate(s, "growth-empty")
        label = f"{INFO[s].title}, {INFO[s].backend}"
        tables = (
            ("process1", f"{n:,} queued by the library (process figure)"),
            ("growth-empty", f"{queued}, seeded"),
            ("growth", grown),
            ("growth-analyze", f"{grown}, then `ANALYZE`"),
        )
        for step, table in tables:
            rate, cap = res.rate_or_capped(s, step)
            if rate is None:
                continue
            shown = f"{rate:,.0f}" + (" (time cap)" if cap else "")
            add(f"| {label} | {table} | {shown} | {_ratio(rate, base)} |")
    add("")

    if any(run["step"].startswith("flow-") for run in res.runs) or meta.get("flow_claim"):
        add(flow_markdown(res, heading="##", standalone=False))

    if meta.get("workflows"):
        import workflows

        add("## Workflows\n")
        add("bench/workflows.py; what each figure is: docs/workflows.md.\n")
        add(workflows.markdown(meta["workflows"]))

    if any(run["step"] in ("aenqueue", "api-submit") for run in res.runs):
        add(async_markdown(res))
    if any(run["step"] == "debounce" for run in res.runs):
        add(debounce_markdown(res))
    if any(run["step"] == "output" for run in res.runs):
        add(output_markdown(res))
    if any(run["step"] == "waits" for run in res.runs):
        add(waits_markdown(res))

    lim = meta.get("limits", {})
    if lim:
        add("## The stores' own limits on this machine\n")
        add("| store | measure | per second |")
        add("| --- | --- | ---: |")
        add(
            "| SQLite, WAL, synchronous=NORMAL | one-row UPDATE, autocommit "
            f"| {lim['sqlite_normal']:,.0f} |"
        )
        add(
            f"| SQLite, WAL, synchronous=FULL | one-row UPDATE, autocommit "
            f"| {lim['sqlite_full']:,.0f} |"
        )
        add(f"| PostgreSQL, 1 client | pgbench, one-row UPDATE | {lim['pgbench_1']:,.0f} |")
        add(f"| PostgreSQL, 2 clients | pgbench, one-row UPDATE | {lim['pgbench_2']:,.0f} |")
        add("")
        add(
            "Processing with one worker as a share of its store's one-row commit rate "
            "(over 100 %: more than one job per commit, by batching):\n"
        )
        for s in systems:
            rate = res.rate(s, "process1")
            if rate is None or INFO[s].backend == "Redis":
                continue
            full = "FULL" in res.get(s, "process1").get("settings", "")  # type: ignore[union-attr]
            if INFO[s].backend == "SQLite":
                limit = lim["sqlite_full"] if full else lim["sqlite_normal"]
                which = "FULL" if full else "NORMAL"
                add(f"- {INFO[s].title} ({INFO[s].backend}): {rate / limit:.0%} of {which}")
            else:
                share = rate / lim["pgbench_1"]
                add(f"- {INFO[s].title} ({INFO[s].backend}): {share:.0%} of pgbench with 1 client")
        add("")

    add("## How each system ran\n")
    add("| system | store | workers | worker CPU per job, 1 / 2 workers (µs) |")
    add("| --- | --- | --- | ---: |")
    for s in systems:
        if s in meta["notes"]:
            continue
        r = res.get(s, "process1") or res.get(s, "enqueue") or {}
        cpus = [(res.get(s, step) or {}).get("worker_cpu_us_per_job") for step in STEPS]
        cpu = " / ".join(f"{c:.0f}" for c in cpus if c is not None)
        add(f"| {INFO[s].title} | {INFO[s].backend} | {r.get('settings', '')} | {cpu} |")
    add("")
    add(
        "A *worker process* is what the process columns count: chit, Huey, Procrastinate and "
        "PgQueuer start one OS process per worker; RQ's worker-pool, Celery and Dramatiq "
        "add a supervising parent. Every handler is the same: `time.time()`, then "
        "an append to a per-process list written to a file every 50 ms. Worker CPU is "
        "the user and system time of every process the run started, from the first job "
        "to the last, per job; the server's own CPU (PostgreSQL, Redis) is not in it.\n"
    )

    add("## Versions and machine\n")
    m = meta["machine"]
    chit = meta["chit"]
    add("| | |")
    add("| --- | --- |")
    add(f"| machine | {m['cpu']}, {m['cores']} cores, {m['memory']}, Linux {m['kernel']} |")
    add(f"| chit | {chit['versions'].get('chit', '?')} at {chit['tree']} |")
    add(f"| Python | {meta['python']} |")
    add(f"| SQLite | {meta['sqlite']} |")
    pg = meta.get("postgres_settings", {})
    pg_settings = ", ".join(f"{k}={v}" for k, v in pg.items())
    add(f"| PostgreSQL | {meta['postgres']} ({pg_settings}) |")
    add(
        f'| redis-server | {meta["redis"]} (`--save "" --appendonly yes --appendfsync everysec '
        "--maxmemory-policy noeviction`, every Redis system) |"
    )
    add(f"| psycopg (chit) | {chit['versions'].get('psycopg', '?')} |")
    for name, version in meta["peers"].items():
        add(f"| {name} | {version} |")
    add(f"| load average before / after | {_load(meta['load_before'])} / "
        f"{_load(meta.get('load_after'))} |")  # fmt: skip
    add("")

    add("## Method\n")
    add(
        "- **Enqueue**: the library's call for one job, in a loop, from one process; "
        "bulk: its call for many jobs in one go (chit `enqueue_many`, RQ `enqueue_many`, "
        "Procrastinate `batch_defer`, PgQueuer `enqueue` with lists).\n"
        "- **Process**: the jobs are queued first, then the worker processes start; "
        "jobs/s is the count over the span from the first handler start to the last "
        "handler end, by the handlers' own `time.time()`. Then the run is checked: every "
        "job ran exactly once (by job number), nothing is left waiting in the store, "
        "and where the store keeps finished jobs (chit, RQ, Procrastinate, PgQueuer) it "
        "counts them all.\n"
        "- **Latency**: from `time.time()` just before the enqueue call to the "
        "handler's first line, with one worker process that has been idle for 2 s "
        "after a warm-up.\n"
        "- **Growth**: see above; rows seeded in one transaction by SQL, not through "
        "the library.\n"
        "- Each run gets a fresh store: a new SQLite file (same disk as the project), "
        "a new PostgreSQL database, or a flushed redis-server started by the bench "
        "(an append-only file, fsync every second, for every Redis system). "
        "Before each run the bench waits (up to 3 s) for other processes to leave the "
        "machine idle; the machine may be shared, so compare figures from one run only.\n"
        "- Every run has a time cap; a run that misses it is reported as failed.\n"
    )
    if meta.get("repeat", 1) > 1:
        add("Every run of the process and growth steps, jobs/s (the tables show the best):\n")
        add("| system | 1 worker | 2 workers | seeded backlog alone | with finished jobs |")
        add("| --- | --- | --- | --- | --- |")
        for s in systems:
            rates = [
                ", ".join(f"{x:,.0f}" for x in res.all_rates(s, step))
                for step in ("process1", "process2", "growth-empty", "growth")
            ]
            if any(rates):
                add(f"| {INFO[s].title} · {INFO[s].backend} | {' | '.join(rates)} |")
        add("")
    busy = [r for r in res.runs if r.get("busy_before", 0) > 0.25]
    if busy:
        add(
            f"{len(busy)} of {len(res.runs)} runs started while other processes kept the "
            "machine more than 25 % busy: "
            + ", ".join(f"{r['system']} {r['step']} ({r['busy_before']:.0%})" for r in busy)
            + ".\n"
        )
    failed = [r for r in res.runs if not r["ok"]]
    if failed:
        add("Failed runs: " + "; ".join(f"{r['system']} {r['step']}: {r['error']}" for r in failed))
        add("")
    return "\n".join(out)


# Issue 12's flow-control targets.
CLAIM_RATIO_MAX = 1.2
RATE_TOLERANCE = 0.05
BEFORE_FLOW_CONTROL = "db9aeaa"  # 80663f9~1, the commit before flow control


FLOW_HEADING = "Flow control (issue 12)"


def flow_markdown(res: Results, heading: str = "#", standalone: bool = True) -> str:
    """The flow-control section: part of docs/benchmarks.md, or from a run of
    the flow steps alone (`standalone`: then with its own date and versions)."""
    meta = res.meta
    out: list[str] = []
    add = out.append
    add(f"{heading} {FLOW_HEADING}\n")
    if standalone:
        add(f"Measured by `bench/run.py --steps flow` on {meta['date']}, chit "
            f"{meta['chit']['tree']}, in {meta.get('seconds', 0):.0f} s.\n")  # fmt: skip
    sizes = meta["sizes"]
    add(
        "Run alone with `make bench BENCH_ARGS=--steps=flow` (a minute or two): "
        f"{sizes.get('flow_jobs', 0):,} jobs of a kind with `concurrency=8` over 2 worker "
        "processes against PgQueuer's `concurrency_limit=8` (the handler and the workers of "
        "*process, 2 workers*; PgQueuer enforces its limit across workers in its dequeue "
        "statement, as chit does in its claim); "
        f'{sizes.get("rate_jobs", 0):,} jobs of a kind with `rate="1000/s"` over 2 workers, '
        "read from the attempts' start times in `chit_attempts` (the rate held: 1,000 "
        "over the mean time from a start to the 1,000th start after it, after the first "
        "1,000 starts; and the most starts in any 1 s window); and "
        "`store.claim` timed directly behind a backlog of throttled jobs "
        "(`bench/flow_claim.py`).\n"
    )
    add(
        "PgQueuer under a limit: a job's slot frees when its worker's completion buffer "
        "is flushed (every 0.1 s, or at 10 completions, its batch size), and a worker that "
        "found its entrypoint at the limit polls again after 0.1 s "
        "(`min_dequeue_poll_interval`); these are its defaults and are not settings of "
        "`run`. chit frees a slot in the transaction that records the outcome, and the "
        "same call claims the next job.\n"
    )
    rows: list[list[str]] = []
    chit, _ = res.rate_or_capped("chit-postgres", "flow-concurrency")
    pgq, _ = res.rate_or_capped("pgqueuer", "flow-concurrency")
    if chit is not None or pgq is not None:
        rows.append([
            "PostgreSQL: `concurrency=8`, 2 workers, at least PgQueuer's `concurrency_limit=8` "
            "(jobs/s)",
            _fmt(chit), _fmt(pgq), _ratio(chit, pgq),
            _met(chit is not None and pgq is not None and chit >= pgq),
        ])  # fmt: skip
        overlap = [(res.get(s, "flow-concurrency") or {}).get("most_overlapping")
                   for s in ("chit-postgres", "pgqueuer")]  # fmt: skip
        rows.append([
            "the most handlers running at once (at most 8)",
            *(_fmt(x) for x in overlap), "",
            _met(all(x is not None and x <= 8 for x in overlap)),
        ])  # fmt: skip
    rate = res.get("chit-postgres", "flow-rate")
    if rate is not None and "mean_rate" in rate:
        limit = rate["limit"]
        mean_ok = abs(rate["mean_rate"] - limit) <= RATE_TOLERANCE * limit
        rows.append([
            f'PostgreSQL: `rate="{rate["kind_rate"]}"`, 2 workers: mean starts/s over '
            f"{rate['steady_seconds']:.0f} s, within 5 % of {limit:,}",
            f"{rate['mean_rate']:,.1f}", f"{limit:,}", _ratio(rate["mean_rate"], limit),
            _met(mean_ok),
        ])  # fmt: skip
        rows.append([
            f"the most attempts started in any 1 s window, at most {limit:,} "
            f"(by the handlers' clocks: {rate['worst_window_handlers']:,})",
            f"{rate['worst_window']:,}", f"{limit:,}", "", _met(rate["worst_window"] <= limit),
        ])  # fmt: skip
    elif ("chit-postgres", "flow-rate") in res.failed:
        rows.append(["PostgreSQL: rate, 2 workers", "failed", "", "", "no"])
    claims = meta.get("flow_claim", {})
    for backend, c in claims.items():
        if "error" in c:
            rows.append([f"{backend}: a claim behind a throttled backlog", "failed", "", "", "no"])
            continue
        rows.append([
            f"{backend}: a claim behind {c['backlog_jobs']:,} throttled jobs, within 20 % of "
            "one on an empty backlog (median ms)",
            f"{c['backlog']['median_ms']:.2f}", f"{c['empty']['median_ms']:.2f}",
            f"{c['ratio']:.2f}×", _met(c["ratio"] <= CLAIM_RATIO_MAX and not c["short_claims"]),
        ])  # fmt: skip
    if rows:
        add("| target | chit | against | ratio | met |")
        add("| --- | ---: | ---: | ---: | --- |")
        for row in rows:
            add("| " + " | ".join(row) + " |")
        add("")
    if claims:
        add(
            "The claim: three fresh databases, each with one running job of a kind "
            "`capped` (an hour's lease) and the no-op jobs the claims take. *backlog*: "
            "`capped` limited to `concurrency=1`, so at its limit, with its queued jobs "
            "ahead of the no-op ones in the same queue; *empty*: the same limits, none of "
            "them queued (in both, the no-op kind has a limit it never reaches, so both "
            "claims are flow claims: since issue 22 a queue of one kind no limit names is "
            "claimed by the one statement); *plain*: no limits declared at all, the claim "
            "as it was before flow control. The claims take turns between the databases, "
            "each asking for "
            "8 jobs and timed alone; the jobs it got are then marked done. Times are "
            "the median (p90) of the claims of each:\n"
        )
        add("| store | backlog | empty | plain | claims each | backlog / empty | backlog / plain |")
        add("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for backend, c in claims.items():
            if "error" in c:
                add(f"| {backend} | failed: {c['error']} | | | | | |")
                continue
            cells = [f"{c[n]['median_ms']:.2f} ({c[n]['p90_ms']:.2f})"
                     for n in ("backlog", "empty", "plain")]  # fmt: skip
            add(f"| {backend} | {' | '.join(cells)} | {c['claims']} | {c['ratio']:.2f}× "
                f"| {c['ratio_plain']:.2f}× |")  # fmt: skip
        add("")
        add(
            "What one claim of the backlog database runs: on PostgreSQL each statement's plan "
            "by `auto_explain` (ANALYZE, BUFFERS: the rows and pages it touched), on SQLite "
            "each statement's `EXPLAIN QUERY PLAN`. The throttled kind is passed over by "
            "one index probe; its backlog is not read.\n"
        )
        for backend, c in claims.items():
            if c.get("plans"):
                add(f"<details><summary>{backend}: the plans of one throttled claim</summary>\n")
                add("```text")
                add(c["plans"].rstrip())
                add("```\n")
                add("</details>\n")
    add(
        "Unlimited kinds lose nothing: the enqueue, process and latency steps run a kind "
        "with no limit. Against the commit before flow control, in one run taking turns:\n"
    )
    add("```sh")
    add(f"make bench BENCH_ARGS='--baseline {BEFORE_FLOW_CONTROL} --systems chit-sqlite,"
        "chit-postgres --steps enqueue,bulk,process1,process2,latency --repeat 3'")  # fmt: skip
    add("```\n")
    add(
        "prints a before/after table (`before-after.md` in the results folder). The flow "
        "steps run a baseline only where it has flow control; this one has none.\n"
    )
    busy = [f"{r['system']} {r['step']} ({r['busy_before']:.0%})" for r in res.runs
            if r["step"].startswith("flow-") and r.get("busy_before", 0) > 0.25]  # fmt: skip
    busy += [f"flow-claim on {b} ({c['busy_before']:.0%})" for b, c in claims.items()
             if c.get("busy_before", 0) > 0.25]  # fmt: skip
    if busy:
        add(
            "Started while other processes kept the machine more than 25 % busy: "
            + ", ".join(busy)
            + ".\n"
        )
    if standalone:
        chit_meta = meta["chit"]
        add(
            f"Versions: chit {chit_meta['versions'].get('chit', '?')} at {chit_meta['tree']}; "
            f"PostgreSQL {meta['postgres']}; SQLite {meta['sqlite']}; "
            f"pgqueuer {meta['peers'].get('pgqueuer', '-')}; Python {meta['python']}; "
            f"{meta['machine']['cores']} cores.\n"
        )
    return "\n".join(out)


def async_markdown(res: Results) -> str:
    """Issue 15's steps on each backend: aenqueue against the sync enqueue, one
    at a time from one event loop, and `chit serve`'s POST /jobs rate."""
    out = [
        "## Async enqueue (issue 15)\n",
        "One at a time from one event loop (bench/aenqueue_bench.py), and POST /jobs "
        "against one `chit serve` from 16 keep-alive connections (bench/api_bench.py); "
        "jobs/s, the best of each step's runs.\n",
        "| store | aenqueue | enqueue (sync) | POST /jobs | POST /jobs p50 / p99 (ms) |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for s in ("chit-sqlite", "chit-postgres", "chit-redis"):
        aenqueue, api = res.get(s, "aenqueue"), res.get(s, "api-submit")
        if aenqueue is None and api is None:
            continue
        sync = f"{aenqueue['sync_jobs_per_s']:,.0f}" if aenqueue else ""
        p99 = f"{api['p50_ms']:.1f} / {api['p99_ms']:.1f}" if api else ""
        out.append(
            f"| {INFO[s].backend} | {res.cell(s, 'aenqueue', _rate)} | {sync} "
            f"| {res.cell(s, 'api-submit', _rate)} | {p99} |"
        )
    return "\n".join(out) + "\n"


def debounce_markdown(res: Results) -> str:
    """Issue 26's step: a debounced enqueue against a plain one, one at a time."""
    out = [
        "## Debounce (issue 26)\n",
        "One at a time (bench/debounce_bench.py): a plain enqueue; a debounced one whose "
        "key is new (a job stored with its key); one whose key's job is still waiting (its "
        "payload and start replaced). Jobs/s, the best of the step's runs, and the ratio "
        "to plain.\n",
        "| store | plain | debounced, new key | debounced into a waiting job |",
        "| --- | ---: | ---: | ---: |",
    ]
    for s in ("chit-sqlite", "chit-postgres", "chit-redis"):
        best = res.get(s, "debounce")
        if best is None:
            continue
        plain = best["jobs_per_s"]
        new, same = best["new_key_per_s"], best["same_key_per_s"]
        out.append(
            f"| {INFO[s].backend} | {plain:,.0f} | {new:,.0f} ({new / plain:.2f}x) "
            f"| {same:,.0f} ({same / plain:.2f}x) |"
        )
    return "\n".join(out) + "\n"


def output_markdown(res: Results) -> str:
    """Issue 25's step: how long an emitted value takes to reach an SSE client."""
    out = [
        "## Streaming output (issue 25)\n",
        "bench/output_bench.py: one `chit serve` and one `chit worker`; a job emits 300 "
        "values 10 ms apart; the time from `emit` to the `output` event at a client of "
        "`GET /jobs/{id}/events` (the best run's).\n",
        "| store | median | p90 | p99 | max |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for s in ("chit-sqlite", "chit-postgres", "chit-redis"):
        best = res.get(s, "output")
        if best is not None and "median_ms" in best:
            out.append(
                f"| {INFO[s].backend} | {best['median_ms']:.1f} ms | {best['p90_ms']:.1f} ms "
                f"| {best['p99_ms']:.1f} ms | {best['max_ms']:.1f} ms |"
            )
    return "\n".join(out) + "\n"


def waits_markdown(res: Results) -> str:
    """Issue 25's step: signal-to-resume, and process1 beside 10,000 waiting jobs."""
    out = [
        "## Waits and signals (issue 25)\n",
        "bench/waits_bench.py, one real `chit worker`: the time from `queue.signal` to the "
        "handler's wait returning, one signal at a time (targets: SQLite under 50 ms, "
        "PostgreSQL under 100 ms); plain jobs/s through the worker without and beside "
        "10,000 jobs waiting for signals in its queue (target: within 10 %).\n",
        "| store | signal to resume, median | p90 | process1 | beside 10,000 waiting |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for s in ("chit-sqlite", "chit-postgres", "chit-redis"):
        best = res.get(s, "waits")
        if best is None:
            continue
        out.append(
            f"| {INFO[s].backend} | {best['median_ms']:.1f} ms | {best['p90_ms']:.1f} ms "
            f"| {best['jobs_per_s']:,.0f} | {best['with_waiting_per_s']:,.0f} "
            f"({best['ratio']:.2f}x) |"
        )
    return "\n".join(out) + "\n"


def splice_flow(md: Path, section: str) -> None:
    """Put a flow-control section (from a run of the flow steps alone) into
    docs/benchmarks.md in place of the one there, or before the stores' limits."""
    text = md.read_text() if md.exists() else ""
    head = f"## {FLOW_HEADING}\n"
    section = section.rstrip() + "\n\n"
    if head in text:
        start = text.index(head)
        end = text.find("\n## ", start + len(head))
        text = text[:start] + section + (text[end + 1 :] if end >= 0 else "")
    else:
        anchor = next((a for a in ("## The stores' own limits", "## How each system ran")
                       if a in text), None)  # fmt: skip
        at = text.index(anchor) if anchor else len(text)
        text = text[:at] + section + text[at:]
    md.write_text(text)


def targets(res: Results) -> list[list[str]]:
    rows: list[list[str]] = []

    def row(label: str, ours: float | None, theirs: float | None, need: float, fmt: str) -> None:
        if ours is None or theirs is None:
            rows.append([label, _fmt(ours, fmt), _fmt(theirs, fmt), "", NOT_YET])
            return
        ratio = ours / theirs if theirs else 0.0
        rows.append(
            [label, _fmt(ours, fmt), _fmt(theirs, fmt), f"{ratio:.2f}×", _met(ratio >= need)]
        )

    row(
        "SQLite: process, 1 worker, at least 2× Huey-SQLite",
        res.rate("chit-sqlite", "process1"),
        res.rate("huey-sqlite", "process1"),
        2.0,
        ",.0f",
    )
    row(
        "SQLite: process, 2 workers, at least 2× Huey-SQLite",
        res.rate("chit-sqlite", "process2"),
        res.rate("huey-sqlite", "process2"),
        2.0,
        ",.0f",
    )
    lat = res.latency("chit-sqlite")
    huey_lat = res.latency("huey-sqlite")
    rows.append(
        [
            "SQLite: median enqueue-to-start under 5 ms (ms)",
            _fmt(lat[0] if lat else None, ".1f"),
            _fmt(huey_lat[0] if huey_lat else None, ".1f"),
            "",
            _met(lat is not None and lat[0] < 5.0) if lat else NOT_YET,
        ]
    )
    row(
        "SQLite: enqueue one at a time, at least Huey's",
        res.rate("chit-sqlite", "enqueue"),
        res.rate("huey-sqlite", "enqueue"),
        1.0,
        ",.0f",
    )
    for step, what in (("process1", "1 worker"), ("process2", "2 workers")):
        row(
            f"PostgreSQL: process, {what}, at least PgQueuer's",
            res.rate("chit-postgres", step),
            res.rate("pgqueuer", step),
            1.0,
            ",.0f",
        )
    pg_lat = res.latency("chit-postgres")
    pgq_lat = res.latency("pgqueuer")
    if pg_lat and pgq_lat:
        rows.append(
            [
                "PostgreSQL: median latency at most PgQueuer's (ms)",
                f"{pg_lat[0]:.1f}",
                f"{pgq_lat[0]:.1f}",
                f"{pg_lat[0] / pgq_lat[0]:.2f}×",
                _met(pg_lat[0] <= pgq_lat[0]),
            ]
        )
    else:
        rows.append(
            [
                "PostgreSQL: median latency at most PgQueuer's (ms)",
                "",
                _fmt(pgq_lat[0] if pgq_lat else None, ".1f"),
                "",
                NOT_YET,
            ]
        )
    row(
        "PostgreSQL: bulk enqueue, at least PgQueuer's",
        res.rate("chit-postgres", "bulk"),
        res.rate("pgqueuer", "bulk"),
        1.0,
        ",.0f",
    )
    finished = res.meta["sizes"]["finished"]
    for s in ("chit-sqlite", "chit-postgres"):
        grown, cap = res.rate_or_capped(s, "growth")
        base = res.rate(s, "growth-empty")
        label = f"{INFO[s].backend}: process with {finished:,} finished jobs, within 10 % of none"
        if grown is None or base is None:
            rows.append([label, "", "", "", NOT_YET])
        else:
            ratio = grown / base
            ours = f"{grown:,.0f}" + (" (time cap)" if cap else "")
            shown = [ours, f"{base:,.0f} (none)", f"{ratio:.2f}×"]
            rows.append([label, *shown, _met(ratio >= 0.9)])
    return rows


def speed_targets(res: Results) -> list[list[str]]:
    """Issue 22's: the process and enqueue ratios, worker CPU, latency, features-on."""
    rows: list[list[str]] = []

    def row(
        label: str, ours: float | None, theirs: float | None, ok: Callable[[float], bool]
    ) -> None:
        if ours is None or theirs is None:
            rows.append([label, _fmt(ours), _fmt(theirs), "", NOT_YET])
            return
        ratio = ours / theirs if theirs else 0.0
        rows.append([label, _fmt(ours), _fmt(theirs), f"{ratio:.2f}×", _met(ok(ratio))])

    pairs = (
        ("SQLite", "chit-sqlite", "huey-sqlite", 3.0),
        ("PostgreSQL", "chit-postgres", "pgqueuer", 1.5),
    )
    for store, ours, peer, need in pairs:
        for step, what in (("process1", "1 worker"), ("process2", "2 workers")):
            label = f"{store}: process, {what}, at least {need:g}× {INFO[peer].title}"
            row(label, res.rate(ours, step), res.rate(peer, step), lambda r, n=need: r >= n)
    row(
        "SQLite: enqueue one at a time, at least 1.3× Huey",
        res.rate("chit-sqlite", "enqueue"),
        res.rate("huey-sqlite", "enqueue"),
        lambda r: r >= 1.3,
    )
    row(
        "PostgreSQL: enqueue one at a time, at least PgQueuer's",
        res.rate("chit-postgres", "enqueue"),
        res.rate("pgqueuer", "enqueue"),
        lambda r: r >= 1.0,
    )
    row(
        "PostgreSQL: bulk enqueue, at least 1.2× PgQueuer",
        res.rate("chit-postgres", "bulk"),
        res.rate("pgqueuer", "bulk"),
        lambda r: r >= 1.2,
    )
    for store, ours, peer, most in (
        ("SQLite", "chit-sqlite", "huey-sqlite", 80.0),
        ("PostgreSQL", "chit-postgres", "pgqueuer", 60.0),
    ):
        cpu = [(res.get(s, "process1") or {}).get("worker_cpu_us_per_job") for s in (ours, peer)]
        label = f"{store}: worker CPU per no-op job, at most {most:.0f} µs (µs)"
        if cpu[0] is None:
            rows.append([label, "", _fmt(cpu[1]), "", NOT_YET])
        else:
            rows.append([label, _fmt(cpu[0]), _fmt(cpu[1]), "", _met(cpu[0] <= most)])
    for store, ours, peer, ok in (
        ("SQLite", "chit-sqlite", "huey-sqlite", lambda ms, _: ms < 1.5),
        ("PostgreSQL", "chit-postgres", "pgqueuer", lambda ms, theirs: ms <= theirs),
    ):
        lat, peer_lat = res.latency(ours), res.latency(peer)
        label = f"{store}: median enqueue-to-start latency (ms), " + (
            "under 1.5 ms" if store == "SQLite" else "at most PgQueuer's"
        )
        if lat is None or peer_lat is None:
            rows.append([label, "", "", "", NOT_YET])
        else:
            shown = [f"{lat[0]:.1f}", f"{peer_lat[0]:.1f}", f"{lat[0] / peer_lat[0]:.2f}×"]
            rows.append([label, *shown, _met(ok(lat[0], peer_lat[0]))])
    for s in ("chit-sqlite", "chit-postgres"):
        on, plain = res.rate(s, "features-on"), res.rate(s, "process1")
        label = f"{INFO[s].backend}: features-on within 10 % of process1"
        if on is None or plain is None:
            rows.append([label, "", "", "", NOT_YET])
        else:
            ratio = on / plain
            shown = [_fmt(on), f"{plain:,.0f} (process1)", f"{ratio:.2f}×"]
            rows.append([label, *shown, _met(ratio >= 0.9)])
    return rows


REDIS_PEERS = ("huey-redis", "rq", "celery", "dramatiq")


def redis_targets(res: Results) -> list[list[str]]:
    """Issue 24's: chit-redis against the best Redis peer of the same run."""
    rows: list[list[str]] = []

    def best_peer(step: str) -> tuple[float | None, str]:
        rated = [(r, s) for s in REDIS_PEERS if (r := res.rate(s, step)) is not None]
        if not rated:
            return None, ""
        rate, system = max(rated)
        return rate, INFO[system].title

    for step, what, need in (
        ("process1", "process, 1 worker", 2.0),
        ("process2", "process, 2 workers", 2.0),
        ("enqueue", "enqueue one at a time", 1.0),
    ):
        ours, (theirs, peer) = res.rate("chit-redis", step), best_peer(step)
        at_least = f"{need:g}× the best Redis peer" if need != 1 else "the best Redis peer's"
        label = f"Redis: {what}, at least {at_least}"
        if ours is None or theirs is None:
            rows.append([label, _fmt(ours), _fmt(theirs), "", NOT_YET])
        else:
            shown = [_fmt(ours), f"{theirs:,.0f} ({peer})", f"{ours / theirs:.2f}×"]
            rows.append([label, *shown, _met(ours / theirs >= need)])
    lat, huey = res.latency("chit-redis"), res.latency("huey-redis")
    label = "Redis: median enqueue-to-start latency at most Huey-Redis's (ms)"
    if lat is None or huey is None:
        rows.append([label, "", "", "", NOT_YET])
    else:
        shown = [f"{lat[0]:.1f}", f"{huey[0]:.1f}", f"{lat[0] / huey[0]:.2f}×"]
        rows.append([label, *shown, _met(lat[0] <= huey[0])])
    for step in STEPS:
        cpu = (res.get("chit-redis", step) or {}).get("worker_cpu_us_per_job")
        workers = "1 worker" if step == "process1" else "2 workers"
        label = f"Redis: worker CPU per no-op job, {workers}, at most 80 µs (µs)"
        rows.append([label, _fmt(cpu), "", "", NOT_YET if cpu is None else _met(cpu <= 80.0)])
    on, plain = res.rate("chit-redis", "features-on"), res.rate("chit-redis", "process1")
    if on is not None and plain is not None:
        shown = [_fmt(on), f"{plain:,.0f} (process1)", f"{on / plain:.2f}×"]
        rows.append(["Redis: features-on within 10 % of process1", *shown, _met(on >= 0.9 * plain)])
    return rows


def _met(ok: bool) -> str:
    return "yes" if ok else "**no**"


def _fmt(value: float | None, fmt: str = ",.0f") -> str:
    return "" if value is None else format(value, fmt)


def _load(value: Any) -> str:
    return "" if not value else " ".join(f"{x:.1f}" for x in value)


def chart(res: Results, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    meta = res.meta
    systems = [s for s in INFO if s in meta["systems"] or s in meta["notes"]]
    labels = [f"{INFO[s].title} · {INFO[s].backend}" for s in systems]
    colours = {"SQLite": "#4c72b0", "PostgreSQL": "#55a868", "Redis": "#c44e52"}
    panels = (
        ("Processing no-op jobs", (("process1", "1 worker", ""), ("process2", "2 workers", "//"))),
        ("Enqueueing", (("enqueue", "one at a time", ""), ("bulk", "bulk call", "//"))),
    )
    fig, axes = plt.subplots(1, 2, figsize=(14, 0.55 * len(systems) + 1.8), sharey=True)
    height = 0.4
    for ax, (title, series) in zip(axes, panels, strict=True):
        top = max((res.rate(s, step) or 0) for s in systems for step, _, _ in series) or 1
        for k, (step, _, hatch) in enumerate(series):
            for y, s in enumerate(systems):
                pos = y + (k - 0.5) * height
                rate = res.rate(s, step)
                if rate is None:
                    text = "no bulk call" if step == "bulk" else ""
                    text = NOT_YET if s in meta["notes"] else text
                    ax.text(top * 0.01, pos, text, va="center", fontsize=7, color="grey")
                    continue
                ax.barh(pos, rate, height, color=colours[INFO[s].backend], hatch=hatch,
                        edgecolor="white", alpha=1.0 if s.startswith("chit") else 0.7)  # fmt: skip
                ax.text(rate + top * 0.01, pos, f"{rate:,.0f}", va="center", fontsize=7)
        ax.set_yticks(range(len(systems)), labels, fontsize=9)
        ax.set_xlabel("jobs/s")
        ax.set_xlim(0, top * 1.15)
        ax.set_title(title)
        ax.grid(axis="x", alpha=0.3)
        handles = [Patch(facecolor="grey", hatch=h, edgecolor="white", label=n)
                   for _, n, h in series]  # fmt: skip
        ax.legend(handles=handles, fontsize=8, loc="best")
    axes[0].invert_yaxis()  # shared: the first system on top in both panels
    fig.suptitle(
        f"chit and its peers: no-op jobs on {meta['machine']['cores']} cores, {meta['date']}"
        + (" (quick run)" if meta["quick"] else "")
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    data = json.loads(Path(sys.argv[1]).read_text())
    md, png = write(data["runs"], data["meta"], HERE.parent / "docs")
    print(f"wrote {md} and {png}")


if __name__ == "__main__":
    main()
