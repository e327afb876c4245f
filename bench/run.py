"""`make bench`: chit and its peers, the same workloads in one run, taking turns.

    bench/.venv-peers/bin/python bench/run.py [--quick] [--systems chit-sqlite,huey-sqlite]
        [--steps enqueue,process1|flow] [--repeat 2] [--chit-ref HEAD] [--baseline REF]
        [--profile] [--no-docs]

For every step, each system runs in turn (the order rotates between repeats),
each run in a fresh database: a new SQLite file, a new PostgreSQL database
(created, then dropped), or a flushed Redis (a redis-server this script starts
on a free loopback port, with the durability chit's Redis store insists on:
appendonly yes, appendfsync everysec, maxmemory-policy noeviction; every
Redis system runs on it). Each run is one `drive.py` process in the system's
own virtual environment, in its own process group, under a time cap; the
group is killed when the run ends, and everything else is stopped on exit,
Ctrl-C included. Figures are printed as they come; docs/benchmarks.md and
docs/benchmarks.png are written at the end (raw results and worker logs stay
in bench/results/).

chit is measured from the working tree (the editable install in .venv), or
from `git archive REF` with --chit-ref. `--baseline REF` also measures chit
from `git archive REF` as `chit-sqlite@REF` and `chit-postgres@REF` (and
`chit-redis@REF` where REF has the Redis store), taking
turns with the measured chit in the same run, and prints a before/after table
(a refactor's proof of no regression; docs/ are left alone): every step's
figure from both sides, flow-claim's median claim behind the throttled backlog
and the workflows' fan-in, plain and chain hop among them. A step whose code
REF lacks (flow control, aenqueue, workflows) runs from the tree only, and the
run says so. chit on PostgreSQL runs once src/chit/store/postgres.py is
committed.

The `features-on` step (issue 22) is `process1` on chit while the database
holds what the other features leave behind (bench/features.py: an operator's
limits on three other kinds, 1,000 schedules, 10,000 jobs waiting on a
dependency, unique and expiring jobs of other kinds, 5,000 jobs of five
tenants), all in a queue the bench's workers do not take: a plain job must not
pay for them, so it is read against `process1` of the same run. It runs from
the tree and, with --baseline, from REF too.

The flow-control steps (`--steps flow` for all three, a minute or two) measure
limits (issue 12): `flow-concurrency`, a kind with `concurrency=8` over 2
worker processes against PgQueuer's `concurrency_limit=8`; `flow-rate`,
`rate="1000/s"` over 2 workers (the attempts' start times: mean rate and worst
1 s window); `flow-claim`, one claim behind 100,000 throttled jobs against one
on an empty backlog, with the plans of a throttled claim (bench/flow_claim.py).
They run chit from the tree and, with --baseline, from REF too where REF has
flow control: `chit-postgres@REF` in flow-concurrency and flow-rate, and
flow_claim.py once more on each backend with REF's src (results.json keeps it
as `SQLite@REF`, `PostgreSQL@REF`), taking turns. A run of flow steps alone
writes flow.md in its results folder and rewrites only the flow-control
section of docs/benchmarks.md (unless --no-docs or --baseline).

The `workflows` step (issue 14, bench/workflows.py) measures chit-sqlite and
chit-postgres on a fan-in of 10,000 jobs into one callback (stored in one
call, then processed, against the same jobs without dependencies) and a
1,000-job chain's per-hop latency, and Celery's chord (`celery`) on the same
fan-in; of the systems named, those three (all of them when none is). With
--baseline, also `chit-sqlite@REF` and `chit-postgres@REF`: their app and
`chit worker` processes with REF's src first on PYTHONPATH. It writes
workflows.md in its results folder and leaves docs/ alone:

    bench/.venv-peers/bin/python bench/run.py --steps workflows \
        --systems chit-sqlite,chit-postgres,celery --repeat 1

Two steps measure issue 15's async enqueue, each run a bench script in chit's
environment on the run's fresh database (SQLite for chit-sqlite, PostgreSQL for
chit-postgres), taking turns like the drive.py steps: `aenqueue`
(bench/aenqueue_bench.py), `await queue.aenqueue(...)` one at a time from one
event loop, then the sync `queue.enqueue` one at a time, 3 s each (1 s with
--quick), jobs/s, from the tree and, with --baseline, from REF too (where it
has aenqueue); and
`api-submit` (bench/api_bench.py), a real `chit serve` (bench/noop_app.py)
answering POST /jobs from 16 keep-alive connections for 3 s (1 s), accepted
jobs/s and p50/p99, from the tree and, with --baseline, from REF too (the
server's chit from `git archive REF`), so the before/after table holds its
ratio. Each prints its versions; run alone they leave docs/ alone:

    bench/.venv-peers/bin/python bench/run.py --steps aenqueue,api-submit \
        --systems chit-sqlite,chit-postgres --baseline 2ea622f --repeat 2 --no-docs
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import limits  # noqa: E402
import pools  # noqa: E402
import report  # noqa: E402
import services  # noqa: E402
import workflows  # noqa: E402
from systems import INFO  # noqa: E402

PYTHONS = {"chit": ROOT / ".venv/bin/python", "peers": HERE / ".venv-peers/bin/python"}
POSTGRES_STORE = "src/chit/store/postgres.py"
REDIS_STORE = "src/chit/store/redis"


@dataclass(frozen=True)
class Sizes:
    jobs: int  # enqueue and process
    latency_jobs: int
    finished: int  # growth: done jobs seeded
    queued: int  # growth: queued jobs seeded
    measure: int  # growth: jobs timed
    sqlite_seconds: float
    pgbench_seconds: int
    # flow-concurrency: fewer than process2, as PgQueuer takes about 100 jobs/s
    # under its limit (its completions free a slot when their buffer flushes).
    flow_jobs: int
    rate_jobs: int  # flow-rate: 10 s at 1000/s
    backlog: int  # flow-claim: throttled jobs queued ahead
    claims: int  # flow-claim: timed claims of each database
    workflow_chain: int  # workflows: jobs of the chain (the fan-in has `jobs` leaves)
    rate_seconds: float  # aenqueue and api-submit: each rate measured over this long


FULL = Sizes(
    10_000, 200, 1_000_000, 100_000, 10_000, 3.0, 5, 1_500, 10_000, 100_000, 400, 1_000, 3.0
)
QUICK = Sizes(2_000, 50, 100_000, 10_000, 2_000, 1.0, 2, 500, 3_000, 10_000, 100, 200, 1.0)

# The flow-control steps: what `--steps flow` stands for.
FLOW_STEPS = ("flow-concurrency", "flow-rate", "flow-claim")
# What a --baseline's src/chit holds when it has flow control (issue 12).
FLOW_NEEDS = "def declare_limits"
# flow_claim.py's name of each backend, and the chit system that runs on it.
BACKENDS = {"SQLite": ("sqlite", "chit-sqlite"), "PostgreSQL": ("postgres", "chit-postgres")}
# Steps that are no drive.py workload of every system, but measured apart.
APART = ("limits", "flow-claim", "pools", "workflows", "schedules")  # not drive.py workloads
KIND_CONCURRENCY = 8
KIND_RATE = "1000/s"
CHIT = ("chit-sqlite", "chit-postgres", "chit-redis")
API_CONCURRENCY = 16  # api-submit: POST /jobs requests in flight


@dataclass(frozen=True)
class Step:
    key: str
    workload: str
    args: tuple[str, ...]
    cap: float  # seconds the driver may wait for jobs
    seeding: bool = False  # only systems that can seed
    sqlite_only: bool = False
    # Only these systems (and never a --baseline unless `baseline`).
    only: tuple[str, ...] = ()
    baseline: bool = False  # `only` names its systems from --baseline too
    # What a --baseline's src/chit must hold to run the step: a newer feature.
    needs: str = ""
    # A bench script run instead of drive.py, in chit's environment, given the
    # run's fresh database (--database-url) and printing its figures as a last
    # JSON line (--json).
    script: str = ""


def steps(sizes: Sizes) -> list[Step]:
    queued = ("--jobs", str(sizes.queued))
    finished = ("--finished", str(sizes.finished))
    measure = ("--measure", str(sizes.measure))
    grown = (*queued, *finished, *measure)
    limited = ("--kind-concurrency", str(KIND_CONCURRENCY))
    seconds = ("--seconds", str(sizes.rate_seconds))
    return [
        Step("enqueue", "enqueue", ("--jobs", str(sizes.jobs)), 120),
        Step("bulk", "bulk", ("--jobs", str(sizes.jobs)), 120),
        Step("process1", "process", ("--jobs", str(sizes.jobs), "--workers", "1"), 150),
        Step("process2", "process", ("--jobs", str(sizes.jobs), "--workers", "2"), 150),
        # process1 while the database holds what the other features leave
        # behind (features.py): a plain job must not pay for them.
        Step(
            "features-on",
            "process",
            ("--jobs", str(sizes.jobs), "--workers", "1", "--features-on"),
            150,
            only=CHIT,
            baseline=True,
        ),
        Step("latency", "latency", ("--jobs", str(sizes.latency_jobs), "--spacing", "0.02"), 90),
        # The same seeded backlog and no finished jobs: what `growth` is read
        # against, so its ratio shows what the finished jobs cost and nothing else.
        Step("growth-empty", "growth", (*queued, "--finished", "0", *measure), 90, seeding=True),
        Step("growth", "growth", grown, 90, seeding=True),
        Step("growth-analyze", "growth", (*grown, "--analyze"), 90, seeding=True, sqlite_only=True),
        # The same workers as process2, the kind limited on both sides.
        Step(
            "flow-concurrency",
            "process",
            ("--jobs", str(sizes.flow_jobs), "--workers", "2", *limited),
            90,
            only=("chit-postgres", "pgqueuer"),
            baseline=True,
            needs=FLOW_NEEDS,
        ),
        Step(
            "flow-rate",
            "rate",
            ("--jobs", str(sizes.rate_jobs), "--workers", "2", "--kind-rate", KIND_RATE),
            60,
            only=("chit-postgres",),
            baseline=True,
            needs=FLOW_NEEDS,
        ),
        # Issue 15: aenqueue, from a --baseline too where it has aenqueue.
        Step(
            "aenqueue",
            "aenqueue",
            seconds,
            60,
            only=CHIT,
            baseline=True,
            needs="def aenqueue",
            script="aenqueue_bench.py",
        ),
        # Issue 26: a debounced enqueue against a plain one (from the tree only).
        Step("debounce", "debounce", seconds, 60, only=CHIT, script="debounce_bench.py"),
        # Issue 25: signal-to-resume, and process1 beside 10,000 waiting jobs.
        Step("waits", "waits", seconds, 240, only=CHIT, script="waits_bench.py"),
        # Issue 25: cost_rate held over 10 s, with and without report_cost.
        Step(
            "cost-rate",
            "cost-rate",
            ("--seconds", "10"),
            90,
            only=CHIT,
            script="cost_rate_bench.py",
        ),
        # Issue 25: emit -> an SSE client, over real processes (from the tree only).
        Step(
            "output",
            "output",
            ("--count", "300", "--every", "0.01"),
            60,
            only=CHIT,
            script="output_bench.py",
        ),
        Step(
            "api-submit",
            "api-submit",
            ("--only", "POST /jobs (", *seconds, "--concurrency", str(API_CONCURRENCY)),
            60,
            only=CHIT,
            baseline=True,
            script="api_bench.py",
        ),
    ]


@dataclass
class Run:
    system: str
    step: str
    rep: int
    ok: bool
    result: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    busy_before: float = 0.0
    wall_seconds: float = 0.0


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.sizes = QUICK if args.quick else FULL
        self.repeat = args.repeat or (1 if args.quick else 2)
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        self.dir = HERE / "results" / stamp
        self.dir.mkdir(parents=True)
        self.logs = self.dir / "logs"
        self.logs.mkdir()
        self.runs: list[Run] = []
        self.redis: services.Redis | None = None
        self.pg: services.Postgres | None = None
        self.current: subprocess.Popen[bytes] | None = None
        self.chit_src: Path | None = None
        self.baseline_src: Path | None = None
        self.notes: dict[str, str] = {}  # a system left out, and why
        self.skipped: dict[str, str] = {}  # "system step": why REF did not run it

    # Setting up

    def prepare_chit(self) -> dict[str, str]:
        """Which chit is measured; exports `git archive REF` when asked."""
        git = ["git", "-C", str(ROOT)]
        ref = self.args.chit_ref
        head = subprocess.run(
            [*git, "rev-parse", "--short", ref or "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        if ref:
            self.chit_src = self.export(ref, "chit-src")
            tree = f"{head} (`git archive {ref}`)"
        else:
            dirty = subprocess.run(
                [*git, "status", "--porcelain", "--", "src"], capture_output=True, text=True
            ).stdout.strip()
            tree = f"{head}" + (" plus uncommitted changes in src/" if dirty else "")
        committed = subprocess.run(
            [*git, "log", "--oneline", ref or "HEAD", "--", POSTGRES_STORE],
            capture_output=True,
            text=True,
        ).stdout.strip()
        redis = subprocess.run(
            [*git, "log", "--oneline", ref or "HEAD", "--", REDIS_STORE],
            capture_output=True,
            text=True,
        ).stdout.strip()
        return {
            "tree": tree,
            "postgres_committed": "yes" if committed else "",
            "redis_committed": "yes" if redis else "",
        }

    def export(self, ref: str, name: str) -> Path:
        """`git archive REF src` unpacked into the results folder."""
        folder = self.dir / name
        folder.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", ref, "src"], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
        return folder

    def has_redis_store(self, ref: str) -> bool:
        listed = subprocess.run(
            ["git", "-C", str(ROOT), "ls-tree", "--name-only", ref, f"{REDIS_STORE}/"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        return bool(listed)

    def supported(self, systems: list[str], step: str, needs: str) -> list[str]:
        """`systems` without the --baseline ones when REF's src/chit lacks
        `needs` (what the step measures is newer than REF), saying so."""
        ref = self.args.baseline
        if not needs or not any("@" in s for s in systems):
            return systems
        found = subprocess.run(["git", "-C", str(ROOT), "grep", "-q", "-F", needs, ref, "--",
                                "src/chit"], capture_output=True)  # fmt: skip
        if found.returncode == 0:
            return systems
        for system in (s for s in systems if "@" in s):
            why = self.skipped[f"{system} {step}"] = f"{ref} has no `{needs}` in src/chit"
            print(f"{step:<14} {system:<14} {'—':>9}  (skipped: {why})")
        return [s for s in systems if "@" not in s]

    def pythonpath(self, info_venv: str, baseline: bool = False) -> str:
        """bench/, after chit's src when it is not the tree's (--chit-ref, --baseline)."""
        paths = [str(HERE)]
        src = self.baseline_src if baseline else self.chit_src
        if info_venv == "chit" and src is not None:
            paths.insert(0, str(src / "src"))
        return os.pathsep.join(paths)

    def env(self, info_venv: str, baseline: bool = False) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CHIT_", "BENCH_"))}
        env["PYTHONPATH"] = self.pythonpath(info_venv, baseline)
        env["BENCH_PY_SPY"] = str(HERE / ".venv-peers/bin/py-spy")
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        return env

    # One run

    def run(self, system: str, step: Step, rep: int) -> Run:
        system, _, at = system.partition("@")
        info = INFO[system]
        env = self.env(info.venv, baseline=bool(at)) | dict(info.env)
        db_name = f"bench_{system.replace('-', '_')}"
        sqlite_path = self.dir / f"{system}-{step.key}-{rep}.db"
        if info.backend == "SQLite":
            env["BENCH_SQLITE_PATH"] = str(sqlite_path)
            env["CHIT_DATABASE_URL"] = f"sqlite:///{sqlite_path}"
        elif info.backend == "PostgreSQL":
            assert self.pg is not None
            dsn = self.pg.fresh(db_name)
            env["BENCH_PG_DSN"] = dsn
            env["CHIT_DATABASE_URL"] = dsn
        else:
            assert self.redis is not None
            self.redis.flush()
            env["BENCH_REDIS_URL"] = self.redis.url
            env["CHIT_DATABASE_URL"] = self.redis.url
        log = self.logs / f"{system}-{step.key}-{rep}.log"
        cmd = [str(PYTHONS[info.venv]), str(HERE / "drive.py"), system, step.workload,
               *step.args, "--cap", str(step.cap), "--log", str(log)]  # fmt: skip
        if step.script:
            cmd = [str(PYTHONS["chit"]), str(HERE / step.script), *step.args,
                   "--database-url", env["CHIT_DATABASE_URL"], "--json"]  # fmt: skip
        if self.args.profile and info.venv == "chit" and not step.script:
            profiles = self.dir / "profiles"
            profiles.mkdir(exist_ok=True)
            cmd += ["--profile", str(profiles)]
        busy = services.wait_quiet() if not self.args.no_wait else 0.0
        started = time.monotonic()
        run = Run(f"{system}@{at}" if at else system, step.key, rep, ok=False, busy_before=busy)
        try:
            with log.open("ab") as err:
                self.current = subprocess.Popen(
                    cmd, env=env, stdout=subprocess.PIPE, stderr=err, start_new_session=True
                )
                try:
                    out, _ = self.current.communicate(timeout=step.cap + 120)
                except subprocess.TimeoutExpired:
                    run.error = f"killed: no answer after {step.cap + 120:.0f} s"
                    out = b""
                finally:
                    services.kill_group(self.current.pid)
                    self.current.wait()
            if not run.error:
                lines = out.decode().strip().splitlines()
                if self.current.returncode != 0 or not lines:
                    run.error = f"driver exited with {self.current.returncode}; see {log}"
                else:
                    result = json.loads(lines[-1])
                    run.ok = bool(result.pop("ok"))
                    run.error = result.pop("error", "")
                    run.result = result
                    if run.ok:
                        run.error = verify(step, result)
                        run.ok = not run.error
        finally:
            self.current = None
            run.wall_seconds = time.monotonic() - started
            if info.backend == "PostgreSQL" and self.pg is not None:
                self.pg.drop(db_name)
            for suffix in ("", "-wal", "-shm"):
                Path(f"{sqlite_path}{suffix}").unlink(missing_ok=True)
        return run

    # The whole bench

    def main(self) -> None:
        args = self.args
        chit = self.prepare_chit()
        wanted = args.systems.split(",") if args.systems else list(INFO)
        for name in wanted:
            if name not in INFO:
                raise SystemExit(f"unknown system {name!r}; known: {', '.join(INFO)}")
        if "chit-postgres" in wanted and not chit["postgres_committed"]:
            wanted.remove("chit-postgres")
            self.notes["chit-postgres"] = f"not yet: {POSTGRES_STORE} is not committed"
        if "chit-redis" in wanted and not chit.get("redis_committed"):
            wanted.remove("chit-redis")
            self.notes["chit-redis"] = f"not yet: {REDIS_STORE} is not committed"
        for venv in {INFO[s].venv for s in wanted}:
            if not PYTHONS[venv].exists():
                raise SystemExit(f"{PYTHONS[venv]} is missing: run `make bench`")
        if args.baseline:
            self.baseline_src = self.export(args.baseline, "baseline-src")
            chit_systems = [s for s in wanted if INFO[s].venv == "chit"]
            if not self.has_redis_store(args.baseline):  # older than the Redis store
                chit_systems = [s for s in chit_systems if INFO[s].backend != "Redis"]
            wanted += [f"{s}@{args.baseline}" for s in chit_systems]
        all_steps = steps(self.sizes)
        known = [s.key for s in all_steps] + list(APART)
        chosen = args.steps.split(",") if args.steps else known
        if "flow" in chosen:
            chosen = [c for c in chosen if c != "flow"] + list(FLOW_STEPS)
        unknown = set(chosen) - set(known)
        if unknown:
            raise SystemExit(f"unknown steps {sorted(unknown)}")
        flow_only = set(chosen) <= set(FLOW_STEPS)
        # These steps alone leave docs/ alone (workflows.md in the results for
        # workflows; the tables printed for aenqueue and api-submit).
        workflows_only = set(chosen) <= {
            "workflows",
            "aenqueue",
            "api-submit",
            "debounce",
            "waits",
            "cost-rate",
            "output",
        }
        workflow_systems = [s for s in workflows.SYSTEMS if s in wanted] or list(workflows.SYSTEMS)

        backends = {INFO[base_name(s)].backend for s in wanted}
        if "workflows" in chosen and "celery" in workflow_systems:
            backends.add("Redis")
        if "workflows" in chosen and "chit-postgres" in workflow_systems:
            backends.add("PostgreSQL")
        if "Redis" in backends:
            self.redis = services.Redis(self.logs / "redis-server.log")
        if "PostgreSQL" in backends or "limits" in chosen or "flow-claim" in chosen:
            self.pg = services.Postgres()

        meta = self.meta(chit, wanted)
        print(f"chit {chit['tree']}; {meta['machine']['cores']} cores; results in {self.dir}")
        started = time.monotonic()
        for step in all_steps:
            if step.key not in chosen:
                continue
            systems = [
                s
                for s in wanted
                if (not step.seeding or INFO[base_name(s)].seeds)
                and (not step.sqlite_only or INFO[base_name(s)].backend == "SQLite")
                and (not step.only or (base_name(s) if step.baseline else s) in step.only)
            ]
            systems = self.supported(systems, step.key, step.needs)
            if not systems:
                continue
            # Growth is read against growth-empty (and process1): as many runs of
            # each, so every figure compared is a best of the same number.
            # A before/after comparison repeats every step: it reads ratios of bests.
            repeated = step.workload in ("process", "growth") or args.baseline
            repeat = self.repeat if repeated else 1
            for rep in range(repeat):
                for system in rotate(systems, rep):
                    run = self.run(system, step, rep)
                    self.runs.append(run)
                    print(line(run), flush=True)
                    self.save(meta)
            done = [r for r in self.runs if r.step == step.key and "versions" in r.result]
            if done:
                print(f"{step.key:<14} versions: {done[-1].result['versions']}", flush=True)
        if "flow-claim" in chosen:
            meta["flow_claim"] = self.flow_claim(wanted, chit)
            self.save(meta)
        if "pools" in chosen:
            meta["pools"] = pools.run(self.dir, self.sizes.jobs // 5)
            self.save(meta)
        if "workflows" in chosen:
            if args.baseline:
                refs = [f"{s}@{args.baseline}" for s in workflow_systems if s.startswith("chit")]
                workflow_systems = self.supported(
                    workflow_systems + refs, "workflows", "def enqueue_workflow"
                )
            paths = {s: self.pythonpath("chit", baseline="@" in s)
                     for s in workflow_systems if s.startswith("chit")}  # fmt: skip
            meta["workflows"] = workflows.run(
                self.dir, self.pg, self.redis, workflow_systems, self.sizes.jobs,
                self.sizes.workflow_chain, repeat=self.repeat, paths=paths,
            )  # fmt: skip
            self.save(meta)
        if "schedules" in chosen:
            meta["schedules"] = schedules_tick(self.sizes.jobs >= 10_000)
            self.save(meta)
        limit_figures = self.limits() if "limits" in chosen else {}
        meta["limits"] = limit_figures
        meta["seconds"] = time.monotonic() - started
        meta["load_after"] = os.getloadavg()
        self.save(meta)
        print(f"done in {meta['seconds']:.0f} s")
        if set(chosen) & set(FLOW_STEPS):
            results = report.Results(self.runs_json(), meta)
            flow = report.flow_markdown(results)
            (self.dir / "flow.md").write_text(flow)
            print(f"\n{flow}")
            print(versions(meta))
            if flow_only and not args.no_docs and not args.baseline:
                # The rest of the page stays as the last full run left it.
                md = ROOT / "docs" / "benchmarks.md"
                report.splice_flow(md, report.flow_markdown(results, heading="##"))
                print(f"wrote its section of {md.relative_to(ROOT)}")
        if args.baseline:
            table = before_after(self.runs, meta, args.baseline)
            (self.dir / "before-after.md").write_text(table)
            print(table)
        elif not args.no_docs and not flow_only and not workflows_only:
            md, png = report.write(self.runs_json(), meta, ROOT / "docs")
            print(f"wrote {md.relative_to(ROOT)} and {png.relative_to(ROOT)}")

    def flow_claim(self, wanted: list[str], chit: dict[str, str]) -> dict[str, Any]:
        """bench/flow_claim.py on each backend chit runs on here, and with
        --baseline from REF's src too, taking turns: per backend (`SQLite`, or
        `SQLite@REF`) the figures of its fastest claim behind the backlog."""
        backends = {INFO[s].backend for s in wanted if s.startswith("chit") and "@" not in s}
        if not backends:  # --systems named no chit: both, as the step is chit's own
            backends = {"SQLite", "PostgreSQL"}
        if not chit["postgres_committed"]:
            backends.discard("PostgreSQL")
        systems = [system for backend, (_, system) in BACKENDS.items() if backend in backends]
        if self.args.baseline:
            refs = [f"{s}@{self.args.baseline}" for s in systems]
            systems = self.supported(systems + refs, "flow-claim", FLOW_NEEDS)
        figures: dict[str, Any] = {}
        for rep in range(self.repeat if self.args.baseline else 1):
            for system in rotate(systems, rep):
                name, at, ref = system.partition("@")
                key = INFO[name].backend + at + ref
                result = self.claim(INFO[name].backend, ref)
                print(claim_line(system, result), flush=True)
                if key not in figures or claim_ms(result) < claim_ms(figures[key]):
                    figures[key] = result
        return figures

    def claim(self, backend: str, ref: str) -> dict[str, Any]:
        """One flow_claim.py process (from REF's src when `ref`) under a time cap,
        on three fresh databases (backlog, empty, plain): its figures, or an error."""
        names = [f"bench_flow_{n}" for n in ("backlog", "empty", "plain")]
        if backend == "PostgreSQL":
            assert self.pg is not None
            urls = [self.pg.fresh(n) for n in names]
        else:
            urls = [f"sqlite:///{self.dir / n}.db" for n in names]
        # In file names: a ref may hold a slash (origin/main).
        short = BACKENDS[backend][0] + (f"@{ref.replace('/', '_')}" if ref else "")
        plans = self.dir / f"flow-claim-plans-{short}.txt"
        log = self.logs / f"flow-claim-{short}.log"
        cmd = [str(PYTHONS["chit"]), str(HERE / "flow_claim.py"), BACKENDS[backend][0], *urls,
               "--backlog", str(self.sizes.backlog), "--claims", str(self.sizes.claims),
               "--plans", str(plans)]  # fmt: skip
        busy = services.wait_quiet() if not self.args.no_wait else 0.0
        try:
            with log.open("ab") as err:
                self.current = subprocess.Popen(
                    cmd, env=self.env("chit", baseline=bool(ref)), stdout=subprocess.PIPE,
                    stderr=err, start_new_session=True,
                )  # fmt: skip
                try:
                    out, _ = self.current.communicate(timeout=300)
                finally:
                    services.kill_group(self.current.pid)
                    self.current.wait()
            if self.current.returncode != 0:
                return {"error": f"exited with {self.current.returncode}; see {log}"}
            result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
            result["plans"] = plans.read_text() if plans.exists() else ""
            return result | {"busy_before": busy}
        except subprocess.TimeoutExpired:
            return {"error": "killed: no answer after 300 s"}
        finally:
            self.current = None
            for name in names:
                if backend == "PostgreSQL" and self.pg is not None:
                    self.pg.drop(name)
                for suffix in ("", "-wal", "-shm"):
                    Path(f"{self.dir / name}.db{suffix}").unlink(missing_ok=True)

    def limits(self) -> dict[str, float]:
        """Each limit twice, after waiting for a quiet machine; the best is kept."""

        def best(measure: Callable[..., float], *args: Any) -> float:
            rates = []
            for _ in range(2):
                if not self.args.no_wait:
                    services.wait_quiet()
                rates.append(measure(*args))
            return max(rates)

        figures: dict[str, float] = {}
        for sync in ("NORMAL", "FULL"):
            rate = best(limits.sqlite_commits, self.dir, sync, self.sizes.sqlite_seconds)
            figures[f"sqlite_{sync.lower()}"] = rate
            print(f"limit      SQLite WAL synchronous={sync:<6} {rate:>9,.0f} commits/s")
        assert self.pg is not None
        dsn = self.pg.fresh("bench_pgbench")
        try:
            for clients in (1, 2):
                tps = best(limits.pgbench_tps, dsn, clients, self.sizes.pgbench_seconds, self.dir)
                figures[f"pgbench_{clients}"] = tps
                print(f"limit      PostgreSQL pgbench, {clients} client(s) {tps:>9,.0f} TPS")
        finally:
            self.pg.drop("bench_pgbench")
        return figures

    def meta(self, chit: dict[str, str], wanted: list[str]) -> dict[str, Any]:
        probe = subprocess.run(
            [str(PYTHONS["chit"]), "-c", CHIT_PROBE],
            env=self.env("chit"),
            capture_output=True,
            text=True,
        )
        chit_versions = json.loads(probe.stdout) if probe.returncode == 0 else {}
        peers = {}
        for name in sorted({p for s in INFO.values() if s.venv == "peers" for p in s.packages}):
            with contextlib.suppress(metadata.PackageNotFoundError):
                peers[name] = metadata.version(name)
        return {
            "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "quick": self.args.quick,
            "repeat": self.repeat,
            "sizes": asdict(self.sizes),
            "machine": services.machine(),
            "python": platform.python_version(),
            "sqlite": chit_versions.get("sqlite", "?"),
            "chit": chit | {"versions": chit_versions},
            "peers": peers,
            "postgres": (self.pg.version if self.pg else ""),
            "postgres_settings": (self.pg.settings if self.pg else {}),
            "redis": (self.redis.version() if self.redis else ""),
            "systems": wanted,
            "notes": self.notes,
            "skipped": self.skipped,
            "load_before": os.getloadavg(),
        }

    def runs_json(self) -> list[dict[str, Any]]:
        return [asdict(r) for r in self.runs]

    def save(self, meta: dict[str, Any]) -> None:
        data = {"meta": meta, "runs": self.runs_json()}
        (self.dir / "results.json").write_text(json.dumps(data, indent=1, default=str))

    def close(self) -> None:
        if self.current is not None:
            services.kill_group(self.current.pid)
        if self.redis is not None:
            self.redis.stop()
        if self.pg is not None:
            self.pg.drop_all()
        for path in self.dir.glob("*.db*"):
            path.unlink(missing_ok=True)
        for src in (self.chit_src, self.baseline_src):
            if src is not None:
                shutil.rmtree(src, ignore_errors=True)


CHIT_PROBE = """
import json, platform, sqlite3
from importlib import metadata
import chit
v = {name: metadata.version(name) for name in ("chit", "psycopg", "pydantic", "redis")}
v["sqlite"] = sqlite3.sqlite_version
v["python"] = platform.python_version()
v["chit_path"] = chit.__file__
print(json.dumps(v))
"""


def verify(step: Step, result: dict[str, Any]) -> str:
    """Empty when the store and the handlers agree that every job ran exactly once."""
    if "skipped" in result or step.workload not in ("process", "rate"):
        return ""
    n = result["n"]
    problems = []
    if result["ran"] != n or result["missing"]:
        problems.append(f"{result['ran']} handler runs for {n} jobs, {result['missing']} missing")
    if result["duplicates"]:
        problems.append(f"{result['duplicates']} jobs ran twice")
    if result["waiting"]:
        problems.append(f"{result['waiting']} jobs still waiting in the store")
    stored = result.get("completed_in_store")
    if stored is not None and stored != n:
        problems.append(f"the store counts {stored} done")
    limit = result.get("kind_concurrency")
    if limit and result["most_overlapping"] > limit:
        problems.append(f"{result['most_overlapping']} handlers ran at once, over {limit}")
    return "; ".join(problems)


def rate_held(r: dict[str, Any]) -> bool:
    """Issue 12: the mean within 5 % of the limit, and no window over it."""
    return abs(r["mean_rate"] - r["limit"]) <= 0.05 * r["limit"] and r["worst_window"] <= r["limit"]


def base_name(system: str) -> str:
    """`chit-sqlite@REF` is measured as `chit-sqlite` from REF's source."""
    return system.partition("@")[0]


def rotate(systems: list[str], rep: int) -> list[str]:
    """The order of repeat `rep`: each repeat starts one system further on."""
    return systems[rep % len(systems) :] + systems[: rep % len(systems)]


def figure(run: Run) -> float | None:
    """The figure a run is compared by: jobs/s, or the median latency in ms."""
    r = run.result
    if not run.ok or "skipped" in r:
        return None
    return r["median_ms"] if "median_ms" in r else r.get("jobs_per_s")


def claim_ms(r: dict[str, Any]) -> float:
    """flow-claim's figure: the median claim behind the throttled backlog."""
    return float("inf") if "error" in r else float(r["backlog"]["median_ms"])


def measures(runs: list[Run], meta: dict[str, Any]) -> list[tuple[str, str, float | None, bool]]:
    """Every figure of the run: (step, system, figure or None, lower is better).
    The runs', then flow-claim's and the workflows' (kept in `meta`)."""
    out = [(r.step, r.system, figure(r), "median_ms" in r.result) for r in runs]
    for key, r in meta.get("flow_claim", {}).items():
        backend, at, ref = key.partition("@")
        ms = None if "error" in r else claim_ms(r)
        out.append(("flow-claim", BACKENDS[backend][1] + at + ref, ms, True))
    for system, f in meta.get("workflows", {}).get("figures", {}).items():
        for shape in ("fanin", "plain"):
            if shape in f:
                out.append((f"workflows {shape}", system, f[shape]["jobs_per_s"], False))
        if "chain" in f:  # by the handlers' clocks: SQLite's rows keep milliseconds
            out.append(("workflows chain hop", system, f["chain"]["handlers"]["median_ms"], True))
    return out


def fmt(value: float | None, latency: bool) -> str:
    if value is None:
        return "—"
    return f"{value:,.2f} ms" if latency else f"{value:,.0f}"


def before_after(runs: list[Run], meta: dict[str, Any], ref: str) -> str:
    """Markdown: per step and chit system, the best figure of REF and of the tree."""
    rows = [
        f"Before/after in one run: `{ref}` (before) and {meta['chit']['tree']} (after), "
        "taking turns. Jobs/s, or ms (latency, flow-claim's median claim behind the "
        "throttled backlog, the workflows' median chain hop by the handlers' clocks): "
        "lower is better, so compared as before/after.",
        "",
        "| step | system | before | after | after/before |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    found = measures(runs, meta)
    # Only what REF ran too (a step whose code REF lacks is skipped for it).
    compared = {(step, base_name(system)) for step, system, _, _ in found if "@" in system}
    lower = {step for step, _, _, low in found if low}
    for step, system in dict.fromkeys((step, system) for step, system, _, _ in found):
        if (step, system) not in compared:
            continue
        latency = step in lower
        pick = min if latency else max

        def best(name: str, step: str = step, pick: Any = pick) -> float | None:
            values = [v for s, n, v, _ in found if s == step and n == name and v is not None]
            return pick(values) if values else None

        after, before = best(system), best(f"{system}@{ref}")
        cells = [fmt(v, latency) for v in (before, after)]
        # Above 1 is better for both: latency is compared as before/after.
        ratio = "—"
        if before and after:
            ratio = f"{(before / after if latency else after / before):.2f}x"
        rows.append(f"| {step} | {system} | {cells[0]} | {cells[1]} | {ratio} |")
    return "\n".join(rows) + "\n"


def claim_line(system: str, r: dict[str, Any]) -> str:
    head = f"{'flow-claim':<14} {system:<14}"
    if "error" in r:
        return f"{head} FAILED: {r['error']}"
    return (
        f"{head} median claim {r['backlog']['median_ms']:.2f} ms behind {r['backlog_jobs']:,} "
        f"throttled jobs, {r['empty']['median_ms']:.2f} ms with none: {r['ratio']:.2f}x "
        f"({'within' if r['ratio'] <= 1.2 else 'NOT within'} 1.2); no limits at all "
        f"{r['plain']['median_ms']:.2f} ms"
        + (f"  (machine {r['busy_before']:.0%} busy before)" if r["busy_before"] > 0.25 else "")
    )


def versions(meta: dict[str, Any]) -> str:
    chit = meta["chit"]
    return (
        f"versions: chit {chit['versions'].get('chit', '?')} at {chit['tree']}; "
        f"PostgreSQL {meta['postgres'] or '-'}; SQLite {meta['sqlite']}; "
        f"pgqueuer {meta['peers'].get('pgqueuer', '-')}; Python {meta['python']}"
    )


def line(run: Run) -> str:
    head = f"{run.step:<14} {run.system:<14}"
    r = run.result
    if not run.ok:
        partial = f" ({r['jobs_per_s']:,.0f} jobs/s over those)" if "jobs_per_s" in r else ""
        return f"{head} FAILED: {run.error}{partial}"
    if "skipped" in r:
        return f"{head} {'—':>9}  ({r['skipped']})"
    if "with_waiting_per_s" in r:
        return (
            f"{head} signal to resume median {r['median_ms']:.1f} ms, p90 {r['p90_ms']:.1f} ms;"
            f" process1 {r['jobs_per_s']:,.0f} jobs/s, {r['with_waiting_per_s']:,.0f} beside"
            f" 10,000 waiting ({r['ratio']:.2f}x)"
        )
    if "median_ms" in r:
        return f"{head} median {r['median_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms"
    busy = f"  (machine {run.busy_before:.0%} busy before)" if run.busy_before > 0.25 else ""
    if "report_cost" in r:
        return f"{head} " + "; ".join(
            f"{mode}: worst 1 s window {w['worst_ratio']:.1%} of {w['limit']:,}/s, "
            f"{w['used']:.1%} used"
            for mode, w in r.items()
            if isinstance(w, dict)
        )
    if "mean_rate" in r:
        held = "held" if rate_held(r) else "NOT held"
        return (
            f"{head} {r['mean_rate']:>9,.1f} starts/s for {r['kind_rate']} over "
            f"{r['steady_seconds']:.0f} s, worst 1 s window {r['worst_window']:,} ({held}){busy}"
        )
    if "most_overlapping" in r:
        return (
            f"{head} {r['jobs_per_s']:>9,.0f} jobs/s with concurrency={r['kind_concurrency']}, "
            f"at most {r['most_overlapping']} handlers at once{busy}"
        )
    extra = f"  seeded in {r['seed_seconds']:.0f} s" if "seed_seconds" in r else ""
    if "same_key_per_s" in r:
        extra = (
            f" plain; debounced with a new key {r['new_key_per_s']:,.0f}, into a waiting job"
            f" {r['same_key_per_s']:,.0f}"
        )
    if "sync_jobs_per_s" in r:
        extra = f" with aenqueue, {r['sync_jobs_per_s']:,.0f} with sync enqueue"
    if "p99_ms" in r:
        extra = (
            f" by POST /jobs, {r['concurrency']} in flight: p50 {r['p50_ms']:.1f} ms, "
            f"p99 {r['p99_ms']:.1f} ms"
        )
    return f"{head} {r['jobs_per_s']:>9,.0f} jobs/s{extra}{busy}"


def schedules_tick(full: bool) -> dict[str, Any]:
    """bench/schedules.py in chit's environment: a maintenance tick over 10,000
    schedules (1,000 with --quick) on both backends; its figures."""
    count = "10000" if full else "1000"
    command = [str(PYTHONS["chit"]), str(HERE / "schedules.py"), "--schedules", count]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=True)
    for line in done.stdout.splitlines()[:-1]:
        print(f"schedules: {line}", flush=True)
    figures: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="2,000 jobs, smaller tables")
    parser.add_argument("--systems", help=f"comma-separated, from: {', '.join(INFO)}")
    parser.add_argument("--steps", help="comma-separated: enqueue, bulk, process1, features-on, "
                        "process2, "
                        "latency, growth-empty, growth, growth-analyze, limits, flow-concurrency, "
                        "flow-rate, flow-claim, aenqueue, api-submit, debounce, cost-rate, output, "
                        "waits, pools, workflows, "
                        "schedules; flow for the three flow steps")  # fmt: skip
    parser.add_argument(
        "--repeat", type=int, help="runs of each process and growth step (2; 1 with --quick)"
    )
    parser.add_argument("--chit-ref", help="measure chit from `git archive REF` (e.g. HEAD)")
    parser.add_argument(
        "--baseline", help="also measure chit from `git archive REF`, taking turns (before/after)"
    )
    parser.add_argument("--profile", action="store_true", help="py-spy on chit's workers")
    parser.add_argument("--no-docs", action="store_true", help="leave docs/ alone")
    parser.add_argument(
        "--no-wait", action="store_true", help="do not wait for an idle machine before each run"
    )
    bench = Bench(parser.parse_args())
    try:
        bench.main()
    except KeyboardInterrupt:
        print("\ninterrupted: stopping everything this run started", file=sys.stderr)
        raise SystemExit(130) from None
    finally:
        bench.close()


if __name__ == "__main__":
    main()
