"""The fault run: does chit keep every job it acknowledged while its processes
and its database are killed under load? (docs/operations.md, "Fault run")

    .venv/bin/python scripts/fault_run.py --seconds 120            # PostgreSQL
    .venv/bin/python scripts/fault_run.py --backend sqlite --seconds 60

It starts a private PostgreSQL server (initdb in a temporary directory, a free
port: the shared server is never touched) or a SQLite file, a real `chit
serve` and two real `chit worker` processes on the test app's `record` task
(tests/support/e2e_app.py: each run appends the job id to a file, so runs are
counted outside the store). Threads POST jobs with an Idempotency-Key each,
retrying 503s and connection errors with the same key as Retry-After says,
while a fault loop `kill -9`s the API or a worker (and starts it again) and
restarts PostgreSQL with `pg_ctl restart -m immediate` (back within a second)
or stops it so for `--pg-down` seconds (an outage the API must answer with
503 and the workers must wait out). Then the faults stop,
every process is restarted cleanly, and once every acknowledged job has
finished the figures are printed. It exits 1 when an acknowledged job is lost,
the API answered a 5xx other than 503 or a stored job breaks one of the state
machine's invariants (tests/support/invariants.py), 2 when the run was too
short to restart PostgreSQL twice.
"""

from __future__ import annotations

import argparse
import collections
import os
import platform
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the private cluster and the test app

import chit  # noqa: E402
from chit.jobs import Job, JobFilter, State  # noqa: E402
from support.invariants import BROKEN_INVARIANTS  # noqa: E402
from support.pg_cluster import Cluster  # noqa: E402
from support.processes import child_env, free_port  # noqa: E402

APP = "support.e2e_app:queue"
# Retrying one submission gives up after this long (then it is not acknowledged).
SUBMIT_PATIENCE = 120.0
WORKERS = 2


# The database


class Database:
    """Where the run's jobs live; `crash` stops it as a crash would, when it
    can be crashed, and starts it again `down` seconds later."""

    url: str
    restartable = False

    def crash(self, down: float) -> None:
        raise NotImplementedError

    def version(self) -> str:
        raise NotImplementedError

    def broken(self) -> list[tuple[str, str]]:
        """The jobs that break one of the state machine's invariants."""
        raise NotImplementedError

    def destroy(self) -> None:
        pass


class PrivatePostgres(Database):
    restartable = True

    def __init__(self) -> None:
        self.cluster = Cluster()
        self.cluster.start()
        self.url = self.cluster.url()

    def crash(self, down: float) -> None:
        # Every server process quits at once, as in a crash; the start recovers from the WAL.
        if not down:
            self.cluster.restart("immediate")
            return
        self.cluster.stop("immediate")
        time.sleep(down)
        self.cluster.start()

    def version(self) -> str:
        with psycopg.connect(self.url) as conn:
            row = conn.execute("SHOW server_version").fetchone()
        return f"PostgreSQL {row[0] if row else '?'}"

    def broken(self) -> list[tuple[str, str]]:
        with psycopg.connect(self.url) as conn:
            return [(r[0], r[1]) for r in conn.execute(BROKEN_INVARIANTS)]

    def destroy(self) -> None:
        self.cluster.destroy()


class SqliteFile(Database):
    def __init__(self, path: Path) -> None:
        self.path = path
        self.url = f"sqlite:///{path}"

    def version(self) -> str:
        return f"SQLite {sqlite3.sqlite_version}"

    def broken(self) -> list[tuple[str, str]]:
        with closing(sqlite3.connect(self.path)) as conn:
            return [(r[0], r[1]) for r in conn.execute(BROKEN_INVARIANTS)]


# The processes


