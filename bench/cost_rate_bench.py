"""Whether `cost_rate` holds (issue 25: "held within 5 % over 10 s, with and
without report_cost"): real `chit worker` processes run kind `spend`
(bench/cost_app.py) with cost_rate 2500/s against a backlog of jobs of
varied cost (1 to 100, seeded), for 10 s, twice: with each job's estimate
standing, and with each handler reporting what it really spent (30 % to 100 %
of its estimate, as a call reserved at its max tokens spends less), which
frees the rest of the window for later claims.

The spend is read per sliding 1 s window, from the attempts' starts by the
database's clock (each job's started_at; none is retried) and what each run
spent (its handler's log): the worst window against the limit (over it by at
most 5 % is the bar) and the mean per window (how much of the budget was used).

Not a test: prints figures; bounded in time.

    .venv/bin/python bench/cost_rate_bench.py [--seconds 10] [--workers 2]
        [--postgres URL] [--redis] [--database-url URL] [--json]
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path

import psycopg

import chit
from chit.jobs import JobFilter
from chit.limits import Rate
from chit.settings import Settings

HERE = Path(__file__).resolve().parent
PG_DEFAULT = "postgresql://postgres@127.0.0.1:5432/postgres"
RATE = "2500/s"
MODES = {"estimate": False, "report_cost": True}


def run_mode(url: str, mode: str, seconds: float, workers: int, tmp: Path) -> dict[str, float]:
    """One mode's run, in a queue of its own: the jobs the other mode left
    queued stay there."""
    report = MODES[mode]
    limit = Rate.parse(RATE)
    log = tmp / f"spent-{mode}.log"
    env = os.environ | {
        "CHIT_DATABASE_URL": url,
        "BENCH_COST_RATE": RATE,
        "BENCH_COST_LOG": str(log),
        "PYTHONPATH": str(HERE),
    }
    queue = chit.Queue(settings=Settings(database_url=url))
    queue.task("spend", cost_rate=RATE)(lambda job, body: None)
    rng = random.Random(25)
    # More than the limit lets start in the time: the backlog never runs dry.
    costs = [rng.randint(1, 100) for _ in range(int(limit.count / 30 * (seconds + 2)))]
    requests = [
        chit.JobRequest(
            "spend",
            {"cost": c, "actual": max(1, round(c * rng.uniform(0.3, 1.0))) if report else None},
            cost=c,
            queue=f"cost-{mode}",
        )
        for c in costs
    ]
    cmd = [sys.executable, "-m", "chit", "worker", "--app", "cost_app:queue",
           "--concurrency", "8", "--log-level", "WARNING", "--queues", f"cost-{mode}"]  # fmt: skip
    procs = [subprocess.Popen(cmd, env=env, cwd=HERE) for _ in range(workers)]
    try:
        for n in range(0, len(requests), 1000):
            queue.enqueue_many(requests[n : n + 1000])
        time.sleep(seconds + 1)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(30)
    spent: dict[str, int] = {}
    for line in log.read_text().splitlines():
        job_id, _attempt, cost = line.split()
        spent[job_id] = int(cost)
    starts: list[tuple[float, int]] = []
    cursor = None
    while True:
        page = queue.store.list(
            JobFilter(kind="spend", queue=f"cost-{mode}"), limit=1000, cursor=cursor
        )
        starts += [
            (j.started_at.timestamp(), spent[j.id])
            for j in page.jobs
            if j.started_at is not None and j.id in spent
        ]
        cursor = page.next_cursor
        if cursor is None:
            break
    queue.close()
    return windows(sorted(starts), limit, seconds)


def windows(starts: list[tuple[float, int]], limit: Rate, seconds: float) -> dict[str, float]:
    """The worst and the mean spend per sliding window of the limit's period,
    over the first `seconds` seconds of starts (the workers stopped after)."""
    t0 = starts[0][0]
    times = [t for t, _ in starts]
    sums = [0]
    for _, cost in starts:
        sums.append(sums[-1] + cost)
    period = limit.seconds
    last = t0 + seconds - period
    worst = 0
    for i, t in enumerate(times):
        if t > last:
            break
        j = bisect.bisect_left(times, t + period)
        worst = max(worst, sums[j] - sums[i])
    end = bisect.bisect_left(times, t0 + seconds)
    mean = sums[end] / seconds * period
    return {
        "limit": limit.count,
        "worst_window": worst,
        "worst_ratio": worst / limit.count,
        "mean_window": mean,
        "used": mean / limit.count,
        "jobs": end,
    }


def measure(
    name: str, fresh: Callable[[], AbstractContextManager[str]], seconds: float, workers: int
) -> dict[str, dict[str, float]]:
    """Both modes on one database (`fresh()`), one after the other."""
    out = {}
    with tempfile.TemporaryDirectory() as tmp, fresh() as url:
        for mode in MODES:
            found = run_mode(url, mode, seconds, workers, Path(tmp))
            out[mode] = found
            print(
                f"{name:<10} {mode:<11} cost_rate {RATE}: worst 1 s window"
                f" {found['worst_window']:,} ({found['worst_ratio']:.1%} of the limit), mean"
                f" {found['mean_window']:,.0f} ({found['used']:.1%} used),"
                f" {found['jobs']:,} jobs in {seconds:g} s",
                flush=True,
            )
            # The last starts leave the window before the next mode's first.
            time.sleep(Rate.parse(RATE).seconds)
    return out


@contextmanager
def fresh_sqlite() -> Iterator[str]:
    with tempfile.TemporaryDirectory() as tmp:
        yield f"sqlite:///{Path(tmp) / 'bench.db'}"


@contextmanager
def fresh_postgres(admin: str) -> Iterator[str]:
    name = f"chit_cost_bench_{os.getpid()}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield admin.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


@contextmanager
def fresh_redis() -> Iterator[str]:
    sys.path.insert(0, str(HERE))
    import services  # bench/services.py: a redis-server as the bench runs it

    with tempfile.TemporaryDirectory() as tmp:
        redis = services.Redis(Path(tmp) / "redis.log")
        try:
            yield redis.url
        finally:
            redis.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="per run (default 10)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--postgres", default=PG_DEFAULT, help="a PostgreSQL server's database")
    parser.add_argument("--redis", action="store_true", help="Redis too (a redis-server started)")
    parser.add_argument("--database-url", help="measure only this database")
    parser.add_argument("--json", action="store_true", help="the figures as a last JSON line")
    args = parser.parse_args()
    print(f"chit {chit.__version__}; load average before: {os.getloadavg()[0]:.2f}")
    figures: dict[str, object] = {}
    only = args.database_url
    backends: dict[str, Callable[[], AbstractContextManager[str]]] = {
        "SQLite": fresh_sqlite,
        "PostgreSQL": lambda: fresh_postgres(args.postgres),
    }
    if args.redis:
        backends["Redis"] = fresh_redis
    if only is not None:  # one database, made fresh by the caller (bench/run.py)
        backends = {"given": lambda: nullcontext(only)}
    for name, fresh in backends.items():
        figures[name] = measure(name, fresh, args.seconds, args.workers)
    if args.json:  # one database's figures flat, as bench/run.py reads them
        print(json.dumps({"ok": True, **(figures["given"] if only else figures)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