class Child:
    """One `chit` process, started again after each kill; each incarnation's
    stderr in a file of its own (NAME.N.stderr), for the evidence."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], logs: Path) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.logs = logs
        self.incarnation = 0
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.incarnation += 1
        with open(self.stderr_path(), "wb") as err:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "chit", *self.argv],
                cwd=self.logs,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )

    def stderr_path(self, incarnation: int | None = None) -> Path:
        return self.logs / f"{self.name}.{incarnation or self.incarnation}.stderr"

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def kill(self) -> None:
        assert self.popen is not None
        self.popen.send_signal(signal.SIGKILL)
        self.popen.wait()

    def stop(self, timeout: float = 60) -> int | None:
        """SIGTERM and wait: the exit status of a graceful stop (None: it had to be killed)."""
        if self.popen is None or self.popen.poll() is not None:
            return None if self.popen is None else self.popen.returncode
        self.popen.send_signal(signal.SIGTERM)
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None


class Stack:
    """`chit serve` and WORKERS `chit worker` processes on one database."""

    def __init__(self, database: Database, logs: Path, lease: float) -> None:
        clean = {k: v for k, v in os.environ.items() if not k.startswith("CHIT_")}
        env = child_env(
            clean,
            CHIT_DATABASE_URL=database.url,
            CHIT_LEASE_SECONDS=str(lease),
            PYTHONUNBUFFERED="1",
        )
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        serve = ["serve", "--app", APP, "--port", str(port), "--log-level", "WARNING"]
        self.api = Child("api", serve, env, logs)
        self.workers = [
            Child(f"worker{n}", ["worker", "--app", APP], env, logs) for n in range(WORKERS)
        ]

    def children(self) -> list[Child]:
        return [self.api, *self.workers]

    def start(self) -> None:
        for child in self.children():
            child.start()
        self.wait_api()

    def wait_api(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if not self.api.alive():
                self.api.start()  # it may have started while the database was down
            time.sleep(0.2)
        raise RuntimeError(f"the API did not answer /readyz in {timeout}s")

    def stop(self) -> dict[str, int | None]:
        return {child.name: child.stop() for child in self.children()}


# Submitting


@dataclass
class Tally:
    """What the submitters saw; shared by their threads under `lock`."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    acknowledged: dict[str, str] = field(default_factory=dict)  # Idempotency-Key -> job id
    statuses: collections.Counter[int] = field(default_factory=collections.Counter)
    transport_errors: collections.Counter[str] = field(default_factory=collections.Counter)
    refused: list[tuple[int, str]] = field(default_factory=list)  # a status not retried
    abandoned: int = 0  # retried for SUBMIT_PATIENCE seconds without an answer


def retry_delay(response: httpx.Response | None, attempt: int) -> float:
    """Retry-After when the API gave one; a short doubling delay otherwise."""
    if response is not None:
        try:
            return min(float(response.headers["Retry-After"]), 30.0)
        except (KeyError, ValueError):
            pass
    return 0.1 * 2.0 ** min(attempt, 4)  # at most 1.6 s


def submit(http: httpx.Client, body: dict[str, object], tally: Tally) -> None:
    """POST one job until it is acknowledged (202, or 200 for a retry whose
    first try was stored), refused, or SUBMIT_PATIENCE runs out."""
    key = str(uuid.uuid4())
    give_up = time.monotonic() + SUBMIT_PATIENCE
    for attempt in range(10_000):
        response: httpx.Response | None = None
        try:
            response = http.post("/jobs", json=body, headers={"Idempotency-Key": key})
        except httpx.TransportError as e:
            with tally.lock:
                tally.transport_errors[type(e).__name__] += 1
        else:
            with tally.lock:
                tally.statuses[response.status_code] += 1
                if response.status_code in (200, 202):
                    tally.acknowledged[key] = response.json()["job_id"]
                    return
                if response.status_code != 503:
                    tally.refused.append((response.status_code, response.text[:500]))
                    return
        delay = retry_delay(response, attempt)
        if time.monotonic() + delay > give_up:
            break
        time.sleep(delay)
    with tally.lock:
        tally.abandoned += 1


def submitter(url: str, period: float, body: dict[str, object], until: float, tally: Tally) -> None:
    """Submit one job every `period` seconds until `until` (monotonic); a
    submission that is being retried delays the next one, it does not burst."""
    with httpx.Client(base_url=url, timeout=10) as http:
        next_at = time.monotonic()
        while next_at < until:
            time.sleep(max(0.0, next_at - time.monotonic()))
            submit(http, body, tally)
            next_at = max(next_at + period, time.monotonic())


# The faults


RESTART, OUTAGE = "restart PostgreSQL", "stop PostgreSQL"
FAULTS = ("kill the API", "kill a worker", RESTART, OUTAGE)


def apply_fault(
    fault: str, stack: Stack, database: Database, pg_down: float, rng: random.Random
) -> None:
    if fault == "kill the API":
        stack.api.kill()
        stack.api.start()
        stack.wait_api()
    elif fault == "kill a worker":
        worker = rng.choice(stack.workers)
        worker.kill()
        worker.start()
    elif fault == RESTART:
        database.crash(down=0)
    else:
        database.crash(down=pg_down)


@dataclass(frozen=True)
class FaultPlan:
    every: tuple[float, float]  # seconds between faults, drawn at random
    pg_down: float  # seconds a PostgreSQL outage lasts
    seed: int


def fault_loop(
    stack: Stack,
    database: Database,
    plan: FaultPlan,
    stop: threading.Event,
    applied: collections.Counter[str],
) -> None:
    """One fault at a time, at random intervals, in rounds that shuffle every
    kind of fault: each happens about as often as the others."""
    rng = random.Random(plan.seed)
    kinds = [f for f in FAULTS if database.restartable or f not in (RESTART, OUTAGE)]
    while True:
        round_ = rng.sample(kinds, len(kinds))
        for fault in round_:
            if stop.wait(rng.uniform(*plan.every)):
                return
            started = time.monotonic()
            try:
                apply_fault(fault, stack, database, plan.pg_down, rng)
            except Exception as e:  # the run goes on; the report counts it
                applied[f"{fault} failed"] += 1
                print(f"  fault: {fault} failed: {e!r}", flush=True)
                continue
            applied[fault] += 1
            print(f"  fault: {fault} ({time.monotonic() - started:.1f}s)", flush=True)


# Reading the outcome


def all_jobs(queue: chit.Queue) -> dict[str, Job]:
    jobs: dict[str, Job] = {}
    cursor = None
    while True:
        page = queue.store.list(JobFilter(), 1000, cursor)
        jobs.update((job.id, job) for job in page.jobs)
        cursor = page.next_cursor
        if cursor is None:
            return jobs


def wait_terminal(queue: chit.Queue, ids: set[str], timeout: float) -> dict[str, Job]:
    """Every stored job once each of `ids` is terminal (or missing), or when
    `timeout` runs out."""
    deadline = time.monotonic() + timeout
    while True:
        jobs = all_jobs(queue)
        pending = [i for i in ids if i in jobs and not jobs[i].state.terminal]
        if not pending or time.monotonic() >= deadline:
            return jobs
        time.sleep(1)


def count_runs(runs: Path) -> collections.Counter[str]:
    """How many times each job's handler ran to its end, from the workers' files."""
    counts: collections.Counter[str] = collections.Counter()
    for path in runs.glob("*.log"):
        counts.update(path.read_text().split())
    return counts


def first_traceback(logs: Path, prefix: str) -> str | None:
    for path in sorted(logs.glob(f"{prefix}*.stderr")):
        text = path.read_text(errors="replace")
        at = text.find("Traceback")
        if at >= 0:
            return f"{path.name}:\n{text[max(0, at - 300) : at + 3000]}"
    return None


def commit() -> str:
    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)
        return done.stdout.strip()

    dirty = "-dirty" if git("status", "--porcelain", "--untracked-files=no") else ""
    return (git("rev-parse", "--short", "HEAD") or "unknown") + dirty


# The report


@dataclass
class Outcome:
    acknowledged: set[str]
    jobs: dict[str, Job]
    runs: collections.Counter[str]
    tally: Tally
    faults: collections.Counter[str]
    graceful_exits: dict[str, int | None]
    seconds: float


def status_classes(statuses: collections.Counter[int]) -> dict[str, int]:
    classes: collections.Counter[str] = collections.Counter()
    for status, n in statuses.items():
        classes[f"{status // 100}xx"] += n
    return dict(sorted(classes.items()))


def report(outcome: Outcome, database: Database, logs: Path) -> tuple[int, int, int]:
    """Print the figures; returns (lost, 5xx other than 503, jobs that break an
    invariant)."""
    acked, jobs, tally = outcome.acknowledged, outcome.jobs, outcome.tally
    missing = [i for i in acked if i not in jobs]
    states = collections.Counter(jobs[i].state.value for i in acked if i in jobs)
    not_succeeded = [i for i in acked if i in jobs and jobs[i].state is not State.SUCCEEDED]
    lost = len(missing) + len(not_succeeded)
    duplicates = sum(n - 1 for n in outcome.runs.values() if n > 1)
    bad_5xx = sum(n for s, n in tally.statuses.items() if s >= 500 and s != 503)
    broken = database.broken()
    lines = [
        f"duration           {outcome.seconds:.0f} s of faults and submissions",
        f"faults             {dict(outcome.faults)}",
        f"acknowledged jobs  {len(acked)}",
        f"succeeded          {states.get('succeeded', 0)}",
        f"lost               {lost} (missing {len(missing)}, not succeeded {len(not_succeeded)}:"
        f" {dict(states - collections.Counter(succeeded=states['succeeded']))})",
        f"handler runs       {sum(outcome.runs.values())} (duplicates run: {duplicates};"
        f" jobs with more than one attempt: {sum(1 for j in jobs.values() if j.attempts > 1)})",
        f"stored jobs        {len(jobs)} (not acknowledged: {len(set(jobs) - acked)})",
        f"broken invariants  {len(broken)} (jobs in a state they cannot be in){_few(broken)}",
        f"responses          {status_classes(tally.statuses)}; by status {dict(tally.statuses)}",
        f"connection errors  {dict(tally.transport_errors)}",
        f"refused (not 503)  {len(tally.refused)}; abandoned after retries {tally.abandoned}",
        f"5xx other than 503 {bad_5xx}",
        f"graceful stops     {outcome.graceful_exits} (exit statuses before the clean restart)",
        f"versions           Python {platform.python_version()}, {database.version()},"
        f" chit {chit.__version__} at {commit()}",
        f"logs               {logs}",
    ]
    print("\n".join(lines))
    for status, text in tally.refused[:5]:
        print(f"  refused: {status} {text}")
    for job_id in (missing + not_succeeded)[:10]:
        job = jobs.get(job_id)
        print(
            f"  lost: {job_id} {job.state.value if job else 'missing'} {job.error if job else ''}"
        )
    if bad_5xx and (trace := first_traceback(logs, "api")):
        print(f"the API's first traceback, {trace}")
    return lost, bad_5xx, len(broken)


def _few(broken: list[tuple[str, str]]) -> str:
    return "".join(f"; {job_id} {state}" for job_id, state in broken[:5])


# The run


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=["postgres", "sqlite"], default="postgres")
    p.add_argument("--seconds", type=float, default=120, help="submitting under faults")
    p.add_argument("--rate", type=float, default=50, help="jobs submitted a second, in all")
    p.add_argument("--threads", type=int, default=8, help="submitting threads")
    p.add_argument(
        "--fault-every", type=float, nargs=2, default=(3.0, 9.0), metavar=("MIN", "MAX"),
        help="seconds between faults, drawn at random (default 3 to 9)",
    )  # fmt: skip
    p.add_argument("--lease", type=float, default=10, help="CHIT_LEASE_SECONDS of the workers")
    p.add_argument(
        "--job-seconds", type=float, default=0.05, help="each job's sleep: kills catch jobs running"
    )
    p.add_argument("--pg-down", type=float, default=5, help="seconds of a PostgreSQL outage")
    p.add_argument(
        "--settle", type=float, default=300, help="seconds to wait for the jobs at the end"
    )
    p.add_argument("--seed", type=int, default=None)
    return p.parse_args(argv)


def open_database(backend: str, logs: Path) -> Database:
    if backend == "postgres":
        return PrivatePostgres()
    return SqliteFile(logs / "chit.db")


def load_under_faults(
    args: argparse.Namespace, stack: Stack, database: Database, runs: Path, seed: int
) -> tuple[Tally, collections.Counter[str], float]:
    """Submit for `args.seconds` while the fault loop runs; returns what the
    submitters saw, the faults applied and how long it all took."""
    tally, faults, stop = Tally(), collections.Counter[str](), threading.Event()
    started = time.monotonic()
    payload = {"dir": str(runs), "seconds": args.job_seconds}
    body: dict[str, object] = {"kind": "record", "payload": payload}
    load = (stack.url, args.threads / args.rate, body, started + args.seconds, tally)
    # Daemons: on Ctrl-C the run ends without waiting for them.
    submitters = [
        threading.Thread(target=submitter, args=load, daemon=True) for _ in range(args.threads)
    ]
    plan = FaultPlan(tuple(args.fault_every), args.pg_down, seed)
    breaker = threading.Thread(
        target=fault_loop, args=(stack, database, plan, stop, faults), daemon=True
    )
    for t in [*submitters, breaker]:
        t.start()
    try:
        stop.wait(args.seconds)
    finally:
        stop.set()
        breaker.join()
    for t in submitters:
        t.join()
    return tally, faults, time.monotonic() - started


def run(args: argparse.Namespace, database: Database, logs: Path) -> int:
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    subprocess.run(
        [sys.executable, "-m", "chit", "migrate", "--database-url", database.url],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    runs = logs / "runs"
    runs.mkdir()
    stack = Stack(database, logs, args.lease)
    queue = chit.Queue(database.url)
    try:
        stack.start()
        print(
            f"fault run on {database.url} (seed {seed}), API {stack.url}, logs {logs}", flush=True
        )
        tally, faults, seconds = load_under_faults(args, stack, database, runs, seed)
        print("faults stopped; restarting every process cleanly", flush=True)
        graceful = stack.stop()
        stack.start()
        acked = set(tally.acknowledged.values())
        jobs = wait_terminal(queue, acked, args.settle)
    finally:
        queue.close()
        stack.stop()
    outcome = Outcome(acked, jobs, count_runs(runs), tally, faults, graceful, seconds)
    lost, bad_5xx, broken = report(outcome, database, logs)
    if lost or bad_5xx or broken:
        return 1
    if database.restartable and faults[RESTART] < 2:
        print("PostgreSQL was restarted fewer than 2 times: run longer (--seconds)")
        return 2
    return 0


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    logs = Path(tempfile.mkdtemp(prefix=f"chit-fault-{args.backend}-"))
    database = open_database(args.backend, logs)
    try:
        return run(args, database, logs)
    finally:
        database.destroy()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
